"""Per-key rate limits (docs/contract.md §7): 429 rate_limited with Retry-After, one budget per
key, in process and shared through a real Redis."""

from __future__ import annotations

import secrets

import pytest

from coffer_edge.ratelimit import RateLimiter
from coffer_kit.contract.errors import CofferError

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "redis"])
def limiter(request: pytest.FixtureRequest) -> RateLimiter:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    return RateLimiter("5/minute", redis_url)


async def test_a_key_gets_its_budget_then_429_with_retry_after(limiter: RateLimiter) -> None:
    # Fresh key ids: Redis counters outlive a test run.
    first, second = (f"key_{secrets.token_hex(8)}" for _ in range(2))
    for _ in range(5):
        await limiter.check(first)
    with pytest.raises(CofferError) as refused:
        await limiter.check(first)
    assert (refused.value.status, refused.value.code) == (429, "rate_limited")
    assert refused.value.headers is not None
    assert 1 <= int(refused.value.headers["Retry-After"]) <= 60
    await limiter.check(second)  # another key of the same organization has its own budget


async def test_an_unreachable_redis_counts_in_process_instead() -> None:
    """Nothing listens on port 1: the API stays up and the limit still holds, per edge (issue 23:
    every request went through while Redis was down)."""
    limiter = RateLimiter("2/minute", "redis://127.0.0.1:1/0")
    for _ in range(2):
        await limiter.check("key_x")
    with pytest.raises(CofferError) as refused:
        await limiter.check("key_x")
    assert refused.value.status == 429


async def test_failures_are_counted_apart_from_the_check(limiter: RateLimiter) -> None:
    client = f"auth-failures:{secrets.token_hex(4)}"
    for _ in range(5):
        await limiter.refuse_if_spent(client, "Too many failures")  # checking counts nothing
        await limiter.count(client)
    with pytest.raises(CofferError) as refused:
        await limiter.refuse_if_spent(client, "Too many failures")
    assert refused.value.message.startswith("Too many failures (limit 5 per 1 minute)")


async def test_installs_sharing_a_redis_keep_their_own_counters(redis_url: str) -> None:
    staging = RateLimiter("2/minute", redis_url, key_prefix=f"staging-{secrets.token_hex(4)}")
    production = RateLimiter("2/minute", redis_url, key_prefix=f"production-{secrets.token_hex(4)}")
    key = f"key_{secrets.token_hex(8)}"
    for _ in range(2):
        await staging.check(key)
    with pytest.raises(CofferError):
        await staging.check(key)
    # The same key id in the other install still has its whole budget.
    for _ in range(2):
        await production.check(key)
