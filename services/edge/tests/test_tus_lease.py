"""A PATCH's lease (routers/tus.py). Its renewals (``_renewing``): a renewal on its way when the
chunk ends is let finish before the chunk is answered, never cancelled (issue 44: a cancelled
renewal could still reach metadata after the chunk's record, turning the lease kept for the
writer's next chunk back into a writing one, and another edge answered that next chunk 423).
Another edge's wait for it (``_past_kept_leases``), against metadata's answers as
``coffer_metadata.tus.lock`` gives them: 423 with ``keptFor``."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from coffer_edge.routers import tus
from coffer_kit.contract.errors import CofferError, upload_locked
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


class Lease:
    """An upload whose last writer, another edge, answered its chunk: the chunk's record lands
    in metadata ``record_takes`` seconds later (never, if None), and keeps the lease
    ``tus.KEEP_SECONDS`` for that writer. Until it lands, metadata answers a lock at the next
    offset 423 for 0.25 s (the record is on its way); then 423 for what is left of the kept
    lease; then the lease."""

    def __init__(self, record_takes: float | None) -> None:
        start = time.monotonic()
        self.landed = None if record_takes is None else start + record_takes
        self.free = None if self.landed is None else self.landed + tus.KEEP_SECONDS
        self.asked = 0

    async def lock(self) -> str:
        self.asked += 1
        now = time.monotonic()
        if self.landed is None or now < self.landed:
            raise upload_locked(0.25, recording=True)
        assert self.free is not None
        if now < self.free:
            raise upload_locked(self.free - now)
        return "taken"


async def test_another_edges_chunk_waits_for_a_slow_record_then_the_kept_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A record slow to land (seconds behind a busy pooler) is waited for, not answered 423 (a
    CI run's client met 423 mid-upload); a record that never lands is, within its bound."""
    monkeypatch.setattr(tus, "KEEP_SECONDS", 0.5)
    monkeypatch.setattr(tus, "RECORD_BOUND_SECONDS", 1.5)
    slow, lost = Lease(record_takes=2.2), Lease(record_takes=None)
    started = time.monotonic()
    taken, refused = await asyncio.gather(
        tus._past_kept_leases(slow.lock), tus._past_kept_leases(lost.lock), return_exceptions=True
    )
    assert taken == "taken"
    assert isinstance(refused, CofferError) and refused.status == 423 and refused.details is None
    assert time.monotonic() - started >= 1.5 + 0.5  # (the lost record's bound, then the kept lease's)
    # Asked at 0, 0.26, 0.77, 1.78 and 2.79 s (the record landed at 2.2, its lease kept to 2.7):
    # not every 0.26 s (11 asks), as it was, of a metadata slow to write already.
    assert slow.asked == 5, slow.asked
    assert lost.asked <= 5, lost.asked
