"""The audit log: who did what to which organization, kept COFFER_AUDIT_RETENTION_DAYS."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import and_, delete, or_
from sqlmodel import Session, col, select

from coffer_auth.models import ApiKey, AuditEvent, User
from coffer_auth.schemas import ActorType, AuditEventOut
from coffer_kit.contract.errors import invalid
from coffer_kit.contract.timeutil import as_utc, isoformat, utcnow


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts, and from where (recorded with every event)."""

    type: str  # user | operator | key | system
    id: str | None = None
    label: str | None = None
    ip: str | None = None
    user_agent: str | None = None
    request_id: str | None = None

    def named(self, *, id: str, label: str) -> Actor:
        return replace(self, id=id, label=label)


OPERATOR = Actor(type="operator", label="operator")


def record(
    session: Session,
    actor: Actor,
    action: str,
    *,
    organization_id: str | None,
    target_type: str | None = None,
    target_id: str | None = None,
    target_label: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Add an event to the caller's transaction: it is kept exactly when the action is."""
    event = AuditEvent(
        organization_id=organization_id,
        actor_type=actor.type,
        actor_id=actor.id,
        actor_label=actor.label,
        action=action,
        target_type=target_type,
        target_id=target_id,
        target_label=(target_label or None) and target_label[:1024],
        ip=actor.ip,
        user_agent=(actor.user_agent or None) and actor.user_agent[:255],
        request_id=actor.request_id,
        details=details,
        created_at=utcnow(),
    )
    session.add(event)
    session.flush()
    return event


def record_user(
    session: Session,
    actor: Actor,
    action: str,
    user: User,
    *,
    organization_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """``record`` an action whose target is a user (an account event unless ``organization_id``)."""
    return record(
        session,
        actor,
        action,
        organization_id=organization_id,
        target_type="user",
        target_id=user.id,
        target_label=user.email,
        details=details,
    )


def view(event: AuditEvent) -> AuditEventOut:
    assert event.id is not None
    return AuditEventOut(
        id=event.id,
        organization_id=event.organization_id,
        actor_type=cast(ActorType, event.actor_type),
        actor_id=event.actor_id,
        actor_label=event.actor_label,
        action=event.action,
        target_type=event.target_type,
        target_id=event.target_id,
        target_label=event.target_label,
        ip=event.ip,
        user_agent=event.user_agent,
        request_id=event.request_id,
        details=event.details,
        created_at=event.created_at,
    )


def _cursor(event: AuditEvent) -> str:
    # Timestamps are stored at millisecond precision, so this is exact; no "+" to mangle in a URL.
    return f"{isoformat(event.created_at)}~{event.id}"


def _parse_cursor(before: str) -> tuple[datetime, int]:
    try:
        at, _, event_id = before.rpartition("~")
        parsed = as_utc(datetime.fromisoformat(at)), int(event_id)
    except (ValueError, OverflowError):  # (a time past the year 1 once in UTC)
        parsed = None
    if parsed is None or not 0 < parsed[1] < 2**63:  # (an id past the column's 64 bits)
        raise invalid("'before' is not a cursor this API returned.", field="before")
    return parsed


def page(
    session: Session,
    *,
    org_id: str,
    action: str | None,
    actor: str | None,
    since: datetime | None,
    until: datetime | None,
    before: str | None,
    limit: int,
) -> tuple[list[AuditEvent], str | None]:
    """One page of an organization's events, newest first, and the cursor of the next page."""
    query = select(AuditEvent).where(AuditEvent.organization_id == org_id)
    if action:
        if action.endswith("."):
            query = query.where(col(AuditEvent.action).startswith(action, autoescape=True))
        else:
            query = query.where(AuditEvent.action == action)
    if actor:
        query = query.where(or_(col(AuditEvent.actor_label) == actor, col(AuditEvent.actor_id) == actor))
    if since is not None:
        query = query.where(col(AuditEvent.created_at) >= as_utc(since))
    if until is not None:
        query = query.where(col(AuditEvent.created_at) < as_utc(until))
    if before:
        at, event_id = _parse_cursor(before)
        query = query.where(
            or_(
                col(AuditEvent.created_at) < at,
                and_(col(AuditEvent.created_at) == at, col(AuditEvent.id) < event_id),
            )
        )
    query = query.order_by(col(AuditEvent.created_at).desc(), col(AuditEvent.id).desc()).limit(limit + 1)
    rows = list(session.exec(query))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, _cursor(rows[-1]) if more and rows else None


def sweep(session: Session, *, retention_days: int, limit: int | None = None) -> int:
    """Delete events older than the retention, at most ``limit`` of them (the oldest); returns
    how many went."""
    cutoff = utcnow() - timedelta(days=retention_days)
    old = col(AuditEvent.created_at) < cutoff
    if limit is not None:
        ids = select(AuditEvent.id).where(old).order_by(col(AuditEvent.created_at)).limit(limit)
        old = col(AuditEvent.id).in_(list(session.exec(ids)))
    result = session.execute(delete(AuditEvent).where(old))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _change_actions(event: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """The audit actions (and details) of one change: an update is one action per field."""
    kind, _, verb = event["type"].partition(".")
    data = event["data"]
    if kind == "webhook":
        # An endpoint's changes (CONTRACT §11): created, updated, deleted, secret_rotated, and
        # disabled by the dispatcher (a 410, or 5 days of failures); and the requests it was
        # sent on demand: tested (a ping), redelivered.
        details: dict[str, Any] = {"url": data.get("url")}
        if verb == "updated":
            details["changed"] = sorted(event["changes"])
        if verb == "disabled":
            details["reason"] = data.get("disabledReason")
        if verb in ("tested", "redelivered"):
            details |= {"deliveryId": data.get("deliveryId"), "eventType": data.get("eventType")}
        return [(event["type"], details)]
    if kind == "preset":
        # A transform preset (edge records it once blob has changed it): its parameters.
        return [(event["type"], {k: v for k, v in data.items() if k not in ("id", "name")} or None)]
    if verb == "created":
        if kind == "asset":
            fields = ("size", "folderId", "visibility")
            return [("asset.uploaded", {f: data.get(f) for f in fields})]
        return [("folder.created", {"parentId": data.get("parentId")})]
    if verb == "deleted":
        return [(f"{kind}.deleted", None)]
    if kind == "asset" and verb in ("trashed", "restored", "expired", "purged"):
        # Issue 47: the trash's changes; a trashed (or expired) one says when it will be purged.
        trash: dict[str, Any] = {"size": data.get("size")}
        if verb in ("trashed", "expired"):
            trash["purgeAt"] = data.get("purgeAt")
        return [(event["type"], trash)]
    if kind == "asset" and verb in ("scanned", "infected"):
        # Issue 48: a scan's end is no one's change; an infected file is worth the log.
        return [("asset.infected", {"signature": data.get("scanSignature")})] if verb == "infected" else []
    return _update_actions(kind, data, event["changes"])


def _update_actions(
    kind: str, data: dict[str, Any], changes: dict[str, Any]
) -> list[tuple[str, dict[str, Any] | None]]:
    """An update's audit actions: one per field it changed (``changes``: the previous values)."""
    actions: list[tuple[str, dict[str, Any] | None]] = []
    for field, before in changes.items():
        if field == "name":
            actions.append((f"{kind}.renamed", {"previousName": before}))
        elif field in ("folderId", "parentId"):
            actions.append((f"{kind}.moved", {field: data.get(field)}))
        elif field == "visibility":
            actions.append(("asset.visibility_changed", {"visibility": data.get("visibility")}))
        elif field in ("expiresAt", "expiryDays"):  # issue 47: an asset's expiry, a folder's default
            actions.append((f"{kind}.expiry_changed", {field: data.get(field)}))
        elif field == "metadata":  # issue 50: which keys changed, not their values
            after = data.get("metadata") or {}
            keys = {k for k in {*before, *after} if before.get(k) != after.get(k)}
            actions.append(("asset.metadata_changed", {"keys": sorted(keys)}))
        elif field == "tags":
            actions.append(("asset.tags_changed", {"tags": data.get("tags")}))
    return actions


def _change_actor(session: Session, actor: dict[str, Any], keys: dict[str, str]) -> Actor:
    """The audit actor of a change, as edge named it, with a key's name from this database."""
    kind = actor.get("type") or "system"
    label = actor.get("label")
    if kind == "key" and actor.get("id"):
        if actor["id"] not in keys:
            key = session.get(ApiKey, actor["id"])
            keys[actor["id"]] = key.name if key is not None else actor["id"]
        label = keys[actor["id"]]
    elif kind == "token":
        label = "upload token"
    return Actor(
        type=kind,
        id=actor.get("id"),
        label=label or kind,
        ip=actor.get("ip"),
        user_agent=actor.get("user_agent"),
        request_id=actor.get("request_id"),
    )


def change_actor(session: Session, actor: dict[str, Any]) -> Actor:
    """The audit actor of a change edge names (a wire ``Actor``, dumped)."""
    return _change_actor(session, actor, {})


def record_changes(session: Session, changes: list[dict[str, Any]]) -> int:
    """Record metadata's change events (coffer_metadata.events) in their organizations' logs,
    skipping those already recorded; answers how many were new."""
    ids = [c["id"] for c in changes]
    seen = set(session.exec(select(AuditEvent.source_id).where(col(AuditEvent.source_id).in_(ids))))
    keys: dict[str, str] = {}
    new = 0
    for change in changes:
        if change["id"] in seen:
            continue
        seen.add(change["id"])
        actor = _change_actor(session, change["actor"], keys)
        kind = change["type"].partition(".")[0]
        for index, (action, details) in enumerate(_change_actions(change)):
            event = AuditEvent(
                organization_id=change["organization_id"],
                actor_type=actor.type,
                actor_id=actor.id,
                actor_label=actor.label,
                action=action,
                target_type=kind,
                target_id=change["data"].get("id"),
                target_label=(change["data"].get("name") or change["data"].get("url") or "")[:1024] or None,
                ip=actor.ip,
                user_agent=actor.user_agent,
                request_id=actor.request_id,
                details=details,
                created_at=as_utc(change["created_at"]),
                # An update of several fields is several actions: the first carries the source.
                source_id=change["id"] if index == 0 else None,
            )
            session.add(event)
        new += 1
    session.flush()
    return new
