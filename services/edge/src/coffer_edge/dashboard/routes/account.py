"""The account page: password, sessions, personal keys across organizations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from coffer_edge.dashboard.routes.orgs import render
from coffer_edge.dashboard.routes.public import _hints
from coffer_edge.dashboard.security import PREFIX
from coffer_edge.dashboard.web import (
    Visit,
    VisitDep,
    accounts_of,
    field,
    password_field,
    posted,
    redirect,
    set_session_cookie,
    with_sudo,
)
from coffer_kit.contract.errors import CofferError

router = APIRouter(prefix=PREFIX, include_in_schema=False)

NOTICES = {
    "password": "Your password was changed.",
    "session": "The session was signed out.",
    "others": "Your other sessions were signed out.",
}


async def _account_page(visit: Visit, *, status: int = 200, **extra: Any) -> Response:
    accounts = accounts_of(visit.request)
    sessions = await accounts.sessions(visit.caller)
    keys = await accounts.my_keys(visit.caller)
    return render(
        visit,
        "account.html",
        status,
        title="Account",
        sessions=sessions,
        keys=keys,
        now=datetime.now(UTC),
        **extra,
    )


@router.get("/account")
async def account(visit: VisitDep, done: str | None = None) -> Response:
    return await _account_page(visit, notice=NOTICES.get(done or ""))


@router.post("/account/password")
async def change_password(request: Request, visit: VisitDep) -> Response:
    form = await posted(request, visit)
    accounts = accounts_of(request)
    try:
        changed = await accounts.change_password(
            visit.caller,
            current=password_field(form, "current"),
            new=password_field(form, "new"),
            revoke_others=bool(field(form, "revoke_others")),
        )
    except CofferError as exc:
        if exc.code == "wrong_password":
            return await _account_page(visit, status=400, error="The current password is wrong.")
        if exc.code == "weak_password":
            return await _account_page(
                visit,
                status=400,
                error="The new password is too easy to guess. Choose a longer or less common one.",
                hints=_hints(exc),
            )
        if exc.status == 429:
            retry = int((exc.details or {}).get("retryAfter") or 30)
            return await _account_page(visit, status=429, error=f"Too many attempts. Try again in {retry} s.")
        if exc.status == 400:
            return await _account_page(visit, status=400, error=exc.message)
        raise
    assert visit.caller.session_hash is not None
    accounts.forget(visit.caller.session_hash)
    # A new session replaced this one (the change re-authenticated): its cookie.
    response = redirect(f"{PREFIX}/account?done=password")
    set_session_cookie(request, response, changed)
    return response


@router.post("/account/sessions/revoke-others")
async def revoke_others(request: Request, visit: VisitDep) -> Response:
    form = await posted(request, visit)

    async def action(v: Visit) -> Response:
        await accounts_of(request).revoke_other_sessions(v.caller)
        return redirect(f"{PREFIX}/account?done=others")

    return await with_sudo(visit, form, action)


@router.post("/account/sessions/{session_id}/revoke")
async def revoke_session(request: Request, visit: VisitDep, session_id: str) -> Response:
    form = await posted(request, visit)

    async def action(v: Visit) -> Response:
        await accounts_of(request).revoke_session(v.caller, session_id)
        return redirect(f"{PREFIX}/account?done=session")

    return await with_sudo(visit, form, action)
