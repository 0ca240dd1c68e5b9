"""A queue kept in a column of ``assets`` (issues 48 and 50): an asset is due for a job while the
column holds a time, and a relay leases it by moving that time past a lease, so a relay that
died gives its jobs back. The malware scan (``scan_due_at``) and image facts (``facts_due_at``)
queues are this one mechanism.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from coffer_kit.contract.timeutil import as_utc, utcnow
from coffer_kit.db import Database, KeyedRead
from coffer_metadata.models import Asset

_assets = Asset.__table__  # type: ignore[attr-defined]


class DueQueue:
    def __init__(self, column: str) -> None:
        self.due = _assets.c[column]
        # Pending jobs and the earliest due, read before any claim (the partial index alone): an
        # idle queue costs each relay's poll one read, never a write transaction (SQLite's
        # single writer).
        self._queue = KeyedRead(
            sa.select(sa.func.count().label("pending"), sa.func.min(self.due).label("due")).where(
                self.due.is_not(None)
            )
        )

    async def idle(self, database: Database) -> int | None:
        """How many jobs are pending when none is due yet (no claim needed); None when one is."""
        queue = await self._queue.first(database, {})
        if queue is None or not queue.pending or as_utc(queue.due) > utcnow():
            return int(queue.pending) if queue is not None else 0
        return None

    def lease(
        self, session: Session, columns: Sequence[str], *, limit: int, lease_seconds: float
    ) -> tuple[list[Any], int]:
        """Lease up to ``limit`` due jobs, oldest due first: their ``id`` and ``columns``; and
        how many are pending in all."""
        now = utcnow()
        due = (
            sa.select(_assets.c.id, *(_assets.c[c] for c in columns))
            .where(self.due.is_not(None), self.due <= now)
            .order_by(self.due)
            .limit(limit)
        )
        if session.get_bind().dialect.name == "postgresql":
            due = due.with_for_update(skip_locked=True)  # (SQLite has one writer)
        connection = session.connection()
        rows = list(connection.execute(due).all())
        if rows:
            connection.execute(
                sa.update(_assets)
                .where(_assets.c.id.in_([r.id for r in rows]))
                .values({self.due.name: now + timedelta(seconds=lease_seconds)})
            )
        pending = connection.execute(
            sa.select(sa.func.count()).select_from(_assets).where(self.due.is_not(None))
        ).scalar_one()
        return rows, int(pending)
