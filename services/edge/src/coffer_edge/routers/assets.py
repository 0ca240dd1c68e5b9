"""``/api/assets`` (CONTRACT §5): edge's half of the upload and delete protocols."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from starlette.requests import ClientDisconnect

from coffer_edge.clients.auth import Principal
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.deps import BlobDep, MetadataDep, PrincipalDep, RequestIdDep
from coffer_edge.metrics import UPLOAD_BYTES, UPLOAD_DURATION, UPLOADS
from coffer_edge.schemas import UPLOAD_BODY, AssetList, SignedUrl, Success, errors, whole_number
from coffer_edge.schemas import Asset as AssetOut
from coffer_kit.errors import CofferError
from coffer_kit.ids import new_id
from coffer_kit.urls import MAX_FILE_BYTES

log = logging.getLogger("coffer.edge.assets")
router = APIRouter(prefix="/api/assets", tags=["assets"])

# Room for the multipart framing and the small form fields around a file of the maximum size.
MULTIPART_OVERHEAD = 1024 * 1024
MAX_BODY_BYTES = MAX_FILE_BYTES + MULTIPART_OVERHEAD


def too_large() -> CofferError:
    return CofferError(413, "file_too_large", f"The file exceeds {MAX_FILE_BYTES} bytes (100 MiB).")


class _CappedBody:
    """The request body as it arrives, stopped once it cannot hold a file within the limit.

    Why it stopped is kept here: the HTTP client that forwards the body to blob reports a
    failing body as a transport error of its own, whatever the cause.
    """

    def __init__(self, request: Request) -> None:
        self.request = request
        self.too_large = False
        self.client_gone = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        try:
            async for chunk in self.request.stream():
                seen += len(chunk)
                if seen > MAX_BODY_BYTES:
                    self.too_large = True
                    raise too_large()
                if chunk:
                    yield chunk
        except ClientDisconnect:
            self.client_gone = True
            raise


def _require_multipart(request: Request) -> str:
    content_type = request.headers.get("content-type", "")
    if (
        content_type.split(";", 1)[0].strip().lower() != "multipart/form-data"
        or "boundary=" not in content_type
    ):
        raise CofferError(
            415, "unsupported_media_type", "Upload the file as multipart/form-data with a 'file' part."
        )
    return content_type


def _check_length(request: Request) -> None:
    declared = request.headers.get("content-length")
    if declared is None:
        return
    try:
        length = int(declared)
    except ValueError:
        raise CofferError(400, "invalid_request", "Content-Length is not a number.") from None
    if length > MAX_BODY_BYTES:
        raise too_large()


@router.post(
    "", status_code=201, response_model=AssetOut, responses=errors(404, 413, 415), openapi_extra=UPLOAD_BODY
)
async def upload_asset(
    request: Request, principal: PrincipalDep, metadata: MetadataDep, blob: BlobDep, rid: RequestIdDep
) -> Any:
    """Upload a file (multipart/form-data: `file`, optional `name` and `folderId`)."""
    started = time.perf_counter()
    outcome = "failed"
    try:
        asset = await _upload(request, principal, metadata, blob, rid)
    except CofferError as exc:
        # quota_exceeded and file_too_large are worth telling apart; other refusals are not.
        outcome = exc.code if exc.status == 413 else "rejected" if exc.status < 500 else "failed"
        raise
    else:
        outcome = "created"
        UPLOAD_BYTES.inc(asset["size"])
        return asset
    finally:
        UPLOADS.labels(outcome).inc()
        UPLOAD_DURATION.labels(outcome).observe(time.perf_counter() - started)


async def _upload(
    request: Request, principal: Principal, metadata: MetadataClient, blob: BlobClient, rid: str
) -> dict[str, Any]:
    """DESIGN.md's upload protocol: intent, stream to blob, commit in metadata, or clean up."""
    content_type = _require_multipart(request)
    _check_length(request)
    org = principal.organization_id
    asset_id = new_id("ast")
    await metadata.register_intent(org, asset_id, request_id=rid)

    async def discard() -> None:
        """Delete what blob may hold, then the intent; whatever fails is left to the sweeper."""
        try:
            await blob.delete_prefix(org, asset_id, request_id=rid)
            await metadata.abandon_intent(org, asset_id, request_id=rid)
        except CofferError:
            log.warning("cleanup deferred to the sweeper", extra={"asset_id": asset_id, "request_id": rid})

    body = _CappedBody(request)
    try:
        stored = await blob.upload(org, asset_id, body.__aiter__(), content_type, request_id=rid)
    except (CofferError, ClientDisconnect):
        await discard()
        if body.too_large:
            raise too_large() from None
        if body.client_gone:
            raise CofferError(
                400, "invalid_request", "The client went away before the upload finished."
            ) from None
        raise

    fields = stored.get("fields") or {}
    asset = {
        "id": asset_id,
        "key": stored["key"],
        # An empty name field (as an HTML form sends it) means "use the file name".
        "name": fields.get("name") or None,
        "filename": stored["filename"],
        "folderId": fields.get("folderId") or None,
        "mimeType": stored["mimeType"],
        "size": stored["size"],
        "sha256": stored["sha256"],
        "quotaBytes": principal.quota_bytes,
    }
    try:
        return await metadata.commit_upload(org, asset, request_id=rid)  # type: ignore[no-any-return]
    except CofferError as exc:
        if 400 <= exc.status < 500:
            # A definite refusal: the transaction rolled back, so the bytes must go.
            await discard()
        # Otherwise the outcome is unknown (metadata may have committed): the sweeper decides
        # safely later, because a committed upload no longer has an intent.
        raise


# Reads answer metadata's JSON as it is: it is the public body byte for byte, so decoding,
# validating against the response model and encoding it again would only cost CPU. The
# response models stay in the decorators for the OpenAPI document.
@router.get("", response_model=AssetList, responses=errors(404))
async def list_assets(
    principal: PrincipalDep,
    metadata: MetadataDep,
    rid: RequestIdDep,
    limit: Annotated[whole_number(1, 100), Query(description="Page size, 1–100.")] = 50,
    offset: Annotated[whole_number(0), Query(description="Assets to skip.")] = 0,
    folder_id: Annotated[
        str | None,
        Query(
            alias="folderId", description="Omitted: all assets; empty: root level only; an id: that folder."
        ),
    ] = None,
) -> Response:
    """List assets, newest first, with the total that match."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if folder_id is not None:
        params["folderId"] = folder_id
    page = await metadata.list_assets(principal.organization_id, params, request_id=rid)
    return Response(page, media_type="application/json")


@router.get("/{asset_id}", response_model=AssetOut, responses=errors(404))
async def get_asset(
    asset_id: str, principal: PrincipalDep, metadata: MetadataDep, rid: RequestIdDep
) -> Response:
    """One asset."""
    asset = await metadata.get_asset_body(principal.organization_id, asset_id, request_id=rid)
    return Response(asset, media_type="application/json")


@router.delete("/{asset_id}", response_model=Success, responses=errors(404))
async def delete_asset(
    asset_id: str, principal: PrincipalDep, metadata: MetadataDep, blob: BlobDep, rid: RequestIdDep
) -> Any:
    """Delete an asset's metadata and bytes; its URLs answer 404 afterwards."""
    key = await metadata.hide_asset(principal.organization_id, asset_id, request_id=rid)
    # If this fails the tombstone stays: a retried DELETE, or the sweeper, finishes the job.
    await blob.delete_object(key, request_id=rid)
    await metadata.finish_delete(asset_id, request_id=rid)
    return {"success": True}


@router.get("/{asset_id}/url", response_model=SignedUrl, responses=errors(404))
async def signed_url(
    asset_id: str,
    principal: PrincipalDep,
    metadata: MetadataDep,
    blob: BlobDep,
    rid: RequestIdDep,
    expires_in: Annotated[
        whole_number(1, 604800), Query(alias="expiresIn", description="Validity in seconds, 1–604800.")
    ] = 3600,
) -> Any:
    """A time-limited signed CDN URL for an asset."""
    asset = await metadata.get_asset(principal.organization_id, asset_id, request_id=rid)
    url = await blob.sign(asset["key"], expires_in, request_id=rid)
    return {
        "url": url,
        "expiresIn": expires_in,
        "asset": {k: asset[k] for k in ("id", "name", "mimeType", "size")},
    }
