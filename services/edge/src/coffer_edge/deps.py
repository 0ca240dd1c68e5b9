"""edge's typed state (settings, clients and rate limiter, opened by the lifespan), and the
dependencies of its routes: the authenticated principal, and the clients."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader

from coffer_edge import subtree
from coffer_edge.actor import act_as
from coffer_edge.clients.auth import AuthClient, Principal
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.clients.upload_tokens import UploadTokenClient
from coffer_edge.config import Settings
from coffer_edge.dashboard.state import DashboardState
from coffer_edge.facts import FactsRelay
from coffer_edge.ratelimit import RateLimiter
from coffer_edge.revocations import RevocationRelay
from coffer_edge.scans import ScanRelay
from coffer_kit.contract import scopes
from coffer_kit.contract.errors import (
    CofferError,
    error_response,
    forbidden,
    insufficient_scope,
    internal,
    request_id_of,
    unauthorized,
    validation_error,
)
from coffer_kit.contract.ids import is_org_id
from coffer_kit.contract.scopes import ACTION_EXTENSION, ANY_KEY, TOKEN
from coffer_kit.state import ServiceState, from_state, request_state

# Distinct scheme names: both default to "APIKeyHeader", and the document kept only one.
_api_key = APIKeyHeader(
    name="x-api-key",
    scheme_name="ApiKey",
    auto_error=False,
    description="Organization or user API key.",
)
_org_header = APIKeyHeader(
    name="x-organization-id",
    scheme_name="OrganizationId",
    auto_error=False,
    description="Active organization; required for a user key whose user belongs to several.",
)


@dataclass(slots=True)
class EdgeState(ServiceState[Settings]):
    auth: AuthClient
    metadata: MetadataClient
    blob: BlobClient
    rate_limiter: RateLimiter
    # Failed authentications per client address.
    auth_failures: RateLimiter
    upload_tokens: UploadTokenClient
    # The web dashboard's share; None in an API-only install (COFFER_DASHBOARD_ENABLED=false).
    dashboard: DashboardState | None = None
    # Resumable uploads whose lease this edge keeps between two chunks (routers/tus.py, Kept).
    kept_uploads: dict[str, Any] = field(default_factory=dict)
    # Per upload, its last chunk's record in metadata while it is written (Kept.keep): HEAD
    # waits for it even while the next chunk, which took the lease, streams.
    tus_records: dict[str, Any] = field(default_factory=dict)
    # The malware scan relay (issue 48), woken by uploads that queue a scan; None when off here.
    scans: ScanRelay | None = None
    # The image facts relay (issue 50), woken by image uploads; None when off here.
    facts: FactsRelay | None = None
    # The revocation relay, woken when this edge ends a key or a membership; None when off here.
    revocations: RevocationRelay | None = None

    def authority_ended(self) -> None:
        """A key or member stopped acting: carry its revocation to the CDN now, not next turn."""
        if self.revocations is not None:
            self.revocations.wake()


def edge_state(request: Request) -> EdgeState:
    return request_state(request, EdgeState)


@contextlib.asynccontextmanager
async def failures_counted(request: Request) -> AsyncIterator[None]:
    """Around the lookup of a credential (an API key, an upload token): a client that keeps
    sending ones auth refuses (401) is stopped before any lookup, whichever kind it sends; its
    address is the one uvicorn took from X-Forwarded-For of COFFER_TRUSTED_PROXIES, an IPv6
    one counted as its /64 (``scopes.client_network``)."""
    failures = edge_state(request).auth_failures
    client = "auth-failures:" + scopes.client_network(request.client.host if request.client else None)
    await failures.refuse_if_spent(client, "Too many failed authentications from this address")
    try:
        yield
    except CofferError as exc:
        if exc.status == 401:
            await failures.count(client)
        raise


async def authenticate(
    request: Request,
    api_key: Annotated[str | None, Depends(_api_key)],
    organization_id: Annotated[str | None, Depends(_org_header)],
) -> Principal:
    """Resolve ``x-api-key`` (and ``x-organization-id``) to a principal, or refuse per §2."""
    if not api_key or not api_key.strip():
        raise unauthorized("Missing API key: send it in the x-api-key header.")
    state = edge_state(request)
    key_hash = hashlib.sha256(api_key.strip().encode("utf-8")).hexdigest()
    organization_id = (organization_id or "").strip() or None
    async with failures_counted(request):
        if organization_id is not None and not is_org_id(organization_id):
            await _no_such_organization(state, key_hash, request)
        principal = await state.auth.principal(key_hash, organization_id, request_id=request_id_of(request))
    # For the access log line (coffer_kit.middleware).
    request.state.organization_id = principal.organization_id
    await state.rate_limiter.check(principal.key_id)
    require_scope(request, principal)
    act_as(request, "key", principal.key_id, user_id=principal.user_id)
    if not await subtree.confine(
        state.metadata,
        principal.organization_id,
        principal.folder_id,
        principal.folder_within,
        request_id=request_id_of(request) or "",
    ):
        raise forbidden(
            "This key's folder is outside the folder of the key that made it (moved out since): "
            "it can do nothing until the folder is moved back."
        )
    return principal


async def _no_such_organization(state: EdgeState, key_hash: str, request: Request) -> None:
    """Refuse an ``x-organization-id`` that is no organization id at all, without sending it to
    auth: 60,000 Latin-1 characters in it (under the 64 KiB head bound) became 120 KB of UTF-8
    in the call, which auth answered 431. It is refused as an organization
    that does not exist is (403), after the key itself (401 comes first, as always)."""
    try:
        await state.auth.principal(key_hash, None, request_id=request_id_of(request))
    except CofferError as exc:
        if exc.status not in (400, 403):  # the key's own refusal (401), or auth is down
            raise
    raise forbidden("The x-organization-id header is not an organization id.")


def declared_action(route: Any) -> str | None:
    """The action a route declares (``x-coffer-action`` in its operation; issue 46)."""
    extra = getattr(route, "openapi_extra", None)
    return extra.get(ACTION_EXTENSION) if extra else None


def require_scope(request: Request, principal: Principal) -> None:
    """The one scope check (issue 46): the key may call the matched route, from this address.

    Every keyed route declares its action (``needs``); one that does not is refused, so a
    route added without a declaration can never be called with a limited key's full power
    (edge's create_app also refuses to start with one)."""
    if principal.networks and not scopes.address_allowed(
        request.client.host if request.client else None, principal.networks
    ):
        raise forbidden("This key may not be used from this address (its networks do not include it).")
    action = declared_action(request.scope.get("route"))
    if action == ANY_KEY or (action is not None and action in principal.actions):
        return
    if action is None or action == TOKEN:
        raise internal("The route declares no action a key may call it with.")
    raise insufficient_scope(action, scopes.ordered(principal.actions))


def require_declared_actions(app: Any) -> None:
    """Refuse to build an app with a keyed route that declares no action (issue 46): every
    ``/api`` route says what it needs, so none can be left out of the scope check and of the
    authorization matrix generated from the declarations (tests/e2e/test_scopes.py)."""
    missing = [
        f"{sorted(route.methods or ())} {route.path}"
        for route in app.routes
        if isinstance(route, APIRoute)
        and route.path.startswith("/api/")
        and set(route.methods or ()) - {"OPTIONS"}
        and declared_action(route) is None
    ]
    if missing:
        raise RuntimeError(f"routes without a declared action (coffer_edge.deps.needs): {missing}")


async def refuse_unreadable_body(request: Request, exc: RequestValidationError) -> JSONResponse:
    """The contract's 400 for a body FastAPI refused; but one that is not JSON at all is found
    before any dependency runs, the key's check included: on a keyed route the key is checked
    first, so that its refusal (401, 403) comes before the body's, as on every other request."""
    errors = exc.errors()
    if errors and errors[0].get("type") == "json_invalid":
        action = declared_action(request.scope.get("route"))
        if action is not None and action != TOKEN:
            try:
                await principal_of(request)
            except CofferError as refused:
                return error_response(request, refused)
    return error_response(request, validation_error(errors))


def needs(action: str, **extra: Any) -> dict[str, Any]:
    """A route's declaration of the action it needs (its ``openapi_extra``): an action of
    coffer_kit.contract.scopes, ``ANY_KEY`` or ``TOKEN``."""
    if action not in scopes.ALL and action not in (ANY_KEY, TOKEN):
        raise ValueError(f"unknown action {action!r}")
    return {**extra, ACTION_EXTENSION: action}


async def principal_of(request: Request) -> Principal:
    """``authenticate`` for a lean route (coffer_kit.routes), which reads its headers itself."""
    headers = request.headers
    return await authenticate(request, headers.get("x-api-key"), headers.get("x-organization-id"))


# A lean route's security in the OpenAPI document, which its signature does not carry (the
# document's tidying writes every keyed operation's requirements alike: edge main.py).
KEYED: dict[str, Any] = {"security": [{"ApiKey": []}]}


# Dependencies are async even when trivial: a sync one costs a thread-pool round trip, and
# edge has no blocking work to do at all.
async def request_id(request: Request) -> str:
    return request_id_of(request) or ""


PrincipalDep = Annotated[Principal, Depends(authenticate)]
RequestIdDep = Annotated[str, Depends(request_id)]
MetadataDep = Annotated[MetadataClient, Depends(from_state(EdgeState, lambda state: state.metadata))]
BlobDep = Annotated[BlobClient, Depends(from_state(EdgeState, lambda state: state.blob))]
UploadTokensDep = Annotated[
    UploadTokenClient, Depends(from_state(EdgeState, lambda state: state.upload_tokens))
]
AuthDep = Annotated[AuthClient, Depends(from_state(EdgeState, lambda state: state.auth))]
SettingsDep = Annotated[Settings, Depends(from_state(EdgeState, lambda state: state.settings))]
