"""Invitations: a single-use link bound to an email, shown to the inviter (no mail server)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy.orm import aliased
from sqlmodel import Session, col, select

from coffer_auth import audit, errors
from coffer_auth.audit import Actor
from coffer_auth.models import Invitation, Membership, Organization, Role, User
from coffer_auth.schemas import InvitationOut, InvitationPreviewOut, InvitationStatus, RoleName, UserRef
from coffer_auth.sessions import MAX_EMAIL_CHARS, normalize_email
from coffer_auth.tokens import INVITATION_ID, INVITATION_PREFIX, new_token
from coffer_kit.contract.errors import invalid, not_found
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.timeutil import as_utc, isoformat, utcnow

log = logging.getLogger("coffer.auth")


def valid_email(email: str) -> str:
    """The normalised address, or 400: something@something, no spaces, at most 320 characters."""
    email = normalize_email(email)
    local, at, domain = email.rpartition("@")
    if not at or not local or not domain or len(email) > MAX_EMAIL_CHARS or any(c.isspace() for c in email):
        raise invalid("A valid email address is required.", field="email")
    return email


def status(inv: Invitation, now: datetime | None = None) -> str:
    if inv.accepted_at is not None:
        return "accepted"
    if inv.revoked_at is not None:
        return "revoked"
    if as_utc(inv.expires_at) <= (now or utcnow()):
        return "expired"
    return "pending"


def link(dashboard_url: str, token: str) -> str:
    return f"{dashboard_url}/invite/{token}"


def log_unsent(url: str, *, to: str, subject: str, mode: str) -> None:
    """Local mode only: the link a mail server would have carried, for the developer."""
    if mode == "local":
        log.info(subject, extra={"event": "mail_not_sent", "to": to, "url": url})


def _ref(user: User | None) -> UserRef | None:
    return UserRef(id=user.id, email=user.email) if user else None


def create(
    session: Session,
    actor: Actor,
    *,
    org: Organization,
    email: str,
    role: Role,
    invited_by: str | None,
    ttl: timedelta,
) -> tuple[Invitation, str]:
    """A new invitation and its token (returned once)."""
    email = valid_email(email)
    member = session.exec(
        select(User)
        .join(Membership, col(Membership.user_id) == User.id)
        .where(Membership.organization_id == org.id, User.email == email)
    ).first()
    if member is not None:
        raise errors.conflict("already_member", f"{email} is already a member of {org.name}.")
    _require_none_pending(session, org.id, email)
    return _issue(session, actor, org=org, email=email, role=role, invited_by=invited_by, ttl=ttl)


def _require_none_pending(session: Session, org_id: str, email: str, *, but: str | None = None) -> None:
    """409 ``invitation_pending`` when the email has a pending invitation (other than ``but``):
    an email has at most one at a time."""
    now = utcnow()
    pending = [
        inv
        for inv in session.exec(
            select(Invitation).where(Invitation.organization_id == org_id, Invitation.email == email)
        )
        if inv.id != but and status(inv, now) == "pending"
    ]
    if pending:
        raise errors.conflict(
            "invitation_pending", f"{email} already has a pending invitation: make a new link or revoke it."
        )


def _issue(
    session: Session,
    actor: Actor,
    *,
    org: Organization,
    email: str,
    role: Role,
    invited_by: str | None,
    ttl: timedelta,
    renewed: bool = False,
) -> tuple[Invitation, str]:
    now = utcnow()
    token, token_hash = new_token(INVITATION_PREFIX)
    inv = Invitation(
        id=new_id(INVITATION_ID),
        organization_id=org.id,
        email=email,
        role=role.value,
        token_hash=token_hash,
        invited_by=invited_by,
        created_at=now,
        expires_at=now + ttl,
    )
    session.add(inv)
    session.flush()
    details: dict[str, object] = {"role": role.value, "expiresAt": isoformat(inv.expires_at)}
    if renewed:
        details["renewed"] = True
    audit.record(
        session,
        actor,
        "member.invited",
        organization_id=org.id,
        target_type="invitation",
        target_id=inv.id,
        target_label=email,
        details=details,
    )
    return inv, token


def _in_org(session: Session, org_id: str, invitation_id: str) -> Invitation:
    inv = session.get(Invitation, invitation_id)
    if inv is None or inv.organization_id != org_id:
        raise not_found(f"Invitation {invitation_id} does not exist.")
    return inv


def revoke(session: Session, actor: Actor, *, org_id: str, invitation_id: str) -> Invitation:
    inv = _in_org(session, org_id, invitation_id)
    state = status(inv)
    if state == "accepted":
        raise errors.conflict("invitation_accepted", "This invitation was accepted already.")
    if state != "revoked":
        _revoked(session, actor, inv, {"role": inv.role, "was": state})
    return inv


def revoke_made_by(session: Session, actor: Actor, *, org_id: str, user_id: str) -> None:
    """Revoke the pending invitations ``user_id`` made in the organization: called when they
    stop being its owner (removed, left or demoted), so no link outlives its inviter's authority."""
    now = utcnow()
    made = session.exec(
        select(Invitation).where(Invitation.organization_id == org_id, Invitation.invited_by == user_id)
    )
    for inv in made:
        if status(inv, now) == "pending":
            _revoked(session, actor, inv, {"role": inv.role, "was": "pending", "inviterNoLongerOwner": True})


def _revoked(session: Session, actor: Actor, inv: Invitation, details: dict[str, object]) -> None:
    inv.revoked_at = utcnow()
    session.add(inv)
    session.flush()
    audit.record(
        session,
        actor,
        "invitation.revoked",
        organization_id=inv.organization_id,
        target_type="invitation",
        target_id=inv.id,
        target_label=inv.email,
        details=details,
    )


def renew(
    session: Session,
    actor: Actor,
    *,
    org: Organization,
    invitation_id: str,
    invited_by: str | None,
    ttl: timedelta,
) -> tuple[Invitation, str]:
    """ "New link": revoke the old invitation and issue one for the same email and role."""
    old = _in_org(session, org.id, invitation_id)
    if status(old) == "accepted":
        raise errors.conflict("invitation_accepted", "This invitation was accepted already.")
    member = session.exec(
        select(User)
        .join(Membership, col(Membership.user_id) == User.id)
        .where(Membership.organization_id == org.id, User.email == old.email)
    ).first()
    if member is not None:
        raise errors.conflict("already_member", f"{old.email} is already a member of {org.name}.")
    _require_none_pending(session, org.id, old.email, but=old.id)
    if old.revoked_at is None:
        old.revoked_at = utcnow()
        session.add(old)
        session.flush()
    return _issue(
        session,
        actor,
        org=org,
        email=old.email,
        role=Role(old.role),
        invited_by=invited_by,
        ttl=ttl,
        renewed=True,
    )


def listing(session: Session, *, org_id: str) -> list[InvitationOut]:
    inviter, acceptor = aliased(User), aliased(User)
    rows = session.exec(
        select(Invitation, inviter, acceptor)
        .outerjoin(inviter, col(inviter.id) == Invitation.invited_by)
        .outerjoin(acceptor, col(acceptor.id) == Invitation.accepted_by)
        .where(Invitation.organization_id == org_id)
        .order_by(col(Invitation.created_at).desc())
    )
    now = utcnow()
    return [view(inv, status(inv, now), by, accepted) for inv, by, accepted in rows]


def view(inv: Invitation, state: str, invited_by: User | None, accepted_by: User | None) -> InvitationOut:
    return InvitationOut(
        id=inv.id,
        organization_id=inv.organization_id,
        email=inv.email,
        role=cast(RoleName, inv.role),
        status=cast(InvitationStatus, state),
        created_at=inv.created_at,
        expires_at=inv.expires_at,
        accepted_at=inv.accepted_at,
        revoked_at=inv.revoked_at,
        invited_by=_ref(invited_by),
        accepted_by=_ref(accepted_by),
    )


_GONE = {
    "expired": "This invitation has expired. Ask an owner for a new link.",
    "accepted": "This invitation was used already. Ask an owner for a new link.",
    "revoked": "This invitation was revoked. Ask an owner for a new link.",
}


def pending_by_hash(session: Session, *, token_hash: str) -> tuple[Invitation, Organization]:
    """The pending invitation behind a link, or 404 (unknown) / 410 (expired, used, revoked)."""
    found = session.exec(
        select(Invitation, Organization)
        .join(Organization, col(Organization.id) == Invitation.organization_id)
        .where(Invitation.token_hash == token_hash.lower())
    ).first()
    if found is None:
        raise not_found("This invitation link is not valid.")
    inv, org = found
    state = status(inv)
    if state != "pending":
        raise errors.gone("invitation_gone", _GONE[state], state)
    return inv, org


def preview(session: Session, *, token_hash: str) -> InvitationPreviewOut:
    inv, org = pending_by_hash(session, token_hash=token_hash)
    inviter = session.get(User, inv.invited_by) if inv.invited_by else None
    return InvitationPreviewOut(
        id=inv.id,
        organization_id=org.id,
        organization_name=org.name,
        email=inv.email,
        role=cast(RoleName, inv.role),
        status="pending",
        expires_at=inv.expires_at,
        invited_by=_ref(inviter),
    )


def check_for(inv: Invitation, email: str) -> None:
    if inv.email != normalize_email(email):
        raise errors.conflict("invitation_email_mismatch", f"This invitation is for {inv.email}.")


def accept(session: Session, actor: Actor, *, token_hash: str, user: User) -> tuple[Organization, Membership]:
    """Make the user a member with the invited role; single use, bound to the invited email."""
    inv, org = pending_by_hash(session, token_hash=token_hash)
    # Lock the invitation so that two tabs accepting at once cannot both succeed.
    session.exec(select(Invitation).where(Invitation.id == inv.id).with_for_update()).first()
    session.refresh(inv)
    if status(inv) != "pending":
        state = status(inv)
        raise errors.gone("invitation_gone", _GONE[state], state)
    check_for(inv, user.email)
    existing = session.exec(
        select(Membership).where(Membership.organization_id == org.id, Membership.user_id == user.id)
    ).first()
    if existing is not None:
        raise errors.conflict("already_member", f"You are already a member of {org.name}.")
    m = Membership(organization_id=org.id, user_id=user.id, role=inv.role, created_at=utcnow())
    session.add(m)
    inv.accepted_at = utcnow()
    inv.accepted_by = user.id
    session.add(inv)
    session.flush()
    audit.record(
        session,
        actor,
        "invitation.accepted",
        organization_id=org.id,
        target_type="invitation",
        target_id=inv.id,
        target_label=inv.email,
        details={"role": inv.role},
    )
    return org, m
