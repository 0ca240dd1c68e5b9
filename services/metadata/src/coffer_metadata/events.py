"""The outbox: one event per change to a folder or an asset, written in the change's transaction.

A rolled-back change has no event and a committed one always has, whatever process dies
when: the audit log (edge relays events to auth, marking them ``audited``) and webhooks
(issue 25) read them from here, never from the request that made the change.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from sqlmodel import Session

from coffer_kit.contract.ids import EVENT, new_id
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_kit.contract.wire import ACTOR_HEADER, SYSTEM, Actor, Done
from coffer_kit.metrics import RETENTION_PRUNED
from coffer_kit.tracing import tracing_enabled
from coffer_metadata.deps import SessionDep, SettingsDep
from coffer_metadata.models import Event

_events = Event.__table__  # type: ignore[attr-defined]
_NEW_EVENT = sa.insert(_events)
# Events per relay round trip.
AUDIT_BATCH_MAX = 500


def actor_of(request: Request) -> Actor:
    """Who edge says makes this call's change; the system when it says nothing (the sweeper)."""
    raw = request.headers.get(ACTOR_HEADER)
    if not raw:
        return SYSTEM
    try:
        return Actor.model_validate_json(raw)
    except ValidationError:
        return SYSTEM


ActorDep = Annotated[Actor, Depends(actor_of)]


def current_trace() -> str | None:
    """The W3C traceparent of the current span, when traced (a webhook delivery's span links
    to the trace of the change that caused it); None otherwise, at no cost."""
    if not tracing_enabled():
        return None
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def record(
    session: Session,
    *,
    org_id: str,
    type: str,
    data: dict[str, Any],
    actor: Actor,
    changes: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> None:
    """Add the event of a change to the change's own transaction."""
    values = row(org_id=org_id, type=type, data=data, actor=actor, changes=changes, now=now)
    session.connection().execute(_NEW_EVENT, values)


def row(
    *,
    org_id: str,
    type: str,
    data: dict[str, Any],
    actor: Actor,
    changes: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """An event's row (every column of ``events``)."""
    return {
        "id": new_id(EVENT),
        "organization_id": org_id,
        "type": type,
        "created_at": now or utcnow(),
        "data": json.dumps(data, separators=(",", ":")),
        "changes": json.dumps(changes, separators=(",", ":")) if changes else None,
        "actor": actor.model_dump_json(by_alias=True, exclude_none=True),
        "audited": False,
        "dispatched": False,
        "trace": current_trace(),
    }


def pending_audit(session: Session, *, limit: int) -> list[dict[str, Any]]:
    """The oldest events auth's audit log does not hold yet, as the relay sends them."""
    rows = session.connection().execute(
        sa.select(_events)
        .where(_events.c.audited.is_(False))
        .order_by(_events.c.created_at, _events.c.id)
        .limit(limit)
    )
    return [
        {
            "id": row.id,
            "organizationId": row.organization_id,
            "type": row.type,
            "createdAt": isoformat(row.created_at),
            "data": json.loads(row.data),
            "changes": json.loads(row.changes) if row.changes else {},
            "actor": json.loads(row.actor),
        }
        for row in rows
    ]


def mark_audited(session: Session, *, ids: list[str], keep_days: int) -> None:
    """Mark events as held by auth's audit log, and drop some older than ``keep_days`` that are."""
    connection = session.connection()
    connection.execute(sa.update(_events).where(_events.c.id.in_(ids)).values(audited=True))
    old = (
        sa.select(_events.c.id)
        .where(
            _events.c.audited.is_(True),
            # Not before the webhook dispatcher has made its deliveries (they keep their own
            # body), unless none has run for twice the retention: the outbox stays bounded in
            # an install without the dispatcher.
            sa.or_(
                _events.c.dispatched.is_(True),
                _events.c.created_at < utcnow() - timedelta(days=2 * keep_days),
            ),
            _events.c.created_at < utcnow() - timedelta(days=keep_days),
        )
        .limit(AUDIT_BATCH_MAX)
    )
    pruned = connection.execute(sa.delete(_events).where(_events.c.id.in_(old.scalar_subquery())))
    RETENTION_PRUNED.labels("event").inc(int(pruned.rowcount or 0))  # (as the retention pass counts them)


class AuditedIn(BaseModel):
    ids: list[str] = Field(max_length=AUDIT_BATCH_MAX)


router = APIRouter(prefix="/internal/v1/events")


@router.get("/audit-pending")
def audit_pending(
    session: SessionDep, limit: Annotated[int, Query(ge=1, le=AUDIT_BATCH_MAX)] = 100
) -> JSONResponse:
    """The oldest events auth's audit log does not hold yet (edge's relay asks)."""
    return JSONResponse({"events": pending_audit(session, limit=limit)})


@router.post("/audited")
def audited(body: AuditedIn, session: SessionDep, settings: SettingsDep) -> Done:
    """auth's audit log holds these events now."""
    mark_audited(session, ids=body.ids, keep_days=settings.metadata_event_retention_days)
    return Done()
