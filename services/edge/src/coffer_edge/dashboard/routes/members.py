"""Members and invitations: invite links shown once, roles, remove, leave, last-owner guard."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from coffer_edge.dashboard.routes.orgs import render
from coffer_edge.dashboard.security import PREFIX
from coffer_edge.dashboard.web import (
    OrgVisitDep,
    Visit,
    accounts_of,
    field,
    posted,
    redirect,
    with_sudo,
)
from coffer_edge.deps import edge_state
from coffer_kit.contract.accounts import InvitationCreatedOut, MemberOut
from coffer_kit.contract.errors import CofferError, not_found

router = APIRouter(prefix=PREFIX, include_in_schema=False)

LAST_OWNER = "Make someone else owner first."
NOTICES = {
    "role": "The role was changed.",
    "removed": "The member was removed.",
    "revoked": "The invitation was revoked.",
}


async def _members_page(
    visit: Visit,
    *,
    status: int = 200,
    error: str | None = None,
    notice: str | None = None,
    invite_email: str = "",
) -> Response:
    accounts = accounts_of(visit.request)
    members = await accounts.members(visit.caller, visit.org.id)
    invitations = await accounts.invitations(visit.caller, visit.org.id)
    return render(
        visit,
        "members.html",
        status,
        title="Members",
        section="members",
        members=members,
        invitations=invitations,
        error=error,
        notice=notice,
        invite_email=invite_email,
    )


def _refused(exc: CofferError) -> str | None:
    """The message for a refusal shown on the members page; None for errors with pages of their own."""
    if exc.code == "last_owner":
        return LAST_OWNER
    if exc.status in (400, 409):
        return exc.message
    return None


@router.get("/o/{org_id}/members")
async def members(visit: OrgVisitDep, done: str | None = None) -> Response:
    return await _members_page(visit, notice=NOTICES.get(done or ""))


def _invite_page(visit: Visit, created: InvitationCreatedOut) -> Response:
    response = render(
        visit, "invite_created.html", 201, title="Invite link", section="members", created=created
    )
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/o/{org_id}/invitations")
async def invite(request: Request, visit: OrgVisitDep) -> Response:
    form = await posted(request, visit)
    email = field(form, "email", limit=320).strip()
    role = field(form, "role", limit=16) or "member"
    if role not in ("owner", "member"):
        return await _members_page(visit, status=400, error="Choose owner or member.", invite_email=email)

    async def action(v: Visit) -> Response:
        try:
            created = await accounts_of(request).invite(v.caller, v.org.id, email=email, role=role)
        except CofferError as exc:
            message = _refused(exc)
            if message is None:
                raise
            if exc.code == "invitation_pending":
                message = "This email already has a pending invitation: use \u201cNew link\u201d below."
            elif exc.code == "already_member":
                message = "This person is already a member."
            return await _members_page(v, status=exc.status, error=message, invite_email=email)
        return _invite_page(v, created)

    # Inviting an owner asks for the password, as minting a key does.
    return await with_sudo(visit, form, action)


@router.post("/o/{org_id}/invitations/{invitation_id}/renew")
async def renew(request: Request, visit: OrgVisitDep, invitation_id: str) -> Response:
    form = await posted(request, visit)

    async def action(v: Visit) -> Response:
        try:
            created = await accounts_of(request).renew_invitation(v.caller, v.org.id, invitation_id)
        except CofferError as exc:
            message = _refused(exc)
            if message is None:
                raise
            return await _members_page(v, status=exc.status, error=message)
        return _invite_page(v, created)

    return await with_sudo(visit, form, action)


@router.post("/o/{org_id}/invitations/{invitation_id}/revoke")
async def revoke(request: Request, visit: OrgVisitDep, invitation_id: str) -> Response:
    await posted(request, visit)
    try:
        await accounts_of(request).revoke_invitation(visit.caller, visit.org.id, invitation_id)
    except CofferError as exc:
        message = _refused(exc)
        if message is None:
            raise
        return await _members_page(visit, status=exc.status, error=message)
    return redirect(f"{PREFIX}/o/{visit.org.id}/members?done=revoked")


@router.post("/o/{org_id}/members/{user_id}/role")
async def change_role(request: Request, visit: OrgVisitDep, user_id: str) -> Response:
    form = await posted(request, visit)
    role = field(form, "role", limit=16)
    if role not in ("owner", "member"):
        return await _members_page(visit, status=400, error="Choose owner or member.")

    async def action(v: Visit) -> Response:
        accounts = accounts_of(request)
        try:
            await accounts.set_role(v.caller, v.org.id, user_id, role)
        except CofferError as exc:
            message = _refused(exc)
            if message is None:
                raise
            return await _members_page(v, status=exc.status, error=message)
        assert v.caller.session_hash is not None
        accounts.forget(v.caller.session_hash)  # one's own role may have changed
        return redirect(f"{PREFIX}/o/{v.org.id}/members?done=role")

    return await with_sudo(visit, form, action)


async def _member(visit: Visit, user_id: str) -> MemberOut:
    for member in await accounts_of(visit.request).members(visit.caller, visit.org.id):
        if member.user_id == user_id:
            return member
    raise not_found("No such member.")


@router.get("/o/{org_id}/members/{user_id}/remove")
async def remove_page(visit: OrgVisitDep, user_id: str) -> Response:
    member = await _member(visit, user_id)
    return render(visit, "member_remove.html", title="Remove member", section="members", member=member)


@router.post("/o/{org_id}/members/{user_id}/remove")
async def remove(request: Request, visit: OrgVisitDep, user_id: str) -> Response:
    form = await posted(request, visit)

    async def action(v: Visit) -> Response:
        try:
            await accounts_of(request).remove_member(v.caller, v.org.id, user_id)
        except CofferError as exc:
            message = _refused(exc)
            if message is None:
                raise
            return await _members_page(v, status=exc.status, error=message)
        edge_state(request).authority_ended()
        if user_id == v.current.user.id:
            return redirect(f"{PREFIX}/orgs")
        return redirect(f"{PREFIX}/o/{v.org.id}/members?done=removed")

    return await with_sudo(visit, form, action)


@router.post("/o/{org_id}/leave")
async def leave(request: Request, visit: OrgVisitDep) -> Response:
    await posted(request, visit)
    accounts = accounts_of(request)
    try:
        await accounts.remove_member(visit.caller, visit.org.id, visit.current.user.id)
    except CofferError as exc:
        message = _refused(exc)
        if message is None:
            raise
        return await _members_page(visit, status=exc.status, error=message)
    edge_state(request).authority_ended()
    assert visit.caller.session_hash is not None
    accounts.forget(visit.caller.session_hash)
    return redirect(f"{PREFIX}/orgs")
