"""Retention of metadata's bookkeeping (coffer_metadata.retention, docs/operations.md): each
kind goes on its schedule and nothing before it, a pass is bounded, every row is counted, and
the service runs passes on its own."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from sqlalchemy.engine import Engine

from coffer_kit.contract.ids import WEBHOOK_DELIVERY, new_id
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.wire import ACTOR_HEADER
from coffer_metadata import retention
from coffer_metadata.models import Event, TusUpload, WebhookAttempt, WebhookDelivery

EVENT_DAYS, LOG_DAYS = 7, 30
_n = iter(range(10**9))


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_n):08d}"


def event(engine: Engine, *, age: timedelta, audited: bool = True, dispatched: bool = True) -> str:
    row = {
        "id": _id("evt"),
        "organization_id": "org_1",
        "type": "asset.created",
        "created_at": utcnow() - age,
        "data": "{}",
        "changes": None,
        "actor": "{}",
        "audited": audited,
        "dispatched": dispatched,
    }
    with engine.begin() as c:
        c.execute(sa.insert(Event.__table__), row)  # type: ignore[attr-defined]
    return str(row["id"])


def delivery(engine: Engine, *, age: timedelta, status: str = "succeeded", attempts: list[timedelta]) -> str:
    at = utcnow() - age
    delivery_id = _id("whd")
    with engine.begin() as c:
        c.execute(
            sa.insert(WebhookDelivery.__table__),  # type: ignore[attr-defined]
            {
                "id": delivery_id,
                "endpoint_id": "whe_1",
                "organization_id": "org_1",
                "event_id": _id("evt"),
                "event_type": "asset.created",
                "body": "{}",
                "status": status,
                "attempts": len(attempts),
                "next_attempt_at": at if status == "pending" else None,
                "retry_until": at + timedelta(days=3),
                "created_at": at,
            },
        )
        for number, attempt_age in enumerate(attempts, 1):
            c.execute(
                sa.insert(WebhookAttempt.__table__),  # type: ignore[attr-defined]
                {
                    "id": _id("wha"),
                    "delivery_id": delivery_id,
                    "endpoint_id": "whe_1",
                    "attempt": number,
                    "result": "succeeded",
                    "response_status": 200,
                    "latency_ms": 3,
                    "created_at": utcnow() - attempt_age,
                },
            )
    return delivery_id


def tus_upload(engine: Engine, *, expires_in: timedelta, completed: bool) -> str:
    upload_id = _id("tus")
    now = utcnow()
    with engine.begin() as c:
        c.execute(
            sa.insert(TusUpload.__table__),  # type: ignore[attr-defined]
            {
                "id": upload_id,
                "organization_id": "org_1",
                "asset_id": _id("ast"),
                "key": f"org_1/{upload_id}",
                "name": "a.bin",
                "mime_type": "application/octet-stream",
                "visibility": "private",
                "upload_metadata": "",
                "length": 10,
                "offset": 10 if completed else 0,
                "created_at": now - timedelta(days=2),
                "expires_at": now + expires_in,
                "completed": completed,
            },
        )
    return upload_id


def ids(engine: Engine, table: Any) -> set[str]:
    with engine.connect() as c:
        return set(c.execute(sa.select(table.c.id)).scalars())


def pruned(kind: str) -> float:
    return REGISTRY.get_sample_value("coffer_retention_pruned_total", {"kind": kind}) or 0.0


def prune(engine: Engine, **changed: Any) -> dict[str, int]:
    return retention.prune(
        engine, **{"batch": 1000, "event_days": EVENT_DAYS, "log_days": LOG_DAYS, **changed}
    )


def test_each_kind_goes_on_its_schedule_and_not_before(engine: Engine) -> None:
    day = timedelta(days=1)
    gone_events = {
        event(engine, age=(EVENT_DAYS + 1) * day),
        # Never fanned out (no dispatcher ran) for twice the retention: it goes all the same.
        event(engine, age=(2 * EVENT_DAYS + 1) * day, dispatched=False),
    }
    kept_events = {
        event(engine, age=(EVENT_DAYS - 1) * day),
        event(engine, age=(EVENT_DAYS + 1) * day, audited=False),  # auth has not recorded it yet
        event(engine, age=(EVENT_DAYS + 1) * day, dispatched=False),  # nor the dispatcher fanned it out
    }
    old = (LOG_DAYS + 1) * day
    gone_delivery = delivery(engine, age=old, attempts=[old, old - timedelta(hours=1)])
    given_up = delivery(engine, age=old, status="failed", attempts=[old])
    # Pending (still retried by the schedule), or with an attempt inside the retention: kept.
    pending = delivery(engine, age=old, status="pending", attempts=[old])
    recent_attempt = delivery(engine, age=old, attempts=[(LOG_DAYS - 1) * day])
    recent = delivery(engine, age=timedelta(hours=1), attempts=[timedelta(hours=1)])
    expired_done = tus_upload(engine, expires_in=-timedelta(minutes=1), completed=True)
    kept_uploads = {
        tus_upload(engine, expires_in=timedelta(hours=1), completed=True),  # HEAD still answers it
        tus_upload(engine, expires_in=-timedelta(minutes=1), completed=False),  # the sweeper's (its bytes)
    }
    before = {kind: pruned(kind) for kind in retention.KINDS}

    assert prune(engine) == {"event": 2, "webhook_attempt": 4, "webhook_delivery": 2, "tus_upload": 1}

    assert ids(engine, Event.__table__) == kept_events  # type: ignore[attr-defined]
    assert not gone_events & ids(engine, Event.__table__)  # type: ignore[attr-defined]
    assert ids(engine, WebhookDelivery.__table__) == {pending, recent_attempt, recent}  # type: ignore[attr-defined]
    assert gone_delivery not in ids(engine, WebhookDelivery.__table__) and given_up  # type: ignore[attr-defined]
    with engine.connect() as c:
        left = set(c.execute(sa.select(WebhookAttempt.delivery_id)).scalars())  # type: ignore[call-overload]
    assert left == {recent_attempt, recent}
    assert ids(engine, TusUpload.__table__) == kept_uploads  # type: ignore[attr-defined]
    assert expired_done not in kept_uploads
    assert {kind: pruned(kind) - before[kind] for kind in retention.KINDS} == {
        "event": 2,
        "webhook_attempt": 4,
        "webhook_delivery": 2,
        "tus_upload": 1,
    }
    # A second pass finds nothing: each row went once.
    assert set(prune(engine).values()) == {0}


def test_a_pass_is_bounded_and_the_next_goes_on(engine: Engine) -> None:
    old = timedelta(days=LOG_DAYS + 1)
    for _ in range(5):
        delivery(engine, age=old, attempts=[old] * 5)
    # 25 attempts, batches of 4, at most 3 batches of a kind a pass: 12, 12, then 1; each
    # delivery goes in the pass after (or the pass in which) its last attempt went.
    passes = [prune(engine, batch=4, batches=3) for _ in range(4)]
    assert [p["webhook_attempt"] for p in passes] == [12, 12, 1, 0]
    assert all(p["webhook_delivery"] <= 12 for p in passes)
    assert sum(p["webhook_delivery"] for p in passes) == 5
    assert not ids(engine, WebhookDelivery.__table__)  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_the_service_prunes_on_its_schedule(
    metadata_app: Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]], engine: Engine
) -> None:
    old = timedelta(days=LOG_DAYS + 1)
    gone = delivery(engine, age=old, attempts=[old])
    kept = delivery(engine, age=timedelta(hours=1), attempts=[timedelta(hours=1)])
    async with metadata_app(metadata_retention_interval_seconds=0.05):
        deadline = time.monotonic() + 30
        while gone in ids(engine, WebhookDelivery.__table__):  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "no retention pass within 30 s"
            await asyncio.sleep(0.05)
    assert ids(engine, WebhookDelivery.__table__) == {kept}  # type: ignore[attr-defined]


AS_KEY = {ACTOR_HEADER: json.dumps({"type": "key", "id": "key_01JD0000000000000000000000"})}


@pytest.mark.anyio
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # two writers at once
async def test_a_delivery_redelivered_while_a_pass_prunes_is_kept(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    """The pass selects a finished delivery, then a redeliver makes it pending (202) before the
    pass deletes: it was deleted and never sent. (PostgreSQL: SQLite has one writer at a time.)"""
    org = new_id("org")
    hook = await api.post(
        f"/internal/v1/orgs/{org}/webhooks",
        json={"url": "https://93.184.215.7/h", "events": ["asset.created"]},
        headers=AS_KEY,
    )
    assert hook.status_code == 201, hook.text
    endpoint, delivery = hook.json()["id"], new_id(WEBHOOK_DELIVERY)
    old = utcnow() - timedelta(days=31)
    with engine.begin() as c:  # it gave up 31 days ago; its attempts are pruned already
        c.execute(
            sa.insert(WebhookDelivery.__table__),  # type: ignore[attr-defined]
            {
                **{
                    "id": delivery,
                    "endpoint_id": endpoint,
                    "organization_id": org,
                    "event_id": new_id("evt"),
                },
                **{"event_type": "asset.created", "body": "{}", "status": "failed", "attempts": 3},
                **{"next_attempt_at": None, "retry_until": old + timedelta(days=3), "created_at": old},
            },
        )
    selected, redelivered = threading.Event(), threading.Event()

    def between(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("SELECT webhook_deliveries.id") and not selected.is_set():
            selected.set()
            redelivered.wait(10)

    sa.event.listen(engine, "after_cursor_execute", between)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(
                anyio.to_thread.run_sync,
                lambda: retention.prune_batch(
                    engine, "webhook_delivery", utcnow(), batch=1000, event_days=7, log_days=30
                ),
            )
            assert await anyio.to_thread.run_sync(lambda: selected.wait(10))
            path = f"/internal/v1/orgs/{org}/webhooks/{endpoint}/deliveries/{delivery}/redeliver"
            again = await api.post(path, headers=AS_KEY)
            redelivered.set()
            assert again.status_code == 202, again.text
    finally:
        sa.event.remove(engine, "after_cursor_execute", between)
    with engine.connect() as c:
        status = c.execute(
            sa.text("SELECT status FROM webhook_deliveries WHERE id = :i"), {"i": delivery}
        ).scalar()
    assert status == "pending"  # kept, to be sent


def test_the_sweeper_and_the_audit_relay_count_what_they_prune(engine: Engine) -> None:
    """Old events also go as the audit relay marks new ones audited, and finished resumable
    uploads as the sweeper runs, far more often than the retention pass: neither was counted
    in coffer_retention_pruned_total, which read near 0 whatever was pruned."""
    from sqlmodel import Session

    from coffer_metadata import events
    from coffer_metadata.assets import repository

    old = event(engine, age=timedelta(days=EVENT_DAYS + 1))
    fresh = event(engine, age=timedelta(0), audited=False)
    finished = tus_upload(engine, expires_in=-timedelta(hours=1), completed=True)
    before = pruned("event"), pruned("tus_upload")
    with Session(engine) as session:
        events.mark_audited(session, ids=[fresh], keep_days=EVENT_DAYS)
        repository.drop_completed_tus_uploads(session, now=utcnow(), limit=100)
        session.commit()
    assert old not in ids(engine, Event.__table__) and finished not in ids(engine, TusUpload.__table__)  # type: ignore[attr-defined]
    assert (pruned("event"), pruned("tus_upload")) == (before[0] + 1, before[1] + 1)
