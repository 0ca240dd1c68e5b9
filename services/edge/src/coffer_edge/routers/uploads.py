"""Upload tokens (CONTRACT §8): a server mints one with its key; a browser uploads with it.

``POST /api/upload-tokens`` (a key) stores only the token's SHA-256 in auth, with its scope.
``POST /api/uploads?token=…`` (no key) runs the same upload protocol as ``POST /api/assets``
in the minting organization, against its quota, and claims the token just before committing,
so of concurrent uploads with one token exactly one succeeds, and a failed upload leaves the
token usable. The route answers CORS preflights and sends ``Access-Control-Allow-Origin: *``
on every answer (the token is the only credential; no cookies).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import string
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from starlette.types import Scope

from coffer_edge import subtree
from coffer_edge.actor import act_as
from coffer_edge.deps import (
    BlobDep,
    MetadataDep,
    PrincipalDep,
    RequestIdDep,
    SettingsDep,
    UploadTokensDep,
    edge_state,
    failures_counted,
    needs,
)
from coffer_edge.routers.assets import UploadScope, token_asset_scope, upload_response
from coffer_edge.routers.folders import JSONRoute
from coffer_edge.schemas import TOKEN_UPLOAD_BODY, Success, UploadToken, UploadTokenCreate, errors
from coffer_edge.schemas import Asset as AssetOut
from coffer_edge.subtree import require_token_inside
from coffer_kit.contract import describe, expiry
from coffer_kit.contract.errors import CofferError, invalid
from coffer_kit.contract.ids import UPLOAD_TOKEN_ID_PATTERN
from coffer_kit.contract.scopes import TOKEN
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_kit.contract.wire import TokenAsset, UploadTokenIn

UPLOADS_PATH = "/api/uploads"
TOKEN_PREFIX = "cof_upl_"
_BASE62 = string.digits + string.ascii_letters
# 32 base62 characters: ~190 bits, like API keys.
_TOKEN_LENGTH = 32

router = APIRouter(tags=["upload tokens"])
json_router = APIRouter(tags=["upload tokens"], route_class=JSONRoute)


def new_token() -> str:
    """``cof_upl_`` and 32 base62 characters, so secret scanners can recognise a leaked one."""
    return TOKEN_PREFIX + "".join(secrets.choice(_BASE62) for _ in range(_TOKEN_LENGTH))


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@json_router.post(
    "/api/upload-tokens",
    status_code=201,
    response_model=UploadToken,
    responses=errors(404, 415),
    openapi_extra=needs("upload-tokens:create"),
)
async def create_upload_token(
    body: UploadTokenCreate,
    settings: SettingsDep,
    principal: PrincipalDep,
    metadata: MetadataDep,
    tokens: UploadTokensDep,
    rid: RequestIdDep,
) -> Any:
    """Mint a short-lived, single-use token with which a browser uploads one file, without a key."""
    org = principal.organization_id
    # The folder must exist now (404/403) and the name must be valid (400), not at upload time.
    target = await metadata.check_upload_target(org, body.folderId or None, body.name, request_id=rid)
    asset = _token_asset(body)
    token = new_token()
    created = await tokens.create(
        org,
        UploadTokenIn(
            token_hash=token_hash(token),
            key_id=principal.key_id,
            folder_id=target.folder_id,
            name=target.name,
            max_bytes=body.maxBytes,
            content_types=body.content_types(),
            expires_in=body.expiresIn,
            visibility=body.visibility,
            asset=asset,
        ),
        request_id=rid,
    )
    return {
        "id": created.id,
        "token": token,
        "url": f"{settings.base_url}{UPLOADS_PATH}?token={token}",
        "expiresAt": created.expires_at,
        "expiresIn": body.expiresIn,
    }


def _token_asset(body: UploadTokenCreate) -> TokenAsset | None:
    """What the token fixes about its asset (issues 47 and 50), checked now: 400 naming the field."""
    expires_at = None
    if body.assetExpiresAt:
        when = expiry.parse_expires_at(body.assetExpiresAt, field="assetExpiresAt")
        if when <= utcnow() + timedelta(seconds=body.expiresIn):
            raise invalid("assetExpiresAt must come after the token expires.", field="assetExpiresAt")
        expires_at = isoformat(when)
    metadata = describe.check_metadata(body.metadata) if body.metadata is not None else None
    tags = describe.check_tags(body.tags) if body.tags is not None else None
    if tags is not None and len(tags) != len(body.tags):
        raise invalid("'tags' lists a tag twice.", field="tags")
    if expires_at is None and metadata is None and tags is None and body.acceptMetadata:
        return None
    return TokenAsset(
        expires_at=expires_at, metadata=metadata, tags=tags, forbid_description=not body.acceptMetadata
    )


@router.delete(
    "/api/upload-tokens/{token_id}",
    response_model=Success,
    responses=errors(404),
    openapi_extra=needs("upload-tokens:create"),
)
async def revoke_upload_token(
    token_id: Annotated[str, Path(pattern=UPLOAD_TOKEN_ID_PATTERN)],
    principal: PrincipalDep,
    tokens: UploadTokensDep,
    metadata: MetadataDep,
    rid: RequestIdDep,
) -> Any:
    """Revoke an upload token before it is used (the minting organization's keys; others 404)."""
    if principal.folder_id is not None:  # a subtree key: its subtree's tokens only (issue 46)
        await require_token_inside(principal, token_id, tokens, metadata, rid)
    await tokens.revoke(principal.organization_id, token_id, request_id=rid)
    return {"success": True}


@router.post(
    UPLOADS_PATH,
    status_code=201,
    response_model=AssetOut,
    responses=errors(404, 408, 413, 415),
    openapi_extra=needs(TOKEN, **TOKEN_UPLOAD_BODY),
)
async def upload_with_token(
    request: Request,
    metadata: MetadataDep,
    blob: BlobDep,
    tokens: UploadTokensDep,
    rid: RequestIdDep,
    token: Annotated[
        str | None,
        Query(description="The upload token (`cof_upl_…`) from `POST /api/upload-tokens`.", max_length=256),
    ] = None,
) -> Any:
    """Upload one file with an upload token instead of a key (multipart: `file`, optional `name`)."""
    if not token or not token.startswith(TOKEN_PREFIX):
        raise CofferError(401, "unauthorized", "Missing or malformed upload token: send ?token=cof_upl_….")
    async with failures_counted(request):
        grant = await tokens.grant(token_hash(token), request_id=rid)
    request.state.organization_id = grant.organization_id  # for the access log line
    await edge_state(request).rate_limiter.check(grant.token_id)
    act_as(request, "token", grant.token_id)
    # In the subtree its key may reach now, as the key's own.
    await subtree.confine_token(
        edge_state(request).metadata,
        grant.organization_id,
        grant.confined_to,
        grant.confined_within,
        request_id=rid,
    )

    async def claim(asset_id: str) -> None:
        await tokens.claim(grant.token_id, asset_id, request_id=rid)

    async def release(asset_id: str) -> None:
        # If this fails the token stays spent: safe, and the server can mint a new one.
        with contextlib.suppress(CofferError):
            await tokens.release(grant.token_id, asset_id, request_id=rid)

    scope = UploadScope(
        organization_id=grant.organization_id,
        quota_bytes=grant.quota_bytes,
        max_bytes=grant.max_bytes,
        content_types=tuple(grant.content_types) if grant.content_types is not None else None,
        name=grant.name,
        folder_id=grant.folder_id,
        fixed_folder=True,
        claim=claim,
        release=release,
        # The token's, else the organization's default now; never the (untrusted) form's.
        visibility=grant.visibility or grant.default_visibility,
        fixed_visibility=True,
        ingest=grant.ingest,
        **token_asset_scope(grant.asset),
    )
    return await upload_response(request, scope, metadata, blob, rid)


@router.options(UPLOADS_PATH, status_code=204, include_in_schema=False)
async def preflight() -> Response:
    """CORS preflight: any origin may post a form here (the headers come from the middleware)."""
    return Response(status_code=204)


_CORS = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-expose-headers", b"x-request-id"),
]
_PREFLIGHT = [
    (b"access-control-allow-methods", b"POST, OPTIONS"),
    (b"access-control-allow-headers", b"content-type, x-request-id"),
    (b"access-control-max-age", b"600"),
]


def upload_cors_headers(scope: Scope) -> list[tuple[bytes, bytes]] | None:
    """``Access-Control-Allow-Origin: *`` on every answer of the token upload route, and the
    preflight headers on ``OPTIONS`` (for ``ResponseHeadersMiddleware``)."""
    if scope.get("path") != UPLOADS_PATH or scope.get("method") not in ("POST", "OPTIONS"):
        return None
    return _CORS + (_PREFLIGHT if scope.get("method") == "OPTIONS" else [])
