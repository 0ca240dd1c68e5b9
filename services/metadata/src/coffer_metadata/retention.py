"""Retention of metadata's bookkeeping (docs/operations.md, "Retention"): what the outbox, the
webhook delivery log and the resumable uploads leave behind is deleted on a schedule, a bounded
batch at a time, and counted (``coffer_retention_pruned_total{kind}``).

- ``event``: an outbox event that auth's audit log holds and the dispatcher has fanned out
  (or that no dispatcher took for twice the time), COFFER_METADATA_EVENT_RETENTION_DAYS after
  it (7);
- ``webhook_attempt``: an attempt of the delivery log, COFFER_METADATA_WEBHOOK_LOG_RETENTION_DAYS
  after it (30);
- ``webhook_delivery``: a finished delivery (succeeded or given up) as old, once no attempt of
  it is left;
- ``tus_upload``: a completed resumable upload past its expiry, 24 h after its last write (HEAD
  answers it until then).

Each pass runs every ``COFFER_METADATA_RETENTION_INTERVAL_SECONDS`` (600; 0: never) in every
metadata process, with jitter; each kind is deleted in transactions of at most
``RETENTION_BATCH`` rows (1,000), at most ``RETENTION_BATCHES_PER_PASS`` of them a
pass: a short lock each, whatever the backlog, which the next passes work through. Replicas
that prune at once delete disjoint or already-gone rows: each delete names rows by id and
skips what is gone.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta

import anyio.to_thread
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from coffer_kit.contract.timeutil import utcnow
from coffer_kit.db import writer
from coffer_kit.metrics import RETENTION_PRUNED
from coffer_metadata.models import Event, TusUpload, WebhookAttempt, WebhookDelivery

log = logging.getLogger("coffer.metadata.retention")

# Transactions of one kind in one pass, at most: the pass is bounded however large the backlog.
# Rows of a kind per transaction (internal tuning, not an operator's setting).
RETENTION_BATCH = 1000
RETENTION_BATCHES_PER_PASS = 10


_events = Event.__table__  # type: ignore[attr-defined]
_tus = TusUpload.__table__  # type: ignore[attr-defined]
_attempts = WebhookAttempt.__table__  # type: ignore[attr-defined]
_deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]

KINDS = ("event", "webhook_attempt", "webhook_delivery", "tus_upload")


def _stale(kind: str, now: datetime, *, event_days: int, log_days: int) -> sa.Select[tuple[str]]:
    """The ids of rows of ``kind`` past their retention (unbounded; the caller limits)."""
    if kind == "event":
        cutoff = now - timedelta(days=event_days)
        return sa.select(_events.c.id).where(
            _events.c.audited.is_(True),
            _events.c.created_at < cutoff,
            # Not before the dispatcher has made its deliveries (they keep their own body),
            # unless none has run for twice the retention: the outbox stays bounded without one.
            sa.or_(
                _events.c.dispatched.is_(True), _events.c.created_at < now - timedelta(days=2 * event_days)
            ),
        )
    if kind == "webhook_attempt":
        return sa.select(_attempts.c.id).where(_attempts.c.created_at < now - timedelta(days=log_days))
    if kind == "webhook_delivery":
        return sa.select(_deliveries.c.id).where(
            _deliveries.c.created_at < now - timedelta(days=log_days),
            _deliveries.c.status != "pending",
            ~sa.exists().where(_attempts.c.delivery_id == _deliveries.c.id),
        )
    if kind == "tus_upload":
        return sa.select(_tus.c.id).where(_tus.c.completed.is_(True), _tus.c.expires_at < now)
    raise ValueError(kind)


_TABLES = {
    "event": _events,
    "webhook_attempt": _attempts,
    "webhook_delivery": _deliveries,
    "tus_upload": _tus,
}


def prune_batch(
    engine: Engine, kind: str, now: datetime, *, batch: int, event_days: int, log_days: int
) -> int:
    """Delete at most ``batch`` rows of ``kind`` past their retention, in one transaction."""
    table = _TABLES[kind]
    stale = _stale(kind, now, event_days=event_days, log_days=log_days)
    with writer(engine).begin() as connection:
        ids = list(connection.execute(stale.limit(batch)).scalars())
        if not ids:
            return 0
        # The conditions again, on each row as the delete finds it: a delivery redelivered
        # (pending again) since the select is not deleted (PostgreSQL re-reads a row changed
        # meanwhile against them).
        assert stale.whereclause is not None
        result = connection.execute(sa.delete(table).where(table.c.id.in_(ids), stale.whereclause))
        return int(result.rowcount or 0)


def prune(
    engine: Engine,
    *,
    batch: int,
    event_days: int,
    log_days: int,
    now: datetime | None = None,
    batches: int = RETENTION_BATCHES_PER_PASS,
) -> dict[str, int]:
    """One retention pass: each kind's stale rows, at most ``batches`` × ``batch`` of each;
    answers the rows deleted by kind (and counts them in ``coffer_retention_pruned_total``)."""
    now = now or utcnow()
    pruned: dict[str, int] = {}
    # Attempts before deliveries: a finished delivery goes once its log is gone.
    for kind in KINDS:
        total = 0
        for _ in range(batches):
            done = prune_batch(engine, kind, now, batch=batch, event_days=event_days, log_days=log_days)
            total += done
            if done < batch:
                break
        if total:
            RETENTION_PRUNED.labels(kind).inc(total)
        pruned[kind] = total
    return pruned


async def prune_forever(run: Callable[[], dict[str, int]], *, interval: float) -> None:
    """``run()`` (a pass, in a worker thread) every ``interval`` seconds, with jitter so that
    replicas spread out, until cancelled. A failed pass is logged and tried again next time."""
    while True:
        await asyncio.sleep(interval * random.uniform(0.5, 1.5))
        try:
            pruned = await anyio.to_thread.run_sync(run)
        except SQLAlchemyError:
            log.warning("retention pass failed; will retry", exc_info=True)
            continue
        if any(pruned.values()):
            log.info("retention pass", extra={"event": "retention", **pruned})
