"""The dispatcher's SQL, built once (docs/webhooks.md, "How delivery works").

An expression built and keyed for every call costs several times a prebuilt one's execution,
and a cycle runs a dozen (bench/results/journal.md, "What changed at noon, priced A/B in one
session").
"""

from __future__ import annotations

import sqlalchemy as sa

from coffer_kit.db import KeyedRead
from coffer_metadata.models import Event, Folder, WebhookAttempt, WebhookDelivery, WebhookEndpoint

events = Event.__table__  # type: ignore[attr-defined]
endpoints = WebhookEndpoint.__table__  # type: ignore[attr-defined]
deliveries = WebhookDelivery.__table__  # type: ignore[attr-defined]
attempts = WebhookAttempt.__table__  # type: ignore[attr-defined]
folders = Folder.__table__  # type: ignore[attr-defined]

# Events fanned out per transaction, and due deliveries looked at per claim.
FAN_OUT_BATCH = 500
CLAIM_WINDOW = 500

# The name of the expanding parameter of ids most statements take.
IDS = "ids"

# Fan-out (fanout.py) ------------------------------------------------------------------------

PENDING_EVENTS = (
    sa.select(events)
    .where(events.c.dispatched.is_(False))
    .order_by(events.c.created_at, events.c.id)
    .limit(FAN_OUT_BATCH)
)
ORG_ENDPOINTS = (
    sa.select(
        endpoints.c.id,
        endpoints.c.organization_id,
        endpoints.c.events,
        endpoints.c.folder_id,
        endpoints.c.scope,
        endpoints.c.created_at,
    )
    .where(endpoints.c.organization_id.in_(sa.bindparam(IDS, expanding=True)), endpoints.c.enabled.is_(True))
    .order_by(endpoints.c.created_at)
)
FOLDER_PARENT = sa.select(folders.c.parent_id).where(folders.c.id == sa.bindparam("folder"))
UNDISPATCHED = sa.select(events.c.id).where(
    events.c.id.in_(sa.bindparam(IDS, expanding=True)), events.c.dispatched.is_(False)
)
UNDISPATCHED_SKIP_LOCKED = UNDISPATCHED.with_for_update(skip_locked=True)
NEW_DELIVERIES = sa.insert(deliveries)
MARK_DISPATCHED = (
    sa.update(events).where(events.c.id.in_(sa.bindparam(IDS, expanding=True))).values(dispatched=True)
)

# Claim (claim.py) ---------------------------------------------------------------------------

LEASED = (
    sa.select(deliveries.c.endpoint_id, sa.func.count())
    .where(deliveries.c.status == "pending", deliveries.c.lease_until > sa.bindparam("now"))
    .group_by(deliveries.c.endpoint_id)
)
_FREE = sa.or_(deliveries.c.lease_until.is_(None), deliveries.c.lease_until < sa.bindparam("now"))
_DUE_FROM = deliveries.join(endpoints, endpoints.c.id == deliveries.c.endpoint_id)
_DUE_WHERE = (
    deliveries.c.status == "pending",
    deliveries.c.next_attempt_at <= sa.bindparam("now"),
    _FREE,
    endpoints.c.enabled.is_(True),
)
DUE = (
    sa.select(deliveries.c.id, deliveries.c.endpoint_id, deliveries.c.organization_id)
    .select_from(_DUE_FROM)
    .where(*_DUE_WHERE)
    .order_by(deliveries.c.next_attempt_at)
    .limit(CLAIM_WINDOW)
)
DUE_ELSEWHERE = DUE.where(deliveries.c.endpoint_id.not_in(sa.bindparam("saturated", expanding=True)))
LEASE = (
    sa.update(deliveries)
    .where(deliveries.c.id.in_(sa.bindparam(IDS, expanding=True)), deliveries.c.status == "pending", _FREE)
    .values(lease_token=sa.bindparam("token"), lease_until=sa.bindparam("until"))
)
LEASED_JOBS = (
    sa.select(
        deliveries,
        endpoints.c.url,
        endpoints.c.secret,
        endpoints.c.previous_secret,
        endpoints.c.previous_secret_expires_at,
    )
    .join(endpoints, endpoints.c.id == deliveries.c.endpoint_id)
    .where(
        deliveries.c.id.in_(sa.bindparam(IDS, expanding=True)),
        deliveries.c.lease_token == sa.bindparam("token"),
    )
)
RELEASE = (
    sa.update(deliveries)
    .where(
        deliveries.c.id.in_(sa.bindparam(IDS, expanding=True)),
        deliveries.c.lease_token.in_(sa.bindparam("tokens", expanding=True)),
    )
    .values(lease_token=None, lease_until=None)
)

# The loop (dispatcher.py) -------------------------------------------------------------------

# Whether a cycle could find anything to fan out or lease: an event not yet dispatched, or a
# delivery DUE would answer. One indexed read on the event loop, where a cycle's plan is a
# worker-thread trip and three reads: an idle dispatcher asks this ten times a second.
WORK_WAITING = KeyedRead(
    sa.select(
        sa.or_(
            sa.exists().where(events.c.dispatched.is_(False)),
            sa.exists(sa.select(deliveries.c.id).select_from(_DUE_FROM).where(*_DUE_WHERE)),
        ).label("waiting")
    )
)

# Record (record.py) -------------------------------------------------------------------------

EXISTING = sa.select(deliveries.c.id).where(deliveries.c.id.in_(sa.bindparam(IDS, expanding=True)))
RECORD = (
    sa.update(deliveries)
    .where(deliveries.c.id == sa.bindparam("b_id"), deliveries.c.lease_token == sa.bindparam("b_token"))
    .values(
        status=sa.bindparam("b_status"),
        attempts=sa.bindparam("b_attempts"),
        next_attempt_at=sa.bindparam("b_next"),
        lease_token=None,
        lease_until=None,
    )
)
NEW_ATTEMPTS = sa.insert(attempts)
MARKED_FAILING = sa.select(endpoints.c.id).where(
    endpoints.c.id.in_(sa.bindparam(IDS, expanding=True)), endpoints.c.failing_since.is_not(None)
)
