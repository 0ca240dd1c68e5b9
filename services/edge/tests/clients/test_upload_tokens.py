"""The upload-token client's cache of minters: an answer is reused for the cache's seconds, but
never past the minting key's own expiry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web

from coffer_edge.clients.upload_tokens import UploadTokenClient
from coffer_kit.contract.timeutil import isoformat
from coffer_kit.contract.wire import MinterRef
from coffer_kit.internal import internal_client

pytestmark = pytest.mark.anyio


class StandInAuth:
    """auth's minters endpoint on a real socket: counts calls; the key expires at ``until``."""

    def __init__(self) -> None:
        self.calls = 0
        self.until: datetime | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/internal/v1/upload-tokens/minters", self.minters)
        return app

    async def minters(self, _request: web.Request) -> web.Response:
        self.calls += 1
        acting = self.until is None or datetime.now(UTC) < self.until
        body = {
            "acting": [acting],
            "quotaBytes": [1024],
            "confinedTo": [None],
            "actingUntil": [isoformat(self.until) if self.until else None],
        }
        return web.json_response(body)


@pytest.fixture
async def auth(serve: Any) -> AsyncIterator[tuple[StandInAuth, UploadTokenClient]]:
    stand_in = StandInAuth()
    http = internal_client(await serve(stand_in.app()), "token", timeout=5)
    yield stand_in, UploadTokenClient(http, cache_seconds=5, cache_size=100)
    await http.close()


async def test_a_minters_answer_is_not_reused_past_its_keys_expiry(
    auth: tuple[StandInAuth, UploadTokenClient],
) -> None:
    """A resumable upload's link was good for up to 5 s after its minting key expired (the
    key itself refused): the answer "acting" was reused for the cache's 5 s."""
    stand_in, client = auth
    ref = MinterRef(organization_id="org_1", key_id="key_1")
    stand_in.until = datetime.now(UTC) + timedelta(seconds=0.5)
    assert (await client.minter(ref)).acting
    assert (await client.minter(ref)).acting and stand_in.calls == 1  # reused before the expiry
    async with asyncio.timeout(5):
        while datetime.now(UTC) < stand_in.until:
            await asyncio.sleep(0.02)
    assert not (await client.minter(ref)).acting  # asked again: the key has expired
    assert stand_in.calls == 2

    stand_in.until = None  # a key without an expiry: reused for the cache's seconds
    other = MinterRef(organization_id="org_1", key_id="key_2")
    for _ in range(3):
        assert (await client.minter(other)).acting
    assert stand_in.calls == 3
