"""Pages without a session: sign in, register, forgot, reset, invite; and sign out."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from coffer_edge.dashboard.security import PREFIX
from coffer_edge.dashboard.web import (
    SignInRequired,
    Visit,
    VisitDep,
    accounts_of,
    caller_of,
    clear_session_cookie,
    device_token,
    error_page,
    field,
    form_of,
    password_field,
    posted,
    redirect,
    safe_next,
    set_session_cookie,
    signed_in,
    state_of,
    throttle_ip,
    token_hash,
)
from coffer_edge.metrics import DASHBOARD_LOGINS
from coffer_kit.contract.accounts import InvitationPreviewOut
from coffer_kit.contract.errors import CofferError, not_found

log = logging.getLogger("coffer.edge.dashboard")
router = APIRouter(prefix=PREFIX, include_in_schema=False)

# Token pages hold a secret in their URL: no Referer leaves them.
NO_REFERRER = {"Referrer-Policy": "no-referrer"}


def _page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
    state = state_of(request)
    context.setdefault("narrow", True)
    context.setdefault("signup", state.settings.signup)
    headers = dict(NO_REFERRER) if context.get("referrer") == "no-referrer" else None
    return state.renderer.page(request, template, context, status=status, headers=headers)


def _too_many(request: Request, template: str, retry_after: int, **context: Any) -> Response:
    response = _page(
        request, template, 429, error=f"Too many attempts. Try again in {retry_after} s.", **context
    )
    response.headers["Retry-After"] = str(retry_after)
    return response


def _hints(exc: CofferError) -> list[str]:
    details = exc.details or {}
    hints = [str(details["warning"])] if details.get("warning") else []
    return hints + [str(s) for s in details.get("suggestions") or []]


async def _optional_visit(request: Request) -> Visit | None:
    try:
        return await signed_in(request)
    except SignInRequired:
        return None


@router.get("")
@router.get("/")
async def index(visit: VisitDep) -> Response:
    """The last org used, else the list (or the creation form when there is none)."""
    orgs = visit.current.organizations
    last = visit.current.session.last_org_id
    if last and any(o.id == last for o in orgs):
        return redirect(f"{PREFIX}/o/{last}")
    if not orgs:
        return redirect(f"{PREFIX}/orgs/new")
    if len(orgs) == 1:
        return redirect(f"{PREFIX}/o/{orgs[0].id}")
    return redirect(f"{PREFIX}/orgs")


@router.get("/login")
async def login_page(request: Request, next: str | None = None, reset: str | None = None) -> Response:
    notice = "Your password is set. Sign in with it." if reset else None
    return _page(request, "login.html", title="Sign in", next=safe_next(next), email="", notice=notice)


@router.post("/login")
async def login(request: Request) -> Response:
    form = await form_of(request)
    email, password = field(form, "email", limit=320).strip(), password_field(form, "password")
    target = safe_next(field(form, "next"))
    context = {"title": "Sign in", "next": target, "email": email}
    retry = await throttle_ip(request)
    if retry is not None:
        DASHBOARD_LOGINS.labels("throttled").inc()
        return _too_many(request, "login.html", retry, **context)
    try:
        session = await accounts_of(request).login(
            caller_of(request), email=email, password=password, device_token=device_token(request)
        )
    except CofferError as exc:
        if exc.status == 429:
            DASHBOARD_LOGINS.labels("throttled").inc()
            retry_after = int((exc.details or {}).get("retryAfter") or 30)
            return _too_many(request, "login.html", retry_after, **context)
        if exc.status in (400, 401):
            DASHBOARD_LOGINS.labels("failed").inc()
            return _page(request, "login.html", 400, error="Wrong email or password.", **context)
        raise
    DASHBOARD_LOGINS.labels("success").inc()
    response = redirect(target or f"{PREFIX}/")
    set_session_cookie(request, response, session)
    return response


async def _preview(request: Request, token: str) -> InvitationPreviewOut:
    if not token or len(token) > 128:
        raise not_found("No such invitation.")
    try:
        return await accounts_of(request).invitation_preview(caller_of(request), token_hash(token))
    except CofferError as exc:
        if exc.status == 410:
            why = {"expired": "has expired", "accepted": "was used already", "revoked": "was revoked"}.get(
                str((exc.details or {}).get("status")), "no longer works"
            )
            raise CofferError(410, exc.code, f"This invitation {why}. Ask an owner for a new link.") from exc
        raise


@router.get("/register")
async def register_page(request: Request, invite: str | None = None) -> Response:
    signup = state_of(request).settings.signup
    invitation = await _preview(request, invite) if invite else None
    if invitation is None and signup != "open":
        return error_page(
            request,
            404,
            "Sign-up is by invitation only here: ask an owner of an organization for an invite link."
            if signup == "invite"
            else "Sign-up is closed on this Coffer. Ask its operator for an account.",
        )
    return _page(
        request,
        "register.html",
        title="Create account",
        email=invitation.email if invitation else "",
        invite=invite,
        invitation=invitation,
        referrer="no-referrer" if invite else None,
    )


@router.post("/register")
async def register(request: Request) -> Response:
    form = await form_of(request)
    email, password = field(form, "email", limit=320).strip(), password_field(form, "password")
    invite = field(form, "invite", limit=128) or None
    invitation = await _preview(request, invite) if invite else None
    context: dict[str, Any] = {
        "title": "Create account",
        "email": email,
        "invite": invite,
        "invitation": invitation,
        "referrer": "no-referrer" if invite else None,
    }
    retry = await throttle_ip(request)
    if retry is not None:
        return _too_many(request, "register.html", retry, **context)
    try:
        session = await accounts_of(request).register(
            caller_of(request),
            email=email,
            password=password,
            invitation_token_hash=token_hash(invite) if invite else None,
        )
    except CofferError as exc:
        if exc.code == "email_taken":
            return _page(
                request,
                "register.html",
                409,
                error="An account with this email exists. Sign in instead.",
                **context,
            )
        if exc.code == "weak_password":
            return _page(
                request,
                "register.html",
                400,
                error="This password is too easy to guess. Choose a longer or less common one.",
                hints=_hints(exc),
                **context,
            )
        if exc.status in (400, 409):
            return _page(request, "register.html", exc.status, error=exc.message, **context)
        raise
    target = f"{PREFIX}/orgs/new"
    if invite and invitation is not None:
        target = f"{PREFIX}/invite/{invite}"
    response = redirect(target)
    set_session_cookie(request, response, session)
    return response


@router.get("/forgot")
async def forgot(request: Request) -> Response:
    return _page(request, "forgot.html", title="Forgot password")


@router.get("/reset/{token}")
async def reset_page(request: Request, token: str) -> Response:
    preview = await accounts_of(request).reset_preview(caller_of(request), token_hash(token[:128]))
    return _page(
        request, "reset.html", title="New password", preview=preview, token=token, referrer="no-referrer"
    )


@router.post("/reset/{token}")
async def reset(request: Request, token: str) -> Response:
    form = await form_of(request)
    accounts = accounts_of(request)
    caller = caller_of(request)
    preview = await accounts.reset_preview(caller, token_hash(token[:128]))
    context: dict[str, Any] = {
        "title": "New password",
        "preview": preview,
        "token": token,
        "referrer": "no-referrer",
    }
    retry = await throttle_ip(request)
    if retry is not None:
        return _too_many(request, "reset.html", retry, **context)
    try:
        await accounts.reset_consume(
            caller, token_hash=token_hash(token[:128]), password=password_field(form, "password")
        )
    except CofferError as exc:
        if exc.code == "weak_password":
            return _page(
                request,
                "reset.html",
                400,
                error="This password is too easy to guess. Choose a longer or less common one.",
                hints=_hints(exc),
                **context,
            )
        if exc.status == 400:
            return _page(request, "reset.html", 400, error=exc.message, **context)
        raise
    return redirect(f"{PREFIX}/login?reset=1")


@router.get("/invite/{token}")
async def invite_page(request: Request, token: str) -> Response:
    invitation = await _preview(request, token)
    visit = await _optional_visit(request)
    context: dict[str, Any] = {"title": "Invitation", "invitation": invitation, "token": token}
    context["referrer"] = "no-referrer"
    if visit is not None:
        context.update(visit.context())
        context["org"] = None
    return _page(request, "invite.html", **context)


@router.post("/invite/{token}/accept")
async def accept_invite(request: Request, token: str, visit: VisitDep) -> Response:
    await posted(request, visit)
    accounts = accounts_of(request)
    try:
        org = await accounts.accept_invitation(visit.caller, token_hash(token[:128]))
    except CofferError as exc:
        if exc.status == 410:
            await _preview(request, token)  # raises the 410 page with its reason
        raise
    assert visit.caller.session_hash is not None
    accounts.forget(visit.caller.session_hash)
    return redirect(f"{PREFIX}/o/{org.id}")


@router.post("/logout")
async def logout(request: Request, visit: VisitDep) -> Response:
    await posted(request, visit)
    await accounts_of(request).logout(visit.caller)
    response = redirect(f"{PREFIX}/login")
    clear_session_cookie(request, response)
    # Nothing of the signed-in pages stays in this browser: not its cache (ASVS 7.4.1), nor its
    # storage, where the file browser keeps unfinished uploads' URLs.
    response.headers["Clear-Site-Data"] = '"cache", "storage"'
    return response


@router.get("/static/{name:path}")
async def static(request: Request, name: str) -> Response:
    found = state_of(request).renderer.static_files.get(name)
    if found is None:
        return error_page(request, 404, "There is nothing here.")
    return Response(
        found.body,
        media_type=found.media_type,
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )
