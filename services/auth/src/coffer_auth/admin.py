"""Auth operations: accounts, organizations, keys, and resolving a key to a principal."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlmodel import Session, col, select

from coffer_auth import apikeys, audit, errors, orgs, passwords
from coffer_auth.audit import OPERATOR, Actor
from coffer_auth.models import ApiKey, KeyKind, KeyUse, Membership, Organization, Role, User
from coffer_auth.orgs import UNSET, Unset
from coffer_kit.contract import scopes
from coffer_kit.contract.errors import forbidden, invalid, not_found, organization_required, unauthorized
from coffer_kit.contract.timeutil import as_utc, isoformat, utcnow
from coffer_kit.contract.wire import Principal

# Writing last_used_at on every request would turn each read into a write; once a minute is enough.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def create_org(session: Session, *, name: str, quota_bytes: int, actor: Actor = OPERATOR) -> Organization:
    """Create an organization (no members yet: the operator adds them)."""
    return orgs.create(session, actor, name=name, quota_bytes=quota_bytes, owner_id=None)


def set_default_visibility(
    session: Session, *, org_id: str, visibility: str, actor: Actor = OPERATOR
) -> Organization:
    """Change what an organization's uploads become when they do not say (CONTRACT §12)."""
    org = session.get(Organization, org_id)
    if org is None:
        raise not_found(f"Organization {org_id} does not exist.")
    return orgs.set_default_visibility(session, actor, org=org, visibility=visibility)


def set_trash_retention(session: Session, *, org_id: str, days: int, actor: Actor = OPERATOR) -> Organization:
    """How long an organization's deleted assets stay in the trash (issue 47)."""
    org = session.get(Organization, org_id)
    if org is None:
        raise not_found(f"Organization {org_id} does not exist.")
    return orgs.set_trash_retention(session, actor, org=org, days=days)


def set_ingest(
    session: Session,
    *,
    org_id: str,
    mode: str | None = None,
    allowed_types: list[str] | Unset | None = UNSET,
    scan: str | None = None,
    actor: Actor = OPERATOR,
) -> Organization:
    """Change an organization's ingest rules (issue 48): what is enforced, allowed and scanned."""
    org = session.get(Organization, org_id)
    if org is None:
        raise not_found(f"Organization {org_id} does not exist.")
    return orgs.set_ingest(session, actor, org=org, mode=mode, allowed_types=allowed_types, scan=scan)


def set_quota(session: Session, *, org_id: str, quota_bytes: int, actor: Actor = OPERATOR) -> Organization:
    """Change an organization's quota."""
    return orgs.set_quota(session, actor, org_id=org_id, quota_bytes=quota_bytes)


def create_user(session: Session, *, email: str, password: str, actor: Actor = OPERATOR) -> User:
    """Create a user with an argon2 password hash."""
    email = email.strip().lower()
    if "@" not in email or len(email) > 320:
        raise invalid("A valid email address is required.", field="email")
    if len(password) < passwords.MIN_LENGTH:
        raise invalid("The password must be at least 8 characters.", field="password")
    if session.exec(select(User).where(User.email == email)).first() is not None:
        raise errors.conflict("email_taken", f"A user with email {email} already exists.")
    user = User.new(email=email, password_hash=passwords.hash_password(password))
    session.add(user)
    session.flush()
    audit.record_user(session, actor, "user.registered", user)
    return user


def add_member(
    session: Session, *, org_id: str, user_id: str, role: Role, actor: Actor = OPERATOR
) -> Membership:
    """Make a user a member (or owner) of an organization; 409 if they already are one
    (changing a role is :func:`coffer_auth.orgs.change_role`, never a side effect)."""
    return orgs.add_member(session, actor, org_id=org_id, user_id=user_id, role=role)


def remove_member(session: Session, *, org_id: str, user_id: str, actor: Actor = OPERATOR) -> None:
    """Remove a user from an organization (never its last owner); their user keys stop
    working for it."""
    orgs.remove(session, actor, org_id=org_id, user_id=user_id)


def create_key(
    session: Session,
    *,
    org_id: str,
    user_id: str | None,
    name: str,
    expires_in: int | None,
    actor: Actor = OPERATOR,
    scope_names: Sequence[str] | None = None,
    folder_id: str | None = None,
    networks: Sequence[str] | None = None,
) -> tuple[ApiKey, str]:
    """Create an organization key, or a user key when ``user_id`` is given, with its scopes
    (issue 46; default ``full``). Returns (row, secret)."""
    org = session.get(Organization, org_id)
    if org is None:
        raise not_found(f"Organization {org_id} does not exist.")
    kind = KeyKind.user if user_id is not None else KeyKind.organization
    return apikeys.create(
        session,
        actor,
        org=org,
        kind=kind,
        user_id=user_id,
        name=name or "",
        expires_in=expires_in,
        created_by=None,
        scope_names=scope_names,
        folder_id=folder_id,
        networks=networks,
    )


def delete_key(session: Session, *, key_id: str, actor: Actor = OPERATOR) -> None:
    """Delete a key; edges stop accepting it within their cache bound (5 s)."""
    row = session.get(ApiKey, key_id)
    if row is None:
        raise not_found(f"Key {key_id} does not exist.")
    apikeys.delete(session, actor, row=row)


def list_keys(session: Session, *, org_id: str) -> list[ApiKey]:
    """Keys of an organization, newest first (hashes are never returned)."""
    return list(
        session.exec(
            select(ApiKey).where(ApiKey.organization_id == org_id).order_by(col(ApiKey.created_at).desc())
        )
    )


def key_view(row: ApiKey) -> dict[str, Any]:
    """The public description of a key (never its hash or secret)."""
    return {
        "id": row.id,
        "name": row.name,
        "kind": row.kind,
        "expiresAt": isoformat(row.expires_at) if row.expires_at else None,
        "prefix": row.prefix,
        "organizationId": row.organization_id,
        "userId": row.user_id,
        "createdAt": isoformat(row.created_at),
        "lastUsedAt": isoformat(row.last_used_at) if row.last_used_at else None,
        "scopes": row.scopes.split(),
        "folderId": row.folder_id,
        "networks": row.networks.split(),
    }


@dataclass(frozen=True, slots=True)
class Resolved:
    """A key resolved to its principal, and when the key was last used (for ``touch_key``)."""

    principal: Principal
    last_used_at: datetime | None


def resolve_principal(session: Session, *, key_hash: str, organization_id: str | None) -> Resolved:
    """Who a key is and which organization it acts for, or the contract's refusal (§2)."""
    row = session.exec(select(ApiKey).where(ApiKey.key_hash == key_hash)).first()
    if row is None:
        raise unauthorized("The API key is unknown or was deleted.")
    now = utcnow()
    expires_at = as_utc(row.expires_at) if row.expires_at else None
    if expires_at is not None and expires_at <= now:
        raise unauthorized("The API key has expired.")

    roles: dict[str, str] = {}
    if row.kind == KeyKind.organization:
        if organization_id is not None and organization_id != row.organization_id:
            raise forbidden("This key does not belong to that organization.")
        org_id = row.organization_id
    else:
        memberships = list(session.exec(select(Membership).where(Membership.user_id == row.user_id)))
        member_of = {m.organization_id for m in memberships}
        roles = {m.organization_id: m.role for m in memberships}
        if row.folder_id is not None:
            # Confined to a folder of the organization it was made in: it acts there only.
            if organization_id not in (None, row.organization_id):
                raise forbidden("This key is confined to a folder of another organization.")
            organization_id = row.organization_id
        if organization_id is not None:
            if organization_id not in member_of:
                raise forbidden("The key's user is not a member of that organization.")
            org_id = organization_id
        elif len(member_of) == 1:
            org_id = next(iter(member_of))
        elif not member_of:
            raise forbidden("The key's user belongs to no organization.")
        else:
            raise organization_required(
                "The key's user belongs to several organizations: send x-organization-id."
            )
    org = session.get(Organization, org_id)
    if org is None:
        raise forbidden("The organization no longer exists.")
    principal = Principal(
        organization_id=org.id,
        key_id=row.id,
        key_kind=row.kind,
        user_id=row.user_id,
        quota_bytes=org.quota_bytes,
        key_expires_at=isoformat(expires_at) if expires_at else None,
        default_visibility=org.default_visibility,
        role=None if row.kind == KeyKind.organization else roles.get(org.id),
        ingest=org.ingest(),
        scopes=row.scopes.split(),
        actions=scopes.ordered(scopes.expand(row.scopes.split())),
        folder_id=row.folder_id,
        folder_within=apikeys.makers_folders(session, row),
        networks=row.networks.split(),
        trash_retention_days=org.trash_retention_days,
    )
    use = session.get(KeyUse, (row.id, org.id))
    return Resolved(principal, as_utc(use.last_used_at) if use else None)


def touch_key(session: Session, *, key_id: str, organization_id: str, last_used_at: datetime | None) -> None:
    """Record that a key acted in an organization, at most once per LAST_USED_RESOLUTION
    (``last_used_at``: its last use there, as :func:`resolve_principal` read it)."""
    now = utcnow()
    if last_used_at is not None and now - last_used_at < LAST_USED_RESOLUTION:
        return
    session.exec(update(ApiKey).where(col(ApiKey.id) == key_id).values(last_used_at=now))
    # Only the engine's own dialect is imported: importing both loaded PostgreSQL's (2.3 MiB of
    # idle RSS) into every SQLite-backed auth.
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres:
        from sqlalchemy.dialects import postgresql
    else:
        from sqlalchemy.dialects import sqlite
    insert = postgresql.insert if postgres else sqlite.insert
    statement = insert(KeyUse).values(key_id=key_id, organization_id=organization_id, last_used_at=now)
    session.exec(
        statement.on_conflict_do_update(
            index_elements=["key_id", "organization_id"], set_={"last_used_at": now}
        )
    )
