"""Edge dependencies: the authenticated principal, and typed clients from the lifespan."""

from __future__ import annotations

import hashlib
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader

from coffer_edge.clients.auth import AuthClient, Principal
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_kit.errors import CofferError

_api_key = APIKeyHeader(name="x-api-key", auto_error=False, description="Organization or user API key.")
_org_header = APIKeyHeader(
    name="x-organization-id",
    auto_error=False,
    description="Active organization; required for a user key whose user belongs to several.",
)


async def authenticate(
    request: Request,
    api_key: Annotated[str | None, Depends(_api_key)],
    organization_id: Annotated[str | None, Depends(_org_header)],
) -> Principal:
    """Resolve ``x-api-key`` (and ``x-organization-id``) to a principal, or refuse per §2."""
    if not api_key or not api_key.strip():
        raise CofferError(401, "unauthorized", "Missing API key: send it in the x-api-key header.")
    key_hash = hashlib.sha256(api_key.strip().encode("utf-8")).hexdigest()
    auth: AuthClient = request.app.state.auth
    principal = await auth.principal(
        key_hash, (organization_id or "").strip() or None, request_id=request.state.request_id
    )
    request.state.organization_id = principal.organization_id
    await request.app.state.rate_limiter.check(principal.key_id)
    return principal


# Dependencies are async even when trivial: a sync one costs a thread-pool round trip, and
# edge has no blocking work to do at all.
async def request_id(request: Request) -> str:
    return str(request.state.request_id)


async def _metadata(request: Request) -> MetadataClient:
    return request.app.state.metadata  # type: ignore[no-any-return]


async def _blob(request: Request) -> BlobClient:
    return request.app.state.blob  # type: ignore[no-any-return]


PrincipalDep = Annotated[Principal, Depends(authenticate)]
RequestIdDep = Annotated[str, Depends(request_id)]
MetadataDep = Annotated[MetadataClient, Depends(_metadata)]
BlobDep = Annotated[BlobClient, Depends(_blob)]
