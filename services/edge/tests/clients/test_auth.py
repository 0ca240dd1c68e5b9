"""The auth client's cache: concurrent misses for one key make a single call to auth."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from coffer_edge.clients.auth import AuthClient, Principal
from coffer_kit.contract.errors import CofferError
from coffer_kit.internal import internal_client

pytestmark = pytest.mark.anyio

PRINCIPAL = {
    "organizationId": "org_1",
    "keyId": "key_1",
    "keyKind": "organization",
    "userId": None,
    "quotaBytes": 1024,
    "keyExpiresAt": None,
}
REFUSAL = {"error": {"code": "unauthorized", "message": "Unknown API key.", "requestId": "req_auth"}}


class StandInAuth:
    """auth's principal endpoint on a real socket: counts calls, and answers only when released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, str | None]] = []
        self.released = asyncio.Event()
        self.answer: tuple[int, dict[str, Any]] = (200, PRINCIPAL)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/internal/v1/principal", self.principal)
        return app

    async def principal(self, request: web.Request) -> web.Response:
        self.calls.append((request.headers.get("x-key-hash"), request.headers.get("x-organization-id")))
        await self.released.wait()
        status, body = self.answer
        return web.json_response(body, status=status)

    async def arrived(self, calls: int) -> None:
        """Wait until ``calls`` calls have reached the server."""
        async with asyncio.timeout(5):
            while len(self.calls) < calls:
                await asyncio.sleep(0.01)


@pytest.fixture
async def auth(serve: Any) -> AsyncIterator[tuple[StandInAuth, AuthClient]]:
    stand_in = StandInAuth()
    http = internal_client(await serve(stand_in.app()), "token", timeout=5)
    yield stand_in, AuthClient(http, cache_seconds=5, cache_size=100)
    await http.close()


def _counted(result: str) -> float:
    return REGISTRY.get_sample_value("coffer_auth_cache_requests_total", {"result": result}) or 0.0


async def _lookups(client: AuthClient, n: int, org: str | None = None) -> list[asyncio.Task[Principal]]:
    tasks = [asyncio.create_task(client.principal("hash_a", org, request_id=f"req_{i}")) for i in range(n)]
    await asyncio.sleep(0)  # every lookup has missed the cache and joined or started a call
    return tasks


async def test_concurrent_misses_make_one_call(auth: tuple[StandInAuth, AuthClient]) -> None:
    stand_in, client = auth
    shared_before = _counted("shared")
    tasks = await _lookups(client, 20)
    await stand_in.arrived(1)
    await asyncio.sleep(0.05)  # room for a second call, were there one
    stand_in.released.set()
    principals = await asyncio.gather(*tasks)
    assert stand_in.calls == [("hash_a", None)]
    assert {p.organization_id for p in principals} == {"org_1"}
    assert _counted("shared") - shared_before == 19
    # Cached afterwards: no call at all.
    await client.principal("hash_a", None, request_id="req_later")
    assert len(stand_in.calls) == 1


async def test_each_organization_header_is_its_own_call(auth: tuple[StandInAuth, AuthClient]) -> None:
    stand_in, client = auth
    tasks = await _lookups(client, 5, "org_1") + await _lookups(client, 5, "org_2")
    await stand_in.arrived(2)
    stand_in.released.set()
    await asyncio.gather(*tasks)
    assert sorted(stand_in.calls) == [("hash_a", "org_1"), ("hash_a", "org_2")]


async def test_a_failed_call_fails_its_waiters_only(auth: tuple[StandInAuth, AuthClient]) -> None:
    stand_in, client = auth
    stand_in.answer = (401, REFUSAL)
    tasks = await _lookups(client, 10)
    await stand_in.arrived(1)
    stand_in.released.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert len(stand_in.calls) == 1
    for outcome in outcomes:
        assert isinstance(outcome, CofferError)
        assert (outcome.status, outcome.code, outcome.message) == (401, "unauthorized", "Unknown API key.")
    # Not cached: the next lookup asks auth again, and gets its new answer.
    stand_in.answer = (200, PRINCIPAL)
    principal = await client.principal("hash_a", None, request_id="req_retry")
    assert principal.key_id == "key_1"
    assert len(stand_in.calls) == 2


async def test_a_cancelled_waiter_does_not_cancel_the_call(auth: tuple[StandInAuth, AuthClient]) -> None:
    stand_in, client = auth
    first, *others = await _lookups(client, 4)
    await stand_in.arrived(1)
    first.cancel()  # the waiter whose miss started the call
    await asyncio.sleep(0.05)
    stand_in.released.set()
    principals = await asyncio.gather(*others)
    assert [p.key_id for p in principals] == ["key_1"] * 3
    assert first.cancelled()
    assert len(stand_in.calls) == 1
    # The call finished for the others, so its answer was cached.
    await client.principal("hash_a", None, request_id="req_later")
    assert len(stand_in.calls) == 1


async def test_without_a_cache_concurrent_misses_still_share_one_call(serve: Any) -> None:
    stand_in = StandInAuth()
    async with internal_client(await serve(stand_in.app()), "token", timeout=5) as http:
        client = AuthClient(http, cache_seconds=0, cache_size=100)
        tasks = await _lookups(client, 8)
        await stand_in.arrived(1)
        stand_in.released.set()
        await asyncio.gather(*tasks)
        assert len(stand_in.calls) == 1
        await client.principal("hash_a", None, request_id="req_later")
        assert len(stand_in.calls) == 2
