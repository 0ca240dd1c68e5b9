"""Per-key rate limits (docs/contract.md §7): 429 rate_limited with Retry-After, one budget per
key, in process and shared through a real Redis."""

from __future__ import annotations

import secrets

import pytest

from coffer_edge.ratelimit import RateLimiter
from coffer_kit.errors import CofferError

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


async def test_an_unreachable_redis_lets_requests_through() -> None:
    # Nothing listens on port 1: a limiter outage must not take the API down.
    limiter = RateLimiter("1/minute", "redis://127.0.0.1:1/0")
    for _ in range(3):
        await limiter.check("key_x")


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
