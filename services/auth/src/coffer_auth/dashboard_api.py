"""Internal API for edge's dashboard (services/auth/INTERNAL_API.md).

Every call that acts for a person carries ``x-session-hash``; auth resolves the session and
authorizes the action itself (non-members get 404, members lacking the role 403), whatever
edge showed. Every change writes an audit event in the same transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, cast

from fastapi import APIRouter, Depends, Header, Query, Request
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, select

from coffer_auth import accounts, apikeys, audit, invitations, orgs, sessions, tx
from coffer_auth.accounts import Accounts
from coffer_auth.audit import Actor
from coffer_auth.config import Settings
from coffer_auth.deps import AuthStateDep, DatabaseDep, SessionDep, SettingsDep
from coffer_auth.models import DashboardSession, Invitation, KeyKind, Role, User
from coffer_auth.schemas import (
    AcceptIn,
    AuditEventOut,
    AuditIn,
    AuditPageOut,
    CurrentOut,
    DefaultVisibilityIn,
    IngestIn,
    InvitationCreatedOut,
    InvitationIn,
    InvitationPreviewOut,
    InvitationsOut,
    KeyCreatedOut,
    KeyIn,
    KeyRotatedOut,
    KeysOut,
    LoginIn,
    LoginOut,
    MemberOut,
    MembersOut,
    OrgIn,
    OrgOut,
    PasswordChangedOut,
    PasswordChangeIn,
    ReauthIn,
    RegisterIn,
    ResetConsumeIn,
    ResetDoneOut,
    ResetPreviewOut,
    RevokedOut,
    RoleIn,
    RoleName,
    RotateIn,
    SessionsOut,
    SuccessOut,
)
from coffer_auth.sessions import Lifetimes
from coffer_kit.contract.errors import invalid, not_found, request_id_of
from coffer_kit.contract.wire import TrashRetentionIn
from coffer_kit.db import writer
from coffer_kit.internal_token import require_internal_token

log = logging.getLogger("coffer.auth")
router = APIRouter(prefix="/internal/v1", dependencies=[Depends(require_internal_token)])

HashHeader = Annotated[str, Header(alias="x-session-hash", min_length=64, max_length=64)]


def _actor(request: Request) -> Actor:
    """An anonymous actor with the browser's address, as edge relayed it."""
    ip = request.headers.get("x-client-ip") or None
    user_agent = request.headers.get("x-client-user-agent") or None
    return Actor(
        type="user",
        ip=ip[:64] if ip else None,
        user_agent=user_agent[:255] if user_agent else None,
        request_id=request_id_of(request),
    )


def _accounts(state: AuthStateDep) -> Accounts:
    return Accounts(engine=state.database.engine, settings=state.settings, limiter=state.password_limiter)


AccountsDep = Annotated[Accounts, Depends(_accounts)]


@dataclass(frozen=True, slots=True)
class Caller:
    """The person behind a dashboard call."""

    row: DashboardSession
    user: User
    actor: Actor
    lifetimes: Lifetimes


def _caller(request: Request, settings: SettingsDep, session: SessionDep, token_hash: HashHeader) -> Caller:
    lifetimes = Lifetimes.of(settings)
    row, user = sessions.resolve(session, token_hash=token_hash, lifetimes=lifetimes)
    if request.method not in ("GET", "HEAD"):
        sessions.touch(session, row=row)
    actor = _actor(request).named(id=user.id, label=user.email)
    return Caller(row=row, user=user, actor=actor, lifetimes=lifetimes)


CallerDep = Annotated[Caller, Depends(_caller)]


# --- accounts and sessions -------------------------------------------------------------


@router.post("/users", status_code=201, response_model=LoginOut)
async def register(body: RegisterIn, request: Request, accounts_: AccountsDep) -> LoginOut:
    actor = _actor(request)
    return await accounts.register(accounts_, body, actor)


@router.post("/sessions", status_code=201, response_model=LoginOut)
async def login(
    body: LoginIn,
    accounts_: AccountsDep,
    replaces: Annotated[str | None, Header(alias="x-session-hash", min_length=64, max_length=64)] = None,
) -> LoginOut:
    return await accounts.login(accounts_, body, replaces=replaces)


@router.get("/sessions/current", response_model=CurrentOut)
def current(
    settings: SettingsDep,
    database: DatabaseDep,
    session: SessionDep,
    token_hash: HashHeader,
    organization_id: Annotated[str | None, Header(alias="x-organization-id")] = None,
) -> CurrentOut:
    """Who the session is: user, organizations with roles, CSRF token; with an organization,
    the caller's role and quota in it (404 when not a member)."""
    lifetimes = Lifetimes.of(settings)
    row, user = sessions.resolve(session, token_hash=token_hash, lifetimes=lifetimes)
    mine = orgs.orgs_of(session, user_id=user.id)
    organization = None
    if organization_id:
        organization = next((o for o in mine if o.id == organization_id), None)
        if organization is None:
            raise not_found(f"Organization {organization_id} does not exist or you are not a member.")
    answer = CurrentOut(
        session=sessions.view(row, lifetimes, current_id=row.id),
        csrf_token=row.csrf_token,
        user=accounts.user_view(user),
        organizations=mine,
        organization=organization,
    )
    # Best effort, in its own short write transaction, so the lookup stays a read.
    try:
        with Session(writer(database.engine)) as write:
            if sessions.touch(write, row=row, last_org_id=organization.id if organization else None):
                write.commit()
    except SQLAlchemyError:
        log.warning("could not record session use", extra={"session_id": row.id})
    return answer


@router.post("/sessions/current/reauth", status_code=201, response_model=LoginOut)
async def reauth(
    body: ReauthIn, request: Request, accounts_: AccountsDep, token_hash: HashHeader
) -> LoginOut:
    return await accounts.reauth(
        accounts_, token_hash=token_hash, password=body.password, actor=_actor(request)
    )


@router.delete("/sessions/current", response_model=SuccessOut)
def logout(session: SessionDep, token_hash: HashHeader) -> SuccessOut:
    """Sign out. Idempotent: an already-ended session is just as signed out."""
    row = session.exec(
        select(DashboardSession).where(DashboardSession.token_hash == token_hash.lower())
    ).first()
    if row is not None:
        session.delete(row)
    return SuccessOut()


@router.get("/users/me/sessions", response_model=SessionsOut)
def my_sessions(caller: CallerDep, session: SessionDep) -> SessionsOut:
    rows = sessions.list_live(session, user_id=caller.user.id, lifetimes=caller.lifetimes)
    return SessionsOut(sessions=[sessions.view(r, caller.lifetimes, current_id=caller.row.id) for r in rows])


@router.delete("/users/me/sessions/{session_id}", response_model=SuccessOut)
def revoke_session(session_id: str, caller: CallerDep, session: SessionDep) -> SuccessOut:
    sessions.require_sudo(caller.row, caller.lifetimes)
    if not sessions.revoke(session, user_id=caller.user.id, session_id=session_id):
        raise not_found(f"Session {session_id} does not exist.")
    audit.record_user(
        session,
        caller.actor,
        "user.sessions_revoked",
        caller.user,
        details={"sessionId": session_id, "count": 1},
    )
    return SuccessOut()


@router.delete("/users/me/sessions", response_model=RevokedOut)
def revoke_other_sessions(
    caller: CallerDep, session: SessionDep, others: Annotated[bool, Query()] = False
) -> RevokedOut:
    if not others:
        raise invalid(
            "Only 'others=true' is supported: sign out of this session with DELETE /sessions/current.",
            field="others",
        )
    sessions.require_sudo(caller.row, caller.lifetimes)
    revoked = sessions.revoke_all(session, user_id=caller.user.id, keep=caller.row.id)
    audit.record_user(
        session,
        caller.actor,
        "user.sessions_revoked",
        caller.user,
        details={"count": revoked, "others": True},
    )
    return RevokedOut(revoked=revoked)


@router.post("/users/me/password", response_model=PasswordChangedOut)
async def change_password(
    body: PasswordChangeIn, request: Request, accounts_: AccountsDep, token_hash: HashHeader
) -> PasswordChangedOut:
    lifetimes = Lifetimes.of(accounts_.settings)
    _, user = await tx.read(
        accounts_.engine, lambda s: sessions.resolve(s, token_hash=token_hash, lifetimes=lifetimes)
    )
    actor = _actor(request).named(id=user.id, label=user.email)
    return await accounts.change_password(accounts_, token_hash=token_hash, body=body, actor=actor)


@router.get("/users/me/keys", response_model=KeysOut)
def my_keys(caller: CallerDep, session: SessionDep) -> KeysOut:
    return KeysOut(keys=apikeys.user_keys(session, user_id=caller.user.id))


@router.get("/password-resets/{token_hash}", response_model=ResetPreviewOut)
async def reset_preview(token_hash: str, accounts_: AccountsDep) -> ResetPreviewOut:
    return await accounts.preview_reset(accounts_, token_hash=token_hash)


@router.post("/password-resets/consume", response_model=ResetDoneOut)
async def reset_consume(body: ResetConsumeIn, request: Request, accounts_: AccountsDep) -> ResetDoneOut:
    return await accounts.consume_reset(
        accounts_, token_hash=body.token_hash, password=body.password, actor=_actor(request)
    )


# --- organizations and members ---------------------------------------------------------


@router.post("/orgs", status_code=201, response_model=OrgOut)
def create_org(body: OrgIn, settings: SettingsDep, caller: CallerDep, session: SessionDep) -> OrgOut:
    """A new organization owned by the caller, with the self-service quota; at most
    ``dashboard_max_owned_orgs`` owned by one user (the operator's have no such bound)."""
    orgs.require_room_for_another(session, user_id=caller.user.id, limit=settings.dashboard_max_owned_orgs)
    org = orgs.create(
        session,
        caller.actor,
        name=body.name,
        quota_bytes=settings.auth_self_service_quota_bytes,
        owner_id=caller.user.id,
    )
    sessions.touch(session, row=caller.row, last_org_id=org.id)
    return orgs.view(session, org, Role.owner.value)


@router.get("/orgs/{org_id}", response_model=OrgOut)
def get_org(org_id: str, caller: CallerDep, session: SessionDep) -> OrgOut:
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    return orgs.view(session, org, m.role)


@router.patch("/orgs/{org_id}", response_model=OrgOut)
def rename_org(org_id: str, body: OrgIn, caller: CallerDep, session: SessionDep) -> OrgOut:
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m)
    orgs.rename(session, caller.actor, org=org, name=body.name)
    return orgs.view(session, org, m.role)


@router.put("/orgs/{org_id}/default-visibility", response_model=OrgOut)
def set_default_visibility(
    org_id: str, body: DefaultVisibilityIn, caller: CallerDep, session: SessionDep
) -> OrgOut:
    """What uploads that do not say become (CONTRACT §12): owners only."""
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m)
    orgs.set_default_visibility(session, caller.actor, org=org, visibility=body.default_visibility)
    return orgs.view(session, org, m.role)


@router.put("/orgs/{org_id}/trash-retention", response_model=OrgOut)
def set_trash_retention(
    org_id: str, body: TrashRetentionIn, caller: CallerDep, session: SessionDep
) -> OrgOut:
    """Issue 47: days a deleted asset stays in the trash: owners only."""
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m)
    orgs.set_trash_retention(session, caller.actor, org=org, days=body.trash_retention_days)
    return orgs.view(session, org, m.role)


@router.put("/orgs/{org_id}/ingest", response_model=OrgOut)
def set_ingest(org_id: str, body: IngestIn, caller: CallerDep, session: SessionDep) -> OrgOut:
    """Issue 48: detected types recorded or enforced, the allowed list, scanning: owners only."""
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m)
    allowed = [t for t in body.allowed_types.split(",") if t.strip()] or None
    orgs.set_ingest(
        session, caller.actor, org=org, mode=body.ingest_mode, allowed_types=allowed, scan=body.scan_mode
    )
    return orgs.view(session, org, m.role)


@router.get("/orgs/{org_id}/members", response_model=MembersOut)
def list_members(org_id: str, caller: CallerDep, session: SessionDep) -> MembersOut:
    orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    return MembersOut(members=orgs.members(session, org_id=org_id))


@router.patch("/orgs/{org_id}/members/{user_id}", response_model=MemberOut)
def change_role(org_id: str, user_id: str, body: RoleIn, caller: CallerDep, session: SessionDep) -> MemberOut:
    _, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m)
    sessions.require_sudo(caller.row, caller.lifetimes)
    changed = orgs.change_role(session, caller.actor, org_id=org_id, user_id=user_id, role=Role(body.role))
    user = session.get(User, user_id)
    assert user is not None
    role = cast(RoleName, changed.role)
    return MemberOut(user_id=user.id, email=user.email, role=role, joined_at=changed.created_at)


@router.delete("/orgs/{org_id}/members/{user_id}", response_model=SuccessOut)
def remove_member(org_id: str, user_id: str, caller: CallerDep, session: SessionDep) -> SuccessOut:
    """Owners remove anyone (inside the re-auth window); everyone may leave."""
    _, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    if user_id != caller.user.id:
        orgs.require_owner(m)
        sessions.require_sudo(caller.row, caller.lifetimes)
    orgs.remove(session, caller.actor, org_id=org_id, user_id=user_id)
    return SuccessOut()


# --- invitations -----------------------------------------------------------------------


@router.post("/orgs/{org_id}/invitations", status_code=201, response_model=InvitationCreatedOut)
def invite(
    org_id: str, body: InvitationIn, settings: SettingsDep, caller: CallerDep, session: SessionDep
) -> InvitationCreatedOut:
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m)
    if body.role == Role.owner:  # an owner's link hands out everything: as minting a key does
        sessions.require_sudo(caller.row, caller.lifetimes)
    inv, token = invitations.create(
        session,
        caller.actor,
        org=org,
        email=body.email,
        role=Role(body.role),
        invited_by=caller.user.id,
        ttl=timedelta(seconds=settings.invite_ttl_seconds),
    )
    return _created(settings, inv, token, caller.user)


def _created(settings: Settings, inv: Invitation, token: str, inviter: User) -> InvitationCreatedOut:
    url = invitations.link(settings.dashboard_url, token)
    invitations.log_unsent(url, to=inv.email, subject="invitation", mode=settings.mode)
    return InvitationCreatedOut(
        token=token, url=url, invitation=invitations.view(inv, "pending", inviter, None)
    )


@router.post(
    "/orgs/{org_id}/invitations/{invitation_id}/renew", status_code=201, response_model=InvitationCreatedOut
)
def renew_invitation(
    org_id: str, invitation_id: str, settings: SettingsDep, caller: CallerDep, session: SessionDep
) -> InvitationCreatedOut:
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m)
    sessions.require_sudo(caller.row, caller.lifetimes)  # a new live link, like a new invitation
    inv, token = invitations.renew(
        session,
        caller.actor,
        org=org,
        invitation_id=invitation_id,
        invited_by=caller.user.id,
        ttl=timedelta(seconds=settings.invite_ttl_seconds),
    )
    return _created(settings, inv, token, caller.user)


@router.get("/orgs/{org_id}/invitations", response_model=InvitationsOut)
def list_invitations(org_id: str, caller: CallerDep, session: SessionDep) -> InvitationsOut:
    orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    return InvitationsOut(invitations=invitations.listing(session, org_id=org_id))


@router.delete("/orgs/{org_id}/invitations/{invitation_id}", response_model=SuccessOut)
def revoke_invitation(org_id: str, invitation_id: str, caller: CallerDep, session: SessionDep) -> SuccessOut:
    _, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m)
    invitations.revoke(session, caller.actor, org_id=org_id, invitation_id=invitation_id)
    return SuccessOut()


@router.get("/invitations/{token_hash}", response_model=InvitationPreviewOut)
def preview_invitation(token_hash: str, session: SessionDep) -> InvitationPreviewOut:
    return invitations.preview(session, token_hash=token_hash)


@router.post("/invitations/accept", response_model=OrgOut)
def accept_invitation(body: AcceptIn, caller: CallerDep, session: SessionDep) -> OrgOut:
    org, m = invitations.accept(session, caller.actor, token_hash=body.token_hash, user=caller.user)
    sessions.touch(session, row=caller.row, last_org_id=org.id)
    return orgs.view(session, org, m.role)


# --- keys ------------------------------------------------------------------------------


@router.get("/orgs/{org_id}/keys", response_model=KeysOut)
def list_keys(org_id: str, caller: CallerDep, session: SessionDep) -> KeysOut:
    _, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    return KeysOut(
        keys=apikeys.org_keys(session, org_id=org_id, viewer_id=caller.user.id, viewer_role=m.role)
    )


@router.post("/orgs/{org_id}/keys", status_code=201, response_model=KeyCreatedOut)
def create_key(org_id: str, body: KeyIn, caller: CallerDep, session: SessionDep) -> KeyCreatedOut:
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    kind = KeyKind(body.kind)
    if kind == KeyKind.organization:
        orgs.require_owner(m)
    sessions.require_sudo(caller.row, caller.lifetimes)
    row, secret = apikeys.create(
        session,
        caller.actor,
        org=org,
        kind=kind,
        user_id=caller.user.id,
        name=body.name,
        expires_in=body.expires_in,
        created_by=caller.user.id,
        scope_names=body.scopes,
        folder_id=body.folder_id,
    )
    return KeyCreatedOut(key=secret, api_key=apikeys.view_of(session, row))


@router.delete("/orgs/{org_id}/keys/{key_id}", response_model=SuccessOut)
def delete_key(org_id: str, key_id: str, caller: CallerDep, session: SessionDep) -> SuccessOut:
    _, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    row = apikeys.get(session, org_id=org_id, key_id=key_id)
    apikeys.require_manage(row, user_id=caller.user.id, role=m.role)
    apikeys.delete(session, caller.actor, row=row)
    return SuccessOut()


@router.post("/orgs/{org_id}/keys/{key_id}/rotate", status_code=201, response_model=KeyRotatedOut)
def rotate_key(
    org_id: str, key_id: str, body: RotateIn, caller: CallerDep, session: SessionDep
) -> KeyRotatedOut:
    org, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    row = apikeys.get(session, org_id=org_id, key_id=key_id)
    apikeys.require_manage(row, user_id=caller.user.id, role=m.role)
    sessions.require_sudo(caller.row, caller.lifetimes)
    new, secret, previous = apikeys.rotate(
        session, caller.actor, org=org, row=row, grace_seconds=body.grace_seconds, created_by=caller.user.id
    )
    return KeyRotatedOut(
        key=secret,
        api_key=apikeys.view_of(session, new),
        previous=apikeys.view_of(session, previous) if previous is not None else None,
    )


# --- audit -----------------------------------------------------------------------------


@router.get("/orgs/{org_id}/audit", response_model=AuditPageOut)
def audit_log(
    org_id: str,
    caller: CallerDep,
    session: SessionDep,
    action: Annotated[str | None, Query(max_length=64)] = None,
    actor: Annotated[str | None, Query(max_length=320)] = None,
    since: Annotated[datetime | None, Query()] = None,
    until: Annotated[datetime | None, Query()] = None,
    before: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> AuditPageOut:
    """An organization's audit log, newest first (owners only)."""
    _, m = orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    orgs.require_owner(m, "Only owners can read the audit log.")
    rows, next_before = audit.page(
        session,
        org_id=org_id,
        action=action or None,
        actor=actor or None,
        since=since,
        until=until,
        before=before or None,
        limit=limit,
    )
    return AuditPageOut(events=[audit.view(e) for e in rows], next_before=next_before)


@router.post("/orgs/{org_id}/audit", status_code=201, response_model=AuditEventOut)
def record_event(org_id: str, body: AuditIn, caller: CallerDep, session: SessionDep) -> AuditEventOut:
    """Record what the dashboard's file browser did (edge talks to metadata and blob)."""
    orgs.membership(session, org_id=org_id, user_id=caller.user.id)
    event = audit.record(
        session,
        caller.actor,
        body.action,
        organization_id=org_id,
        target_type=body.target_type,
        target_id=body.target_id,
        target_label=body.target_label,
        details=body.details,
    )
    return audit.view(event)
