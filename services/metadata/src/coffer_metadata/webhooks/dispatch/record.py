"""Record: an ended send as its attempt's row and its delivery's next step (done, retried on
the schedule, or failed), the endpoint's health (a 410 or days of failures disable it,
audited), and the deliveries whose retry window ended (docs/webhooks.md, "How delivery
works")."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from prometheus_client import Counter, Histogram
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session

from coffer_kit.contract.ids import WEBHOOK_ATTEMPT, new_id
from coffer_kit.contract.timeutil import as_utc, utcnow
from coffer_kit.contract.wire import SYSTEM
from coffer_kit.db import writer
from coffer_metadata import events as outbox
from coffer_metadata.models import WebhookEndpoint as EndpointRow
from coffer_metadata.webhooks import service
from coffer_metadata.webhooks.dispatch import statements as sql
from coffer_metadata.webhooks.dispatch.claim import Job

log = logging.getLogger("coffer.metadata.webhooks")


# An attempt's outcome and metrics live here, not in send.py: that module (and aiohttp, 7 MiB of
# idle RSS) loads with a dispatcher's first delivery, and the metrics are exported from start.
DELIVERIES = Counter(
    "coffer_webhook_deliveries_total",
    "Webhook delivery attempts by result: succeeded (2xx), failed (another status), gone (410: the "
    "endpoint is disabled), error (no answer: refused address, connection, timeout).",
    ["result"],
)
LATENCY = Histogram(
    "coffer_webhook_delivery_seconds",
    "Time from sending a webhook to its answer (or failure).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


@dataclass(slots=True)
class Outcome:
    """What one attempt got: the status (None: no answer, ``error`` says why), the start of
    the answer, how long it took."""

    status: int | None
    error: str | None
    response: str | None
    latency_ms: int
    started_at: datetime


@dataclass(slots=True)
class Record:
    """An ended send, as rows: the delivery's next step (bound parameters) and the attempt."""

    job: Job
    ok: bool
    gone: bool
    delivery: dict[str, Any]
    attempt: dict[str, Any]


def plan_record(job: Job, outcome: Outcome, *, now: datetime, schedule: list[float]) -> Record:
    """An attempt's row and its delivery's next step: retried on ``schedule`` (its last delay
    repeating) until its window ends, done on a 2xx, failed on a 410."""
    attempt = job.attempts + 1
    ok = outcome.status is not None and 200 <= outcome.status < 300
    gone = outcome.status == 410
    if ok:
        status, next_at = "succeeded", None
    elif gone:
        status, next_at = "failed", None
    else:
        delay = schedule[min(attempt - 1, len(schedule) - 1)] * random.uniform(0.9, 1.1)
        next_at = now + timedelta(seconds=delay)
        status = "pending" if next_at <= job.retry_until else "failed"
        next_at = next_at if status == "pending" else None
    return Record(
        job=job,
        ok=ok,
        gone=gone,
        delivery={
            "b_id": job.delivery_id,
            "b_token": job.lease_token,
            "b_status": status,
            "b_attempts": attempt,
            "b_next": next_at,
        },
        attempt={
            "id": new_id(WEBHOOK_ATTEMPT),
            "delivery_id": job.delivery_id,
            "endpoint_id": job.endpoint_id,
            "attempt": attempt,
            "result": "succeeded" if ok else "failed",
            "response_status": outcome.status,
            "error": outcome.error,
            "latency_ms": outcome.latency_ms,
            "response": outcome.response,
            "created_at": outcome.started_at,
        },
    )


def write_records(connection: Connection, records: list[Record]) -> None:
    """Each delivery's next step where this dispatcher still holds its lease, and every
    attempt whose delivery still exists (its endpoint may have been deleted meanwhile)."""
    ids = [r.job.delivery_id for r in records]
    existing = {row.id for row in connection.execute(sql.EXISTING, {sql.IDS: ids})}
    connection.execute(sql.RECORD, [r.delivery for r in records])
    attempts = [r.attempt for r in records if r.job.delivery_id in existing]
    if attempts:
        connection.execute(sql.NEW_ATTEMPTS, attempts)


def plan_health(engine: Engine, records: list[Record]) -> dict[str, list[Record]]:
    """The endpoints whose health the records may change (reads only): those with a
    failure, and those with a success that are marked failing. Most rounds: none."""
    if not records:
        return {}
    by_endpoint: dict[str, list[Record]] = {}
    for record in records:
        by_endpoint.setdefault(record.job.endpoint_id, []).append(record)
    failed = {e for e, rs in by_endpoint.items() if not all(r.ok for r in rs)}
    with engine.connect() as read:
        marked = {
            row.id for row in read.execute(sql.MARKED_FAILING, {sql.IDS: list(set(by_endpoint) - failed)})
        }
    return {e: rs for e, rs in by_endpoint.items() if e in failed or e in marked}


def write_health(
    session: Session, health: dict[str, list[Record]], *, now: datetime, disable_after: float
) -> None:
    """Each endpoint's failing time, cleared by a success; 410 disables it at once, and so do
    failures for ``disable_after`` seconds (COFFER_METADATA_WEBHOOK_DISABLE_AFTER_SECONDS;
    audited)."""
    if not health:
        return
    for row in session.scalars(sa.select(EndpointRow).where(sql.endpoints.c.id.in_(list(health)))):
        for record in health[row.id]:
            _endpoint_health(
                session, row, ok=record.ok, gone=record.gone, now=now, disable_after=disable_after
            )


def _endpoint_health(
    session: Session, row: EndpointRow, *, ok: bool, gone: bool, now: datetime, disable_after: float
) -> None:
    if ok:
        if row.failing_since is not None:
            row.failing_since = None
            session.add(row)
        return
    if row.failing_since is None:
        row.failing_since = now
    failing_for = (now - as_utc(row.failing_since)).total_seconds()
    reason = "gone" if gone else "failing" if failing_for >= disable_after else None
    if reason is not None and row.enabled:
        row.enabled, row.disabled_reason, row.updated_at = False, reason, now
        session.add(row)
        session.flush()
        outbox.record(
            session,
            org_id=row.organization_id,
            type="webhook.disabled",
            data=service.view(row),
            actor=SYSTEM,
            changes={"enabled": True},
            now=now,
        )
        log.warning("webhook endpoint disabled", extra={"endpoint_id": row.id, "reason": reason})
    session.add(row)


def expire_deliveries(engine: Engine) -> int:
    """Give up pending deliveries past their retry window that no dispatcher holds (those whose
    record never happened: a dispatcher that died at each attempt)."""
    now = utcnow()
    d = sql.deliveries
    with Session(writer(engine)) as session:
        expired = (
            session.connection()
            .execute(
                sa.update(d)
                .where(
                    d.c.status == "pending",
                    d.c.retry_until < now,
                    sa.or_(d.c.lease_until.is_(None), d.c.lease_until < now),
                )
                .values(status="failed", next_attempt_at=None)
            )
            .rowcount
        )
        session.commit()
    return int(expired or 0)
