"""A PATCH's lease renewals (routers/tus.py, ``_renewing``): a renewal on its way when the chunk
ends is let finish before the chunk is answered, never cancelled (issue 44: a cancelled renewal
could still reach metadata after the chunk's record, turning the lease kept for the writer's
next chunk back into a writing one, and another edge answered that next chunk 423)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from coffer_edge.routers import tus
from coffer_kit.contract.wire import TusUpload

pytestmark = pytest.mark.anyio


class Metadata:
    """metadata's renewal endpoint as edge sees it: a call that takes a while to land."""

    def __init__(self, takes: float) -> None:
        self.takes = takes
        self.started = 0
        self.landed = 0

    async def tus_renew(self, *_: Any, **__: Any) -> None:
        self.started += 1
        await asyncio.sleep(self.takes)
        self.landed += 1


def _upload() -> TusUpload:
    return TusUpload(
        id="tus_x",
        organization_id="org_x",
        asset_id="ast_x",
        key="org_x/ast_x/f",
        name="f",
        folder_id=None,
        mime_type="application/octet-stream",
        visibility="public",
        upload_metadata="",
        length=10,
        offset=0,
        resume=None,
        capability_hash=None,
        token_id=None,
        expires_at=datetime.now(UTC),
        completed=False,
        lock_token="lease",
    )


async def test_a_renewal_on_its_way_lands_before_the_chunk_is_answered() -> None:
    metadata = Metadata(takes=0.3)

    async def chunk() -> str:
        await asyncio.sleep(tus._FIRST_RENEWAL + 0.1)  # ends while the first renewal is on its way
        return "stored"

    assert await tus._renewing(metadata, _upload(), "req", chunk) == "stored"  # type: ignore[arg-type]
    assert (metadata.started, metadata.landed) == (1, 1)
    await asyncio.sleep(0.4)
    assert metadata.started == 1  # and none after the answer


async def test_no_renewal_starts_after_a_short_chunk() -> None:
    metadata = Metadata(takes=0.3)

    async def chunk() -> Any:
        return None

    await tus._renewing(metadata, _upload(), "req", chunk)  # type: ignore[arg-type]
    await asyncio.sleep(tus._FIRST_RENEWAL + 0.1)
    assert metadata.started == 0
