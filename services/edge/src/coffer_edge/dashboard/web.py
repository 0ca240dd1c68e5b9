"""What every dashboard route shares: typed state, the session and CSRF dependencies, forms,
cookies, redirects, and the error pages."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException as StarletteHTTPException

from coffer_edge.actor import act_as
from coffer_edge.clients.auth import AccountsClient, Caller
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.dashboard.security import CROSS_ORIGIN_MESSAGE, PREFIX
from coffer_edge.dashboard.state import DashboardState
from coffer_edge.deps import edge_state
from coffer_kit.contract import scopes
from coffer_kit.contract.accounts import CurrentOut, LoginOut, OrgOut
from coffer_kit.contract.errors import CofferError, not_found
from coffer_kit.contract.ids import is_org_id
from coffer_kit.contract.limits import PASSWORD_MAX_CHARS

log = logging.getLogger("coffer.edge.dashboard")

# A known browser's cookie lives as long as auth keeps the browser known unused (a year).
DEVICE_COOKIE_SECONDS = 365 * 24 * 3600


def state_of(request: Request) -> DashboardState:
    state = edge_state(request).dashboard
    if state is None:  # not reached: without the dashboard its routes are not mounted
        raise not_found("There is no dashboard here.")
    return state


def accounts_of(request: Request) -> AccountsClient:
    return state_of(request).accounts


def metadata_of(request: Request) -> MetadataClient:
    return state_of(request).metadata


def token_hash(token: str) -> str:
    """SHA-256 hex of a session, invite or reset token: the only form auth ever sees."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def caller_of(request: Request, session_token: str | None = None) -> Caller:
    """The request as auth sees it; ``session_token`` overrides the cookie (right after a login)."""
    if session_token is None:
        session_token = request.cookies.get(state_of(request).cookie.name) or None
    return Caller(
        session_hash=token_hash(session_token) if session_token else None,
        ip=request.client.host if request.client else None,
        user_agent=request.headers.get("user-agent"),
        request_id=getattr(request.state, "request_id", None),
    )


class SignInRequired(Exception):
    """No valid session: the dashboard answers a redirect to the sign-in page."""


@dataclass
class Visit:
    """A signed-in request: who, their orgs, and (under /o/{org}) the org with their role."""

    request: Request
    caller: Caller
    current: CurrentOut

    @property
    def csrf(self) -> str:
        return self.current.csrf_token

    @property
    def authority(self) -> str:
        """What signed URLs made here are made under: the member, so they end with the membership."""
        return f"user:{self.current.user.id}"

    @property
    def org(self) -> OrgOut:
        assert self.current.organization is not None
        return self.current.organization

    def context(self, **extra: Any) -> dict[str, Any]:
        """What every signed-in template gets."""
        return {"current": self.current, "csrf": self.csrf, "org": self.current.organization, **extra}


async def _visit(request: Request, organization_id: str | None) -> Visit:
    caller = caller_of(request)
    if caller.session_hash is None:
        raise SignInRequired
    # A change is made with the role auth holds now: one call per change, so a member removed
    # or an owner demoted a moment ago acts with what they have left (edge checks some roles
    # itself, and metadata none), not with a cached answer up to 5 s old.
    fresh = organization_id is not None and request.method not in ("GET", "HEAD")
    try:
        current = await accounts_of(request).current(caller, organization_id, fresh=fresh)
    except CofferError as exc:
        if exc.status == 401:
            raise SignInRequired from exc
        raise
    act_as(request, "user", current.user.id, label=current.user.email)
    return Visit(request, caller, current)


async def signed_in(request: Request) -> Visit:
    """The session, or a redirect to sign in."""
    return await _visit(request, None)


async def in_org(request: Request, org_id: str) -> Visit:
    """The session and the org of the path; 404 when the user is not a member."""
    # The id's shape, checked before it goes anywhere (a CR/LF in it reached a header: a 500).
    if not is_org_id(org_id):
        raise not_found("No such organization.")
    return await _visit(request, org_id)


VisitDep = Annotated[Visit, Depends(signed_in)]
OrgVisitDep = Annotated[Visit, Depends(in_org)]


class CsrfRefused(Exception):
    """The synchronizer token is missing or wrong."""


async def form_of(request: Request) -> FormData:
    """The posted form, bounded: dashboard forms are small (uploads never come this way)."""
    return await request.form(max_files=0, max_fields=50, max_part_size=64 * 1024)


def check_csrf(visit: Visit, form: FormData) -> None:
    """Second CSRF layer: the session's token, from the form field or the htmx header."""
    sent = form.get("csrf_token")
    if not isinstance(sent, str):
        sent = visit.request.headers.get("x-csrf-token", "")
    if not sent or not secrets.compare_digest(sent.encode(), visit.csrf.encode()):
        raise CsrfRefused


async def posted(request: Request, visit: Visit) -> FormData:
    """The form of an unsafe request, after the CSRF token check."""
    form = await form_of(request)
    check_csrf(visit, form)
    return form


def field(form: FormData, name: str, *, limit: int = 1024) -> str:
    """A text field of a form ("" when absent), bounded in length."""
    value = form.get(name)
    if not isinstance(value, str):
        return ""
    return value[:limit]


def password_field(form: FormData, name: str) -> str:
    """A password as typed, up to one character past auth's bound: a longer one is refused
    there, never cut short here (a cut one would sign in whatever followed the cut)."""
    return field(form, name, limit=PASSWORD_MAX_CHARS + 1)


def redirect(url: str) -> RedirectResponse:
    """303 See Other: after a POST, the browser GETs the next page (no re-post on reload)."""
    return RedirectResponse(url, status_code=303)


def safe_next(value: str | None) -> str | None:
    """A post-login destination: only a relative path under /dashboard/ (no open redirect)."""
    if not value or not value.startswith(PREFIX + "/") or value.startswith("//") or "\\" in value:
        return None
    if any(ord(c) < 0x20 or c == "\x7f" for c in value):  # a CR/LF in Location was a 500
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return None
    return value


def set_session_cookie(request: Request, response: Response, login: LoginOut) -> None:
    policy = state_of(request).cookie

    def cookie(name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name, value, max_age=max_age, path="/", secure=policy.secure, httponly=True, samesite="lax"
        )

    cookie(
        policy.name,
        login.token,
        max(1, int((login.session.expires_at - login.session.created_at).total_seconds())),
    )
    if login.device_token is not None:  # a browser the account did not know: it is known now
        cookie(policy.device, login.device_token, DEVICE_COOKIE_SECONDS)


def device_token(request: Request) -> str | None:
    """The browser's device cookie, if it has one (sign-out leaves it: it opens nothing)."""
    return request.cookies.get(state_of(request).cookie.device)


def clear_session_cookie(request: Request, response: Response) -> None:
    policy = state_of(request).cookie
    response.delete_cookie(policy.name, path="/", secure=policy.secure, httponly=True, samesite="lax")


async def throttle_ip(request: Request) -> int | None:
    """Count a sign-in, registration or reset post for the client IP; seconds to wait if over."""
    ip = scopes.client_network(request.client.host if request.client else None)
    try:
        await state_of(request).ip_limiter.check("dashboard-ip:" + ip)
    except CofferError as exc:
        return int((exc.headers or {}).get("Retry-After", "60"))
    return None


# Error pages ----------------------------------------------------------------------------

_TITLES = {
    400: "That did not work",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed",
    409: "That did not work",
    410: "This link no longer works",
    429: "Too many attempts",
    500: "Something went wrong",
    503: "Coffer is temporarily unavailable",
}


def in_dashboard(request: Request) -> bool:
    path = request.url.path
    return path == PREFIX or path.startswith(PREFIX + "/")


def error_page(
    request: Request, status: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    """A whole HTML page for an error: no stack trace, the request id to quote."""
    renderer = state_of(request).renderer
    context = {
        "title": _TITLES.get(status, "That did not work"),
        "status": status,
        "message": message,
        "request_id": getattr(request.state, "request_id", None),
        "narrow": True,
    }
    return renderer.page(request, "error.html", context, status=status, headers=headers)


def _login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.method != "GET" or safe_next(target) is None:
        return redirect(PREFIX + "/login")
    return redirect(PREFIX + "/login?next=" + quote(target, safe="/"))


async def _dashboard_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, SignInRequired):
        response = _login_redirect(request)
        clear_session_cookie(request, response)
        return response
    if isinstance(exc, CsrfRefused):
        return error_page(request, 403, CROSS_ORIGIN_MESSAGE)
    if isinstance(exc, CofferError):
        if exc.status == 401:
            return _login_redirect(request)
        if exc.status == 404:
            return error_page(request, 404, "There is nothing here, or you do not have access to it.")
        if exc.status == 503:
            return error_page(
                request,
                503,
                "Coffer is temporarily unavailable. Try again in a moment.",
                headers={"Retry-After": (exc.headers or {}).get("Retry-After", "5")},
            )
        if exc.status >= 500:
            return error_page(request, 500, "Something went wrong on our side. Try again.")
        return error_page(request, exc.status, exc.message, headers=exc.headers)
    if isinstance(exc, StarletteHTTPException):
        if exc.status_code == 404:
            return error_page(request, 404, "There is nothing here.")
        return error_page(request, exc.status_code, str(exc.detail))
    if isinstance(exc, RequestValidationError):
        return error_page(request, 400, "The form was incomplete or malformed. Go back and try again.")
    log.exception(
        "unhandled dashboard error", extra={"request_id": getattr(request.state, "request_id", None)}
    )
    return error_page(request, 500, "Something went wrong on our side. Try again.")


Handler = Callable[[Request, Any], Awaitable[Response]]


def install_error_pages(app: FastAPI) -> None:
    """Under /dashboard errors are HTML pages; elsewhere the API's JSON envelope stays as it is."""
    for cls in (CofferError, RequestValidationError, StarletteHTTPException, Exception):
        api_handler: Handler | None = app.exception_handlers.get(cls)  # type: ignore[assignment]

        async def handler(
            request: Request, exc: Exception, api_handler: Handler | None = api_handler
        ) -> Response:
            if in_dashboard(request) or api_handler is None:
                return await _dashboard_error(request, exc)
            return await api_handler(request, exc)

        app.add_exception_handler(cls, handler)
    for cls in (SignInRequired, CsrfRefused):
        app.add_exception_handler(cls, _dashboard_error)


# Re-authentication ("sudo") -------------------------------------------------------------

REAUTH_FIELD = "reauth_password"


def _reauth_page(visit: Visit, form: FormData, error: str | None = None) -> Response:
    """Ask for the password, carrying the original form so that it proceeds afterwards."""
    carried = [
        (name, value)
        for name, value in form.multi_items()
        if isinstance(value, str) and name not in ("csrf_token", REAUTH_FIELD)
    ]
    context = visit.context(
        title="Confirm your password",
        action=visit.request.url.path,
        carried=carried,
        error=error,
        section=None,
    )
    status = 400 if error else 403
    return state_of(visit.request).renderer.page(visit.request, "reauth.html", context, status=status)


async def with_sudo(visit: Visit, form: FormData, action: Callable[[Visit], Awaitable[Response]]) -> Response:
    """Run ``action``; when auth wants a fresh password, ask for it, then run it again.

    A password in the form re-authenticates first: auth answers a new session (new token and
    CSRF token), whose cookie the final response sets.
    """
    request = visit.request
    password = field(form, REAUTH_FIELD)
    login: LoginOut | None = None
    if password:
        try:
            login = await accounts_of(request).reauth(visit.caller, password=password)
        except CofferError as exc:
            if exc.status == 429:
                retry = int((exc.details or {}).get("retryAfter") or 30)
                return _reauth_page(visit, form, f"Too many attempts. Try again in {retry} s.")
            if exc.status == 400:
                return _reauth_page(visit, form, "Wrong password.")
            raise
        current = visit.current.model_copy(update={"csrf_token": login.csrf_token, "session": login.session})
        visit = Visit(request, caller_of(request, login.token), current)
    try:
        response = await action(visit)
    except CofferError as exc:
        if exc.code == "reauth_required" and login is None:
            return _reauth_page(visit, form)
        if login is None:
            raise
        response = await _dashboard_error(request, exc)
    if login is not None:
        set_session_cookie(request, response, login)
    return response
