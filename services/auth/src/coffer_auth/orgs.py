"""Organizations and memberships as the dashboard and the CLI change them: who may, the
last-owner guard, and an audit event for every change."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import delete, func
from sqlmodel import Session, col, select

from coffer_auth import apikeys, audit, errors, grants, invitations
from coffer_auth.audit import Actor
from coffer_auth.models import ApiKey, KeyKind, Membership, Organization, Role, User
from coffer_auth.schemas import MemberOut, OrgOut, RoleName
from coffer_auth.upload_tokens import UploadToken
from coffer_kit.contract import media
from coffer_kit.contract.errors import invalid, not_found
from coffer_kit.contract.ids import ORG, new_id
from coffer_kit.contract.limits import TRASH_RETENTION_DAYS_MAX
from coffer_kit.contract.resources import VISIBILITIES, Visibility
from coffer_kit.contract.timeutil import as_utc, utcnow
from coffer_kit.contract.wire import ScanSync

MAX_QUOTA_BYTES = 2**63 - 1
# Ids bound into one IN list: well under SQLite's 32,766 host parameters and PostgreSQL's
# 65,535, for a user with many keys each remembering up to MAX_LINEAGE replaced ones.
_IDS_PER_QUERY = 1000


def _name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 255:
        raise invalid("Organization name must be 1 to 255 characters.", field="name")
    return name


def membership(session: Session, *, org_id: str, user_id: str) -> tuple[Organization, Membership]:
    """The organization and the user's membership in it; 404 alike for "no such org" and
    "not yours", so ids cannot be probed."""
    found = session.exec(
        select(Organization, Membership)
        .join(Membership, col(Membership.organization_id) == Organization.id)
        .where(Organization.id == org_id, Membership.user_id == user_id)
    ).first()
    if found is None:
        raise not_found(f"Organization {org_id} does not exist or you are not a member.")
    return found


def require_owner(m: Membership, message: str = "Only an owner of the organization can do this.") -> None:
    if m.role != Role.owner:
        raise errors.owners_only(message)


def _locked_org(session: Session, org_id: str) -> Organization:
    """The organization row, locked until commit (PostgreSQL), so that two concurrent role
    changes cannot both see a second owner and leave none. SQLite writers are serial already."""
    org = session.exec(select(Organization).where(Organization.id == org_id).with_for_update()).first()
    if org is None:
        raise not_found(f"Organization {org_id} does not exist.")
    return org


def _owner_count(session: Session, org_id: str) -> int:
    return int(
        session.exec(
            select(func.count())
            .select_from(Membership)
            .where(Membership.organization_id == org_id, Membership.role == Role.owner.value)
        ).one()
    )


def _member_count(session: Session, org_id: str) -> int:
    return int(
        session.exec(
            select(func.count()).select_from(Membership).where(Membership.organization_id == org_id)
        ).one()
    )


def view(session: Session, org: Organization, role: str) -> OrgOut:
    return OrgOut(
        id=org.id,
        name=org.name,
        role=Role(role).value,
        quota_bytes=org.quota_bytes,
        created_at=org.created_at,
        member_count=_member_count(session, org.id),
        default_visibility=cast(Visibility, org.default_visibility),
        trash_retention_days=org.trash_retention_days,
        **_ingest_fields(org),
    )


def _ingest_fields(org: Organization) -> dict[str, Any]:
    ingest = org.ingest()
    return {"ingest_mode": ingest.mode, "allowed_types": ingest.allowed_types, "scan_mode": ingest.scan}


def orgs_of(session: Session, *, user_id: str) -> list[OrgOut]:
    """The user's organizations with their role, by name."""
    # Counted for this user's organizations only (memberships has an index on user_id),
    # not over the whole table: this runs on every dashboard page edge does not have cached.
    theirs = select(Membership.organization_id).where(Membership.user_id == user_id)
    counts = (
        select(Membership.organization_id, func.count().label("n"))
        .where(col(Membership.organization_id).in_(theirs))
        .group_by(col(Membership.organization_id))
        .subquery()
    )
    rows = session.exec(
        select(Organization, Membership.role, counts.c.n)
        .join(Membership, col(Membership.organization_id) == Organization.id)
        .join(counts, counts.c.organization_id == Organization.id)
        .where(Membership.user_id == user_id)
        .order_by(func.lower(Organization.name), col(Organization.id))
    )
    return [
        OrgOut(
            id=org.id,
            name=org.name,
            role=cast(RoleName, role),
            quota_bytes=org.quota_bytes,
            created_at=org.created_at,
            member_count=int(n),
            default_visibility=cast(Visibility, org.default_visibility),
            trash_retention_days=org.trash_retention_days,
            **_ingest_fields(org),
        )
        for org, role, n in rows
    ]


def require_room_for_another(session: Session, *, user_id: str, limit: int) -> None:
    """409 ``organization_limit`` when the user already owns ``limit`` organizations."""
    owned = session.exec(
        select(func.count())
        .select_from(Membership)
        .where(Membership.user_id == user_id, Membership.role == Role.owner.value)
    ).one()
    if owned >= limit:
        raise errors.conflict(
            "organization_limit",
            f"You own {owned} organizations, the most one person may create here; "
            "the operator can make more.",
        )


def create(
    session: Session, actor: Actor, *, name: str, quota_bytes: int, owner_id: str | None
) -> Organization:
    """Create an organization; ``owner_id`` (the dashboard's caller) becomes its owner."""
    _check_quota(quota_bytes)
    org = Organization(id=new_id(ORG), name=_name(name), quota_bytes=quota_bytes, created_at=utcnow())
    session.add(org)
    session.flush()
    if owner_id is not None:
        session.add(
            Membership(organization_id=org.id, user_id=owner_id, role=Role.owner.value, created_at=utcnow())
        )
        session.flush()
    audit.record(
        session,
        actor,
        "org.created",
        organization_id=org.id,
        target_type="organization",
        target_id=org.id,
        target_label=org.name,
        details={"quotaBytes": quota_bytes},
    )
    return org


def _changed(session: Session, actor: Actor, org: Organization, action: str, old: Any, new: Any) -> None:
    """Write a change to one of the organization's settings and audit it (from, to)."""
    session.add(org)
    session.flush()
    audit.record(
        session,
        actor,
        action,
        organization_id=org.id,
        target_type="organization",
        target_id=org.id,
        target_label=org.name,
        details={"from": old, "to": new},
    )


def rename(session: Session, actor: Actor, *, org: Organization, name: str) -> Organization:
    new = _name(name)
    old = org.name
    if new != old:
        org.name = new
        _changed(session, actor, org, "org.renamed", old, new)
    return org


def set_default_visibility(
    session: Session, actor: Actor, *, org: Organization, visibility: str
) -> Organization:
    """What uploads that do not say become (CONTRACT §12); audited. Assets already stored
    keep theirs."""
    if visibility not in VISIBILITIES:
        raise invalid("defaultVisibility is 'public' or 'private'.", field="defaultVisibility")
    old = org.default_visibility
    if visibility != old:
        org.default_visibility = visibility
        _changed(session, actor, org, "org.default_visibility_changed", old, visibility)
    return org


def set_trash_retention(session: Session, actor: Actor, *, org: Organization, days: int) -> Organization:
    """Days a deleted asset stays in the trash (issue 47; 0: deletes are final); audited.
    Assets already trashed keep their purge time."""
    if isinstance(days, bool) or not isinstance(days, int) or not 0 <= days <= TRASH_RETENTION_DAYS_MAX:
        raise invalid(
            f"trashRetentionDays is an integer from 0 to {TRASH_RETENTION_DAYS_MAX}.",
            field="trashRetentionDays",
        )
    old = org.trash_retention_days
    if days != old:
        org.trash_retention_days = days
        _changed(session, actor, org, "org.trash_retention_changed", old, days)
    return org


class Unset:
    """``allowed_types`` not sent: kept as it is (None clears it)."""


UNSET = Unset()


def set_ingest(
    session: Session,
    actor: Actor,
    *,
    org: Organization,
    mode: str | None = None,
    allowed_types: list[str] | Unset | None = UNSET,
    scan: str | None = None,
) -> Organization:
    """The organization's ingest rules (issue 48), each one kept unless given; audited."""
    if mode is not None and mode not in media.INGEST_MODES:
        raise invalid("ingestMode is 'record' or 'enforce'.", field="ingestMode")
    if scan is not None and scan not in media.SCAN_MODES:
        raise invalid("scanMode is 'off', 'async' or 'block'.", field="scanMode")
    stored = org.allowed_types
    if not isinstance(allowed_types, Unset):
        if allowed_types is not None:
            allowed_types = [t.strip().lower() for t in allowed_types if t.strip()]
            if not allowed_types or len(allowed_types) > media.MAX_ALLOWED_TYPES:
                raise invalid(
                    f"allowedTypes holds 1 to {media.MAX_ALLOWED_TYPES} media ranges.", field="allowedTypes"
                )
            if not all(media.valid_range(t) for t in allowed_types):
                raise invalid(
                    "allowedTypes holds media ranges such as image/* or application/pdf.",
                    field="allowedTypes",
                )
        stored = ",".join(allowed_types) if allowed_types is not None else None
    before = _ingest_fields(org)
    org.ingest_mode = mode or org.ingest_mode
    if scan is not None and scan != org.scan_mode:
        _scan_sync_due(org)
    org.scan_mode = scan or org.scan_mode
    org.allowed_types = stored
    after = _ingest_fields(org)
    if after != before:
        _changed(session, actor, org, "org.ingest_changed", before, after)
    return org


def _scan_sync_due(org: Organization) -> None:
    org.scan_sync_due_at = utcnow()
    org.scan_sync_generation += 1


def claim_scan_syncs(
    session: Session, *, limit: int, settle_seconds: float, lease_seconds: float
) -> list[ScanSync]:
    """Lease up to ``limit`` scan-mode syncs due (issue 48), oldest first: those whose change is
    at least ``settle_seconds`` old (edge's cached rules, which its uploads follow, have caught
    up with it)."""
    now = utcnow()
    due = (
        select(Organization)
        .where(col(Organization.scan_sync_due_at).is_not(None))
        .where(col(Organization.scan_sync_due_at) <= now - timedelta(seconds=settle_seconds))
        .order_by(col(Organization.scan_sync_due_at))
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        due = due.with_for_update(skip_locked=True)  # (SQLite has one writer)
    orgs = list(session.exec(due))
    until = now + timedelta(seconds=lease_seconds)
    for org in orgs:
        org.scan_sync_due_at = until
        session.add(org)
    return [
        ScanSync(
            organization_id=o.id,
            scan=cast(media.ScanMode, o.scan_mode),
            generation=o.scan_sync_generation,
            leased_until=until,
        )
        for o in orgs
    ]


def end_scan_sync(
    session: Session, *, org_id: str, generation: int, leased_until: datetime | None = None
) -> bool:
    """A sync of ``generation`` ended: the job ends if that is still the current one. Otherwise the
    mode changed meanwhile, or this sync ran late for an older mode and may have written after a
    newer one: the job is due again, a generation on, so the sync that ends it starts after this
    one's last write."""
    org = session.get(Organization, org_id, with_for_update=True)
    if org is None:
        return True
    if org.scan_sync_generation == generation:
        org.scan_sync_due_at = None
        session.add(org)
        return True
    org.scan_sync_generation += 1
    # Due now, unless a sync of the newer mode holds the lease: that one then ends on a stale
    # generation and the job runs once more, alone (made due at once, two edges overlapped
    # each other's syncs without end).
    now = utcnow()
    due = as_utc(org.scan_sync_due_at) if org.scan_sync_due_at is not None else None
    if due is None or due <= now or (leased_until is not None and due == as_utc(leased_until)):
        org.scan_sync_due_at = now  # (the lease was this sync's own: it is over)
    session.add(org)
    return False


def _check_quota(quota_bytes: int) -> None:
    # The column is a 64-bit integer: a larger number was the database driver's OverflowError.
    if not 0 <= quota_bytes <= MAX_QUOTA_BYTES:
        raise invalid(f"quotaBytes must be from 0 to {MAX_QUOTA_BYTES}.", field="quotaBytes")


def set_quota(session: Session, actor: Actor, *, org_id: str, quota_bytes: int) -> Organization:
    org = session.get(Organization, org_id)
    if org is None:
        raise not_found(f"Organization {org_id} does not exist.")
    _check_quota(quota_bytes)
    old = org.quota_bytes
    org.quota_bytes = quota_bytes
    _changed(session, actor, org, "org.quota_changed", old, quota_bytes)
    return org


def members(session: Session, *, org_id: str) -> list[MemberOut]:
    """Members with their email, owners first, then by email."""
    rows = session.exec(
        select(Membership, User)
        .join(User, col(User.id) == Membership.user_id)
        .where(Membership.organization_id == org_id)
        .order_by(col(Membership.role).desc(), col(User.email))
    )
    return [
        MemberOut(user_id=u.id, email=u.email, role=cast(RoleName, m.role), joined_at=m.created_at)
        for m, u in rows
    ]


def _target(session: Session, org_id: str, user_id: str) -> tuple[Membership, User]:
    found = session.exec(
        select(Membership, User)
        .join(User, col(User.id) == Membership.user_id)
        .where(Membership.organization_id == org_id, Membership.user_id == user_id)
    ).first()
    if found is None:
        raise not_found(f"User {user_id} is not a member of {org_id}.")
    return found


def add_member(session: Session, actor: Actor, *, org_id: str, user_id: str, role: Role) -> Membership:
    """Add a user to an organization. An existing membership is a conflict, never a silent
    role change: that is :func:`change_role`."""
    org = _locked_org(session, org_id)
    user = session.get(User, user_id)
    if user is None:
        raise not_found(f"User {user_id} does not exist.")
    existing = session.exec(
        select(Membership).where(Membership.organization_id == org_id, Membership.user_id == user_id)
    ).first()
    if existing is not None:
        raise errors.conflict("already_member", f"{user.email} is already a {existing.role} of {org.name}.")
    m = Membership(organization_id=org_id, user_id=user_id, role=role.value, created_at=utcnow())
    session.add(m)
    session.flush()
    audit.record_user(
        session, actor, "member.added", user, organization_id=org_id, details={"role": role.value}
    )
    return m


def change_role(session: Session, actor: Actor, *, org_id: str, user_id: str, role: Role) -> Membership:
    """Make a member owner or member; the last owner cannot be demoted."""
    _locked_org(session, org_id)
    m, user = _target(session, org_id, user_id)
    old = m.role
    if old == role.value:
        return m
    if old == Role.owner and _owner_count(session, org_id) <= 1:
        raise errors.last_owner()
    m.role = role.value
    session.add(m)
    session.flush()
    audit.record_user(
        session,
        actor,
        "member.role_changed",
        user,
        organization_id=org_id,
        details={"from": old, "to": role.value},
    )
    if old == Role.owner:  # their invitations, and the keys their keys made, go with their authority
        invitations.revoke_made_by(session, actor, org_id=org_id, user_id=user_id)
        _end_keys_made_by(session, actor, org_id=org_id, user_id=user_id)
    return m


def _end_keys_made_by(session: Session, actor: Actor, *, org_id: str, user_id: str) -> None:
    """Delete the organization's keys that the user's personal keys made (an owner's keys may
    make organization keys), and the keys those made: a key made by a key lives no longer than
    its maker's authority here. Their signed URLs are revoked (``apikeys.delete``)."""
    for key in apikeys.made_by_personal_keys(session, user_id=user_id, org_id=org_id):
        apikeys.delete(session, actor, row=key, because={"makerNoLongerOwner": True})


def remove(session: Session, actor: Actor, *, org_id: str, user_id: str) -> None:
    """Remove a member (``member.left`` when they remove themselves); never the last owner.

    Their personal keys stop working for this organization within edge's cache bound (5 s),
    and the URLs signed here by the member or with those keys die (``grants``); the upload
    tokens they minted here (signed in, or with a personal key, or with a key it replaced
    through a rotation) are deleted, so that none comes back if they are added again; the
    organization keys their personal keys made are deleted; an owner's pending invitations
    are revoked.
    """
    _locked_org(session, org_id)
    m, user = _target(session, org_id, user_id)
    if m.role == Role.owner and _owner_count(session, org_id) <= 1:
        raise errors.last_owner()
    session.delete(m)
    grants.member_removed(session, org_id=org_id, user_id=user_id)
    personal = session.exec(select(ApiKey).where(ApiKey.user_id == user_id, ApiKey.kind == KeyKind.user))
    # A token minted before a rotation names the replaced key, and follows the rotation to its
    # successor (``upload_tokens._minter``): it goes too, or the member's return revived it.
    minted_with = sorted({key_id for key in personal for key_id in key.lineage()})
    here = col(UploadToken.organization_id) == org_id
    session.exec(delete(UploadToken).where(here, col(UploadToken.user_id) == user_id))
    for start in range(0, len(minted_with), _IDS_PER_QUERY):
        batch = minted_with[start : start + _IDS_PER_QUERY]
        session.exec(delete(UploadToken).where(here, col(UploadToken.key_id).in_(batch)))
    session.flush()
    _end_keys_made_by(session, actor, org_id=org_id, user_id=user_id)
    left = actor.type == "user" and actor.id == user_id
    audit.record_user(
        session,
        actor,
        "member.left" if left else "member.removed",
        user,
        organization_id=org_id,
        details={"role": m.role},
    )
    if m.role == Role.owner:  # their invitations go with their authority
        invitations.revoke_made_by(session, actor, org_id=org_id, user_id=user_id)
