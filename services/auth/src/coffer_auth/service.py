"""Auth operations: accounts, organizations, keys, and resolving a key to a principal."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from argon2 import PasswordHasher
from sqlalchemy import update
from sqlmodel import Session, col, select

from coffer_auth.keys import display_prefix, generate_key, hash_key
from coffer_auth.models import ApiKey, KeyKind, Membership, Organization, Role, User
from coffer_kit.errors import CofferError, invalid, not_found
from coffer_kit.ids import new_id
from coffer_kit.timeutil import as_utc, isoformat, utcnow

_hasher = PasswordHasher()
# Writing last_used_at on every request would turn each read into a write; once a minute is enough.
LAST_USED_RESOLUTION = timedelta(seconds=60)


def _unauthorized(message: str) -> CofferError:
    return CofferError(401, "unauthorized", message)


def create_org(session: Session, *, name: str, quota_bytes: int) -> Organization:
    """Create an organization."""
    name = name.strip()
    if not name or len(name) > 255:
        raise invalid("Organization name must be 1 to 255 characters.", field="name")
    if quota_bytes < 0:
        raise invalid("quotaBytes must be zero or more.", field="quotaBytes")
    org = Organization(id=new_id("org"), name=name, quota_bytes=quota_bytes, created_at=utcnow())
    session.add(org)
    session.flush()
    return org


def set_quota(session: Session, *, org_id: str, quota_bytes: int) -> Organization:
    """Change an organization's quota."""
    org = session.get(Organization, org_id)
    if org is None:
        raise not_found(f"Organization {org_id} does not exist.")
    if quota_bytes < 0:
        raise invalid("quotaBytes must be zero or more.", field="quotaBytes")
    org.quota_bytes = quota_bytes
    session.add(org)
    session.flush()
    return org


def create_user(session: Session, *, email: str, password: str) -> User:
    """Create a user with an argon2 password hash."""
    email = email.strip().lower()
    if "@" not in email or len(email) > 320:
        raise invalid("A valid email address is required.", field="email")
    if len(password) < 8:
        raise invalid("The password must be at least 8 characters.", field="password")
    if session.exec(select(User).where(User.email == email)).first() is not None:
        raise CofferError(409, "conflict", f"A user with email {email} already exists.")
    user = User(id=new_id("usr"), email=email, password_hash=_hasher.hash(password), created_at=utcnow())
    session.add(user)
    session.flush()
    return user


def verify_password(user: User, password: str) -> bool:
    """Whether ``password`` is the user's."""
    try:
        return _hasher.verify(user.password_hash, password)
    except Exception:  # noqa: BLE001 - argon2 raises several kinds of mismatch
        return False


def add_member(session: Session, *, org_id: str, user_id: str, role: Role) -> Membership:
    """Make a user a member (or owner) of an organization."""
    if session.get(Organization, org_id) is None:
        raise not_found(f"Organization {org_id} does not exist.")
    if session.get(User, user_id) is None:
        raise not_found(f"User {user_id} does not exist.")
    existing = session.exec(
        select(Membership).where(Membership.organization_id == org_id, Membership.user_id == user_id)
    ).first()
    if existing is not None:
        existing.role = role.value
        session.add(existing)
        session.flush()
        return existing
    membership = Membership(organization_id=org_id, user_id=user_id, role=role.value, created_at=utcnow())
    session.add(membership)
    session.flush()
    return membership


def remove_member(session: Session, *, org_id: str, user_id: str) -> None:
    """Remove a user from an organization; their user keys stop working for it."""
    membership = session.exec(
        select(Membership).where(Membership.organization_id == org_id, Membership.user_id == user_id)
    ).first()
    if membership is None:
        raise not_found(f"User {user_id} is not a member of {org_id}.")
    session.delete(membership)
    session.flush()


def create_key(
    session: Session,
    *,
    org_id: str,
    user_id: str | None,
    name: str,
    expires_in: int | None,
) -> tuple[ApiKey, str]:
    """Create an organization key, or a user key when ``user_id`` is given. Returns (row, secret)."""
    if session.get(Organization, org_id) is None:
        raise not_found(f"Organization {org_id} does not exist.")
    if expires_in is not None and expires_in <= 0:
        raise invalid("expiresIn must be a positive number of seconds.", field="expiresIn")
    kind = KeyKind.organization
    if user_id is not None:
        kind = KeyKind.user
        member = session.exec(
            select(Membership).where(Membership.organization_id == org_id, Membership.user_id == user_id)
        ).first()
        if member is None:
            raise invalid(f"User {user_id} is not a member of {org_id}.", field="user")
    secret = generate_key(kind.value)
    now = utcnow()
    row = ApiKey(
        id=new_id("key"),
        key_hash=hash_key(secret),
        prefix=display_prefix(secret),
        kind=kind.value,
        name=name or "",
        organization_id=org_id,
        user_id=user_id,
        created_at=now,
        expires_at=now + timedelta(seconds=expires_in) if expires_in else None,
    )
    session.add(row)
    session.flush()
    return row, secret


def delete_key(session: Session, *, key_id: str) -> None:
    """Delete a key; edges stop accepting it within their cache bound (5 s)."""
    row = session.get(ApiKey, key_id)
    if row is None:
        raise not_found(f"Key {key_id} does not exist.")
    session.delete(row)
    session.flush()


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
        "prefix": row.prefix,
        "organizationId": row.organization_id,
        "userId": row.user_id,
        "createdAt": isoformat(row.created_at),
        "expiresAt": isoformat(row.expires_at) if row.expires_at else None,
        "lastUsedAt": isoformat(row.last_used_at) if row.last_used_at else None,
    }


def resolve_principal(session: Session, *, key_hash: str, organization_id: str | None) -> dict[str, Any]:
    """Who a key is and which organization it acts for, or the contract's refusal (§2)."""
    row = session.exec(select(ApiKey).where(ApiKey.key_hash == key_hash)).first()
    if row is None:
        raise _unauthorized("The API key is unknown or was deleted.")
    now = utcnow()
    expires_at = as_utc(row.expires_at) if row.expires_at else None
    if expires_at is not None and expires_at <= now:
        raise _unauthorized("The API key has expired.")

    if row.kind == KeyKind.organization:
        if organization_id is not None and organization_id != row.organization_id:
            raise CofferError(403, "forbidden", "This key does not belong to that organization.")
        org_id = row.organization_id
    else:
        memberships = list(session.exec(select(Membership).where(Membership.user_id == row.user_id)))
        member_of = {m.organization_id for m in memberships}
        if organization_id is not None:
            if organization_id not in member_of:
                raise CofferError(403, "forbidden", "The key's user is not a member of that organization.")
            org_id = organization_id
        elif len(member_of) == 1:
            org_id = next(iter(member_of))
        elif not member_of:
            raise CofferError(403, "forbidden", "The key's user belongs to no organization.")
        else:
            raise CofferError(
                400,
                "organization_required",
                "The key's user belongs to several organizations: send x-organization-id.",
            )
    org = session.get(Organization, org_id)
    if org is None:
        raise CofferError(403, "forbidden", "The organization no longer exists.")
    return {
        "organizationId": org.id,
        "keyId": row.id,
        "keyKind": row.kind,
        "userId": row.user_id,
        "quotaBytes": org.quota_bytes,
        "keyExpiresAt": isoformat(expires_at) if expires_at else None,
        "lastUsedAt": isoformat(row.last_used_at) if row.last_used_at else None,
    }


def touch_key(session: Session, *, key_id: str, last_used_at: str | None) -> None:
    """Record that a key was used, at most once per LAST_USED_RESOLUTION."""
    now = utcnow()
    if last_used_at is not None:
        previous = datetime.fromisoformat(last_used_at.replace("Z", "+00:00"))
        if now - previous < LAST_USED_RESOLUTION:
            return
    session.exec(  # type: ignore[call-overload]
        update(ApiKey).where(col(ApiKey.id) == key_id).values(last_used_at=now)
    )
