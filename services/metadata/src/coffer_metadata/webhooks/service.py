"""Webhook endpoints and their delivery log (CONTRACT §11): every query scoped by organization.

Each change to an endpoint writes an event in its transaction (``webhook.created`` …), which
the audit relay copies to auth's log like any other change; the dispatcher never sends those.
"""

from __future__ import annotations

import json
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, func, select
from yarl import URL

from coffer_kit import pagination
from coffer_kit.contract.errors import conflict, invalid, not_found
from coffer_kit.contract.ids import EVENT, WEBHOOK, WEBHOOK_ATTEMPT, WEBHOOK_DELIVERY, id_pattern, new_id
from coffer_kit.contract.timeutil import as_utc, isoformat, utcnow
from coffer_kit.contract.webhooks import (
    MAX_ENDPOINTS,
    PING,
    ROTATION_OVERLAP_SECONDS,
    WebhookAttempt,
    WebhookCreate,
    WebhookDelivery,
    WebhookEndpointWithSecret,
)
from coffer_kit.contract.wire import Actor
from coffer_kit.db import take_turns
from coffer_metadata import events
from coffer_metadata.config import Settings
from coffer_metadata.folders.service import check_folder
from coffer_metadata.models import WebhookAttempt as AttemptRow
from coffer_metadata.models import WebhookDelivery as DeliveryRow
from coffer_metadata.models import WebhookEndpoint as EndpointRow
from coffer_metadata.webhooks.safety import AddressPolicy, RefusedAddress, literal_address, url_problem
from coffer_metadata.webhooks.secrets import SecretBox, new_secret

# A slow DNS answer holds a request no longer than this (getaddrinfo has no timeout of its
# own); a few lookups at once, so a flood of creations cannot take every worker thread.
RESOLVE_TIMEOUT_SECONDS = 3.0
_RESOLVER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")
_ID = re.compile(id_pattern(WEBHOOK))
_DELIVERY_ID = re.compile(id_pattern(WEBHOOK_DELIVERY))


def view(row: EndpointRow) -> dict[str, Any]:
    """An endpoint as the public API writes it (never its secret)."""
    expires = row.previous_secret_expires_at
    return {
        "id": row.id,
        "organizationId": row.organization_id,
        "url": row.url,
        "events": json.loads(row.events),
        "folderId": row.folder_id,
        "description": row.description,
        "enabled": row.enabled,
        "disabledReason": row.disabled_reason,
        "previousSecretExpiresAt": isoformat(expires) if expires and as_utc(expires) > utcnow() else None,
        "createdAt": isoformat(row.created_at),
        "updatedAt": isoformat(row.updated_at),
    }


def check_url(url: str, settings: Settings) -> None:
    """400 unless ``url`` may be an endpoint: its form, and its host's current addresses."""
    problem = url_problem(url, allow_http=settings.metadata_webhook_allow_http)
    if problem is not None:
        raise invalid(problem, field="url")
    # The host the sender connects to (aiohttp reads the URL with yarl), not urlsplit's: the idna
    # codec makes segmented digits (U+1FBF0…) an xn-- name, which yarl reads as a number.
    host = URL(url).host or ""
    policy = AddressPolicy(settings.webhook_networks())
    try:
        literal = literal_address(host)
        if literal is not None:
            policy.check(literal)
            return
        lookup = _RESOLVER.submit(socket.getaddrinfo, host, None, type=socket.SOCK_STREAM)
        try:
            infos = lookup.result(timeout=RESOLVE_TIMEOUT_SECONDS)
        except (OSError, UnicodeError, ValueError, TimeoutError):
            # Not resolvable now: deliveries fail (and retry) until it is; each is checked again.
            return
        for info in infos:
            policy.check(str(info[4][0]), name=host)
    except RefusedAddress as exc:
        raise invalid(f"The URL's host is refused: {exc}.", field="url") from exc


def _get(session: Session, *, org_id: str, webhook_id: str) -> EndpointRow:
    """The organization's endpoint; 404 for an unknown one and for another organization's."""
    row = session.get(EndpointRow, webhook_id) if _ID.fullmatch(webhook_id) else None
    if row is None or row.organization_id != org_id:
        raise not_found(f"Webhook {webhook_id} does not exist.")
    return row


def _record(
    session: Session,
    row: EndpointRow,
    type: str,
    actor: Actor,
    *,
    delivery: DeliveryRow | None = None,
    **extra: Any,
) -> None:
    """The endpoint's change as an audit-only event (never sent); one about a ``delivery``
    (a test ping, a redelivery) names it and its event's type."""
    data = view(row)
    if delivery is not None:
        data |= {"deliveryId": delivery.id, "eventType": delivery.event_type}
    events.record(session, org_id=row.organization_id, type=type, data=data, actor=actor, **extra)


def create(
    session: Session, *, org_id: str, body: WebhookCreate, settings: Settings, box: SecretBox, actor: Actor
) -> WebhookEndpointWithSecret:
    """A new endpoint and its secret (the only time it is answered)."""
    check_url(body.url, settings)
    if body.folderId is not None:
        check_folder(session, org_id=org_id, folder_id=body.folderId)
    take_turns(session.connection(), f"coffer-webhooks-{org_id}")  # (counted, then inserted)
    count = session.exec(
        select(func.count()).select_from(EndpointRow).where(EndpointRow.organization_id == org_id)
    ).one()
    if count >= MAX_ENDPOINTS:
        raise conflict(f"An organization has at most {MAX_ENDPOINTS} webhook endpoints; delete one first.")
    now = utcnow()
    secret = new_secret()
    row = EndpointRow(
        id=new_id(WEBHOOK),
        organization_id=org_id,
        url=body.url,
        events=json.dumps(sorted(set(body.events))),
        folder_id=body.folderId,
        description=body.description,
        enabled=True,
        secret=box.seal(secret),
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.flush()
    _record(session, row, "webhook.created", actor, now=now)
    return WebhookEndpointWithSecret(**view(row), secret=secret)


def list_views(session: Session, *, org_id: str) -> list[dict[str, Any]]:
    rows = session.exec(
        select(EndpointRow)
        .where(EndpointRow.organization_id == org_id)
        .order_by(col(EndpointRow.created_at), col(EndpointRow.id))
    )
    return [view(r) for r in rows]


def get_view(session: Session, *, org_id: str, webhook_id: str) -> dict[str, Any]:
    return view(_get(session, org_id=org_id, webhook_id=webhook_id))


def update(
    session: Session,
    *,
    org_id: str,
    webhook_id: str,
    changes: dict[str, Any],
    settings: Settings,
    actor: Actor,
) -> dict[str, Any]:
    """Apply the fields sent (``changes``, public names) in this transaction, with its event."""
    row = _get(session, org_id=org_id, webhook_id=webhook_id)
    before = view(row)
    if changes.get("url") is not None:
        check_url(changes["url"], settings)
        row.url = changes["url"]
    if changes.get("events") is not None:
        row.events = json.dumps(sorted(set(changes["events"])))
    if "folderId" in changes:
        if changes["folderId"] is not None:
            check_folder(session, org_id=org_id, folder_id=changes["folderId"])
        if changes["folderId"] != row.folder_id:
            row.folder_id = changes["folderId"]
            row.scope = EndpointRow.scope + 1  # in SQL: no lost bump
    if "description" in changes:
        row.description = changes["description"]
    if changes.get("enabled") is True:
        row.enabled, row.disabled_reason, row.failing_since = True, None, None
    elif changes.get("enabled") is False and row.enabled:
        row.enabled, row.disabled_reason = False, "paused"
    after = view(row)
    fields = ("url", "events", "folderId", "description", "enabled")
    changed = {k: before[k] for k in fields if before[k] != after[k]}
    if changed:
        row.updated_at = utcnow()
        session.add(row)
        session.flush()
        if "url" in changed:
            _end_earlier_retries(session, row)
        _record(session, row, "webhook.updated", actor, changes=changed, now=row.updated_at)
    return view(row)


# The error each delivery _end_earlier_retries ends shows in the delivery log.
NOT_SENT = "not sent: the endpoint's URL changed after its folder filter did"


def _end_earlier_retries(session: Session, row: EndpointRow) -> None:
    """Fail, unsent, the endpoint's pending deliveries planned under an earlier scope (before
    its folder filter last changed or its folder last moved): they may carry events of folders
    no key of its subtree could see, and its new URL may be such a key's (redeliver refuses
    them to a subtree key for the same reason). Their leases go too: a send already under way
    records no next step, and one leased but not yet read is never sent."""
    endpoints, deliveries = EndpointRow.__table__, DeliveryRow.__table__  # type: ignore[attr-defined]
    scope = sa.select(endpoints.c.scope).where(endpoints.c.id == row.id).scalar_subquery()
    connection = session.connection()
    ended = connection.execute(
        sa.update(deliveries)
        .where(
            deliveries.c.endpoint_id == row.id,
            deliveries.c.status == "pending",
            deliveries.c.scope < scope,
        )
        .values(
            status="failed",
            attempts=deliveries.c.attempts + 1,
            next_attempt_at=None,
            lease_token=None,
            lease_until=None,
        )
        .returning(deliveries.c.id, deliveries.c.attempts)
    ).all()
    if ended:
        connection.execute(
            sa.insert(AttemptRow.__table__),  # type: ignore[attr-defined]
            [
                {
                    "id": new_id(WEBHOOK_ATTEMPT),
                    "delivery_id": delivery_id,
                    "endpoint_id": row.id,
                    "attempt": attempt,
                    "result": "failed",
                    "response_status": None,
                    "error": NOT_SENT,
                    "latency_ms": 0,
                    "response": None,
                    "created_at": row.updated_at,
                }
                for delivery_id, attempt in ended
            ],
        )


def rescope(session: Session, *, org_id: str, folder_ids: sa.Select[tuple[str]]) -> None:
    """A new scope for the organization's endpoints limited to one of ``folder_ids`` (a moved
    subtree): a subtree key sees, and redelivers, only what an endpoint sent in its current
    scope, and the keys that reach these endpoints are not the ones that did."""
    endpoints = EndpointRow.__table__  # type: ignore[attr-defined]
    session.connection().execute(
        sa.update(endpoints)
        .where(endpoints.c.organization_id == org_id, endpoints.c.folder_id.in_(folder_ids))
        .values(scope=endpoints.c.scope + 1)
    )


def delete(session: Session, *, org_id: str, webhook_id: str, actor: Actor) -> None:
    """Delete the endpoint, its deliveries and their log."""
    row = _get(session, org_id=org_id, webhook_id=webhook_id)
    connection = session.connection()
    attempts, deliveries = AttemptRow.__table__, DeliveryRow.__table__  # type: ignore[attr-defined]
    connection.execute(sa.delete(attempts).where(attempts.c.endpoint_id == row.id))
    connection.execute(sa.delete(deliveries).where(deliveries.c.endpoint_id == row.id))
    _record(session, row, "webhook.deleted", actor)
    session.delete(row)
    session.flush()


def rotate(
    session: Session, *, org_id: str, webhook_id: str, box: SecretBox, actor: Actor
) -> WebhookEndpointWithSecret:
    """A new secret; the current one keeps signing (a second signature) for 24 hours."""
    row = _get(session, org_id=org_id, webhook_id=webhook_id)
    now = utcnow()
    secret = new_secret()
    row.previous_secret, row.secret = row.secret, box.seal(secret)
    row.previous_secret_expires_at = now + timedelta(seconds=ROTATION_OVERLAP_SECONDS)
    row.updated_at = now
    session.add(row)
    session.flush()
    _record(session, row, "webhook.secret_rotated", actor, now=now)
    return WebhookEndpointWithSecret(**view(row), secret=secret)


def delivery_view(row: DeliveryRow) -> WebhookDelivery:
    return WebhookDelivery(
        id=row.id,
        eventId=row.event_id,
        eventType=row.event_type,
        status=row.status,
        attempts=row.attempts,
        nextAttemptAt=isoformat(row.next_attempt_at) if row.next_attempt_at else None,
        createdAt=isoformat(row.created_at),
    )


def body_of(*, event_id: str, type: str, created_at: datetime, org_id: str, data: dict[str, Any]) -> str:
    """A delivery's request body (CONTRACT §11), fixed once: every attempt sends these bytes."""
    payload = {
        "type": type,
        "id": event_id,
        "createdAt": isoformat(created_at),
        "organizationId": org_id,
        "data": data,
    }
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def new_delivery(
    *,
    endpoint_id: str,
    org_id: str,
    event_id: str,
    type: str,
    body: str,
    trace: str | None,
    scope: int,
    now: datetime,
    retry_for: float,
) -> dict[str, Any]:
    """The row of a delivery due now, planned under the endpoint's ``scope``."""
    return {
        "id": new_id(WEBHOOK_DELIVERY),
        "endpoint_id": endpoint_id,
        "organization_id": org_id,
        "event_id": event_id,
        "event_type": type,
        "body": body,
        "trace": trace,
        "scope": scope,
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": now,
        "retry_until": now + timedelta(seconds=retry_for),
        "lease_token": None,
        "lease_until": None,
        "created_at": now,
    }


def ping(
    session: Session, *, org_id: str, webhook_id: str, settings: Settings, actor: Actor
) -> WebhookDelivery:
    """Queue a ``ping`` event to the endpoint, due now (audited: ``webhook.tested``, as every
    request it makes Coffer send)."""
    row = _get(session, org_id=org_id, webhook_id=webhook_id)
    if not row.enabled:
        raise conflict("The webhook is disabled; enable it first.")
    now = utcnow()
    event_id = new_id(EVENT)
    data = {"webhook": {"id": row.id, "url": row.url}}
    body = body_of(event_id=event_id, type=PING, created_at=now, org_id=org_id, data=data)
    values = new_delivery(
        endpoint_id=row.id,
        org_id=org_id,
        event_id=event_id,
        type=PING,
        body=body,
        trace=events.current_trace(),
        scope=row.scope,
        now=now,
        retry_for=settings.metadata_webhook_retry_for_seconds,
    )
    delivery = DeliveryRow(**values)
    session.add(delivery)
    session.flush()
    _record(session, row, "webhook.tested", actor, delivery=delivery, now=now)
    return delivery_view(delivery)


def redeliver(
    session: Session,
    *,
    org_id: str,
    webhook_id: str,
    delivery_id: str,
    settings: Settings,
    actor: Actor,
    current_scope: bool = False,
) -> WebhookDelivery:
    """Send a delivery again now, same event and body; 409 while an attempt is in flight
    (audited: ``webhook.redelivered``). ``current_scope``: only one the endpoint sent since its
    scope last changed (a subtree key's, as attempts_page), else 404."""
    endpoint = _get(session, org_id=org_id, webhook_id=webhook_id)
    row = session.get(DeliveryRow, delivery_id) if _DELIVERY_ID.fullmatch(delivery_id) else None
    if row is None or row.endpoint_id != endpoint.id or (current_scope and row.scope != endpoint.scope):
        raise not_found(f"Delivery {delivery_id} does not exist.")
    if not endpoint.enabled:
        raise conflict("The webhook is disabled; enable it first.")
    now = utcnow()
    if row.lease_until is not None and as_utc(row.lease_until) > now:
        raise conflict("An attempt of this delivery is in flight; try again when it ends.")
    row.status, row.next_attempt_at = "pending", now
    row.retry_until = now + timedelta(seconds=settings.metadata_webhook_retry_for_seconds)
    row.lease_token = row.lease_until = None
    session.add(row)
    session.flush()
    _record(session, endpoint, "webhook.redelivered", actor, delivery=row, now=now)
    return delivery_view(row)


def attempts_page(
    session: Session,
    *,
    org_id: str,
    webhook_id: str,
    limit: int,
    offset: int,
    cursor: str | None = None,
    with_total: bool | None = None,
    current_scope: bool = False,
) -> dict[str, Any]:
    """The endpoint's delivery log, newest attempt first: by ``offset`` with its ``total``, or
    (a ``cursor``, or ``with_total`` False) by keyset, counted only when asked (issue 49).
    ``current_scope``: only what it planned since its folder filter last changed or its folder
    moved (a subtree key's view: before that, it may have sent other folders' events)."""
    endpoint = _get(session, org_id=org_id, webhook_id=webhook_id)
    keyset = cursor is not None or with_total is False
    if keyset and offset:
        raise invalid("'offset' cannot be combined with 'cursor' or 'total=false'.", field="offset")
    listing, scope = "deliveries", [org_id, endpoint.id]
    attempts = AttemptRow.__table__  # type: ignore[attr-defined]
    created, attempt_id = attempts.c.created_at, attempts.c.id
    where = [AttemptRow.endpoint_id == endpoint.id]
    if current_scope:
        where.append(DeliveryRow.scope == endpoint.scope)
    statement = (
        select(AttemptRow, DeliveryRow)
        .join(DeliveryRow, col(DeliveryRow.id) == col(AttemptRow.delivery_id))
        .where(*where)
        .order_by(*pagination.order(created, attempt_id, descending=True))
    )
    if keyset:
        if cursor is not None:
            position = pagination.decode(cursor, listing, scope, "time")
            statement = statement.where(pagination.after(created, attempt_id, *position, descending=True))
        rows = list(session.exec(statement.limit(limit + 1)))
    else:
        rows = list(session.exec(statement.limit(limit).offset(offset)))
    total = None
    if not keyset or with_total:
        counted = select(func.count()).select_from(AttemptRow)
        if current_scope:
            counted = counted.join(DeliveryRow, col(DeliveryRow.id) == col(AttemptRow.delivery_id))
        total = session.exec(counted.where(*where)).one()
    shown = rows[:limit]
    more = len(rows) > limit if keyset else offset + len(rows) < (total or 0)
    items = [
        WebhookAttempt(
            id=attempt.id,
            deliveryId=delivery.id,
            eventId=delivery.event_id,
            eventType=delivery.event_type,
            attempt=attempt.attempt,
            result=attempt.result,
            responseStatus=attempt.response_status,
            error=attempt.error,
            latencyMs=attempt.latency_ms,
            response=attempt.response,
            createdAt=isoformat(attempt.created_at),
            deliveryStatus=delivery.status,
            nextAttemptAt=isoformat(delivery.next_attempt_at)
            if delivery.status == "pending" and delivery.next_attempt_at
            else None,
        )
        for attempt, delivery in shown
    ]
    answer: dict[str, Any] = {"deliveries": [i.model_dump(mode="json") for i in items], "limit": limit}
    if total is not None:
        answer["total"] = total
    if not keyset:
        answer["offset"] = offset
    last = shown[-1][0] if more and shown else None
    answer["nextCursor"] = (
        None if last is None else pagination.encode(listing, scope, last.created_at, last.id)
    )
    return answer
