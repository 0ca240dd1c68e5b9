"""``/api/assets`` (docs/contract.md §5): edge's half of the upload and delete protocols."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema
from python_multipart.multipart import parse_options_header
from starlette.requests import ClientDisconnect

from coffer_edge import trash
from coffer_edge.clients.auth import Principal
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.deps import (
    KEYED,
    BlobDep,
    MetadataDep,
    PrincipalDep,
    RequestIdDep,
    edge_state,
    needs,
    principal_of,
)
from coffer_edge.metrics import UPLOAD_BYTES, UPLOAD_DURATION, UPLOADS
from coffer_edge.routers.folders import JSONRoute
from coffer_edge.schemas import (
    FIT_SCHEMA,
    FORMAT_SCHEMA,
    META_FILTER_PARAMETER,
    QUALITY_SCHEMA,
    SIDE_SCHEMA,
    UPLOAD_BODY,
    AssetList,
    AssetSort,
    AssetUpdate,
    ByteCount,
    ExpiresIn,
    PageLimit,
    PageOffset,
    SignedAsset,
    SignedUrl,
    Success,
    TrueOrFalse,
    errors,
)
from coffer_edge.schemas import Asset as AssetOut
from coffer_kit.contract import describe, expiry, scopes, transforms
from coffer_kit.contract.describe import MAX_META_FILTERS, MAX_TAG_FILTERS
from coffer_kit.contract.errors import (
    CofferError,
    file_too_large,
    insufficient_scope,
    invalid,
    invalid_transform,
    quota_exceeded,
    request_id_of,
    request_timeout,
    unavailable,
    unsupported_media_type,
)
from coffer_kit.contract.ids import ASSET, new_id
from coffer_kit.contract.limits import (
    CURSOR_MAX_CHARS,
    EXPIRES_IN_DEFAULT,
    MAX_BOUNDARY_CHARS,
    MAX_FILE_BYTES,
    MULTIPART_OVERHEAD,
    PAGE_LIMIT_DEFAULT,
    PAGE_OFFSET_DEFAULT,
)
from coffer_kit.contract.resources import Visibility
from coffer_kit.contract.wire import Ingest, Stored, TokenAsset, TransformFields, UploadCommit
from coffer_kit.routes import LeanRoute

log = logging.getLogger("coffer.edge.assets")
router = APIRouter(prefix="/api/assets", tags=["assets"])
# Routes with a JSON body: the media type is checked before the body is parsed.
json_router = APIRouter(prefix="/api/assets", tags=["assets"], route_class=JSONRoute)
# The two hot routes (the asset GET, the upload): lean routes, which read the key and the state
# themselves instead of through FastAPI's dependency solver (coffer_kit.routes), whose work
# cost more than the rest of edge's share of a GET; their security is in the document by hand.
lean_router = APIRouter(prefix="/api/assets", tags=["assets"], route_class=LeanRoute)


# The share of the sweeper's intent age a one-shot upload's body may take to arrive: the rest
# is for blob's commit and metadata's (and the sweeper's own minute).
UPLOAD_TIME_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class Room:
    """What the organization's quota left for an upload's file when it was admitted."""

    bytes: int
    quota_bytes: int
    used_bytes: int

    def exceeded(self, size: int) -> CofferError:
        return quota_exceeded(size=size, used_bytes=self.used_bytes, quota_bytes=self.quota_bytes)


class _CappedBody:
    """The request body as it arrives, stopped once it cannot hold a file within the limit.

    Why it stopped is kept here: the HTTP client that forwards the body to blob reports a
    failing body as a transport error of its own, whatever the cause.

    Each chunk handed on must be taken within ``write_timeout`` seconds: the HTTP client asks
    for the next chunk only once the last one is written, so the time spent at ``yield`` is
    the time blob takes to read it. ``deadline`` (the relay's ``asyncio.timeout``) is armed
    for that time only, never while waiting for the client; waiting for the client is bounded
    by ``idle_timeout`` (``client_idle``: a client that sends nothing holds no reservation
    until the sweeper's hour). The whole body must arrive within ``time_limit`` (``too_slow``):
    the upload's intent is the sweeper's once it is older than its age, and an upload still
    streaming then (100 MiB at 28 KiB/s) was swept under it, its bytes deleted.

    ``room``, what the organization's quota left when the upload was admitted (``IntentOut``),
    when it is less than the file limit, is the limit instead, answered 413 ``quota_exceeded``:
    a body without a Content-Length at a full quota streamed 100 MiB before the commit refused
    it.
    """

    def __init__(
        self,
        request: Request,
        write_timeout: float,
        idle_timeout: float,
        max_file_bytes: int = MAX_FILE_BYTES,
        time_limit: float = float("inf"),
        room: Room | None = None,
    ) -> None:
        self.request = request
        self.write_timeout = write_timeout
        self.idle_timeout = idle_timeout
        self.time_limit = time_limit
        self.deadline: asyncio.Timeout | None = None
        self.max_file_bytes = max_file_bytes
        self.room = room if room is not None and room.bytes < max_file_bytes else None
        self.max_body_bytes = (self.room.bytes if self.room else max_file_bytes) + MULTIPART_OVERHEAD
        self.seen = 0
        self.too_large = False
        self.client_gone = False
        self.client_idle = False
        self.too_slow = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        ends = loop.time() + self.time_limit
        try:
            async for chunk in arriving(self.request, self.idle_timeout):
                self.seen += len(chunk)
                if self.seen > self.max_body_bytes:
                    self.too_large = True
                    raise self._too_large()
                if loop.time() > ends:
                    self.too_slow = True
                    raise request_timeout(self.time_limit, whole=True)
                if chunk:
                    self._arm(loop.time() + self.write_timeout)
                    yield chunk
                    self._arm(None)
        except ClientDisconnect:
            self.client_gone = True
            raise
        except TimeoutError:
            self.client_idle = True
            raise request_timeout(self.idle_timeout) from None
        finally:
            self._arm(None)

    def _too_large(self) -> CofferError:
        if self.room is None:
            return file_too_large(self.max_file_bytes)
        # (the file holds at least what arrived beyond the most its framing can take)
        return self.room.exceeded(self.seen - MULTIPART_OVERHEAD)

    def why_stopped(self) -> CofferError | None:
        """The client's part in a relay that failed, as the error to answer; None: blob's."""
        if self.too_large:
            return self._too_large()
        if self.client_gone:
            return invalid("The client went away before the upload finished.")
        if self.client_idle:
            return request_timeout(self.idle_timeout)
        if self.too_slow:
            return request_timeout(self.time_limit, whole=True)
        return None

    def _arm(self, when: float | None) -> None:
        if self.deadline is not None and not self.deadline.expired():
            self.deadline.reschedule(when)


async def arriving(request: Request, idle_timeout: float) -> AsyncIterator[bytes]:
    """The request's body as it arrives; TimeoutError when the client sends nothing for
    ``idle_timeout`` seconds."""
    chunks = request.stream().__aiter__()
    while True:
        try:
            async with asyncio.timeout(idle_timeout):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        yield chunk


def _require_multipart(request: Request) -> str:
    content_type = request.headers.get("content-type", "")
    if (
        content_type.split(";", 1)[0].strip().lower() != "multipart/form-data"
        or "boundary=" not in content_type
    ):
        raise unsupported_media_type("Upload the file as multipart/form-data with a 'file' part.")
    # Read as blob reads it, and refused before anything is reserved: one past the bound of
    # python-multipart (256) was blob's 500.
    boundary = parse_options_header(content_type)[1].get(b"boundary", b"").rstrip()
    if not 1 <= len(boundary) <= MAX_BOUNDARY_CHARS:
        raise invalid(
            f"The multipart boundary is not 1 to {MAX_BOUNDARY_CHARS} characters (RFC 2046).",
            field="content-type",
        )
    return content_type


def _file_size_bounds(
    request: Request, content_type: str, max_file_bytes: int = MAX_FILE_BYTES
) -> tuple[int, int]:
    """(least, most) bytes the upload's file can have, from its Content-Length: the quota holds
    the most while the bytes stream, and refuses at once if even the least would not fit.

    The file part is at most the body less the multipart stream's opening and closing
    delimiters (``--B\r\n``, ``\r\n--B--``), capped by the upload's bound, and at least the
    body less the framing and form fields a body may carry beside it (``MULTIPART_OVERHEAD``).
    A body without a Content-Length (chunked) may carry anything up to the bound. A
    Content-Length far above the bound is refused here, before anything else."""
    declared = request.headers.get("content-length")
    if declared is None:
        return 0, max_file_bytes
    try:
        length = int(declared)
    except ValueError:
        raise invalid("Content-Length is not a number.") from None
    if length > max_file_bytes + MULTIPART_OVERHEAD:
        raise file_too_large(max_file_bytes)
    boundary = content_type.partition("boundary=")[2].split(";", 1)[0].strip().strip('"')
    most = max(0, min(length - 2 * len(boundary) - 10, max_file_bytes))
    return min(max(0, length - MULTIPART_OVERHEAD), most), most


@dataclass(frozen=True, slots=True)
class UploadScope:
    """Where an upload goes and what it may be: a key's upload is bounded by the contract's
    limits alone; an upload token's (routers/uploads.py) also by the token's scope."""

    organization_id: str
    quota_bytes: int
    max_bytes: int = MAX_FILE_BYTES
    # Media ranges the stored file's mimeType must match (``image/*``); None = any.
    content_types: tuple[str, ...] | None = None
    # A fixed name and folder; the form's own fields are used only when these are not fixed.
    name: str | None = None
    folder_id: str | None = None
    fixed_folder: bool = False
    # Called with the asset id before anything is reserved (a token's single use); ``release``
    # when the upload definitely failed (refused, cut short, its commit refused).
    claim: Callable[[str], Awaitable[None]] | None = None
    release: Callable[[str], Awaitable[None]] | None = None
    # CONTRACT §12: what the asset becomes unless the form's ``visibility`` field says; with
    # ``fixed_visibility`` (an upload token's) whatever the form says. (Resumable uploads,
    # routers/tus.py, take theirs from Upload-Metadata.)
    visibility: Visibility = "public"
    fixed_visibility: bool = False
    # The organization's ingest rules (issue 48): under ``enforce`` blob matches the detected
    # type against its allowed list and the token's contentTypes before storing a byte.
    ingest: Ingest = field(default_factory=Ingest)
    # Issue 50: an upload token's metadata and tags, fixed (the form's are then ignored), or
    # forbidden (a form carrying either is 400).
    metadata: dict[str, Any] | None = None
    tags: list[str] | None = None
    fixed_description: bool = False
    forbid_description: bool = False
    # Issue 47: an upload token's ``expiresAt`` for the asset (ISO 8601), fixed: the form's is ignored.
    expires_at: str | None = None

    def allow(self) -> list[str]:
        return self.ingest.allow_lists(self.content_types)


def token_asset_scope(asset: TokenAsset | None) -> dict[str, Any]:
    """``UploadScope``'s fields for what an upload token fixes about its asset."""
    if asset is None:
        return {}
    return {
        "metadata": asset.metadata if asset.fixes_description else None,
        "tags": asset.tags if asset.fixes_description else None,
        "fixed_description": asset.fixes_description,
        "forbid_description": asset.forbid_description,
        "expires_at": asset.expires_at,
    }


def media_type_allowed(mime_type: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``mime_type`` matches one of the media ranges (``*``, ``image/*``, ``text/plain``)."""
    return any(fnmatch.fnmatchcase(mime_type, pattern) for pattern in allowed)


@lean_router.post(
    "",
    status_code=201,
    response_model=AssetOut,
    responses=errors(404, 408, 413, 415),
    openapi_extra=needs("assets:write", **UPLOAD_BODY, **KEYED),
)
async def upload_asset(request: Request) -> Response:
    """Upload a file (multipart/form-data: `file`, optional `name` and `folderId`)."""
    principal = await principal_of(request)
    state = edge_state(request)
    scope = UploadScope(
        organization_id=principal.organization_id,
        quota_bytes=principal.quota_bytes,
        visibility=principal.default_visibility,
        ingest=principal.ingest,
    )
    return await upload_response(request, scope, state.metadata, state.blob, request_id_of(request) or "")


async def upload_response(
    request: Request, scope: UploadScope, metadata: MetadataClient, blob: BlobClient, rid: str
) -> Response:
    """An upload, answered with metadata's body as it is: it is the public body byte for byte,
    so decoding, validating and encoding it again would only cost CPU (the response model
    stays in the decorator for the OpenAPI document)."""
    body = await counted_upload_body(request, scope, metadata, blob, rid)
    return Response(body, status_code=201, media_type="application/json")


async def counted_upload(
    request: Request, scope: UploadScope, metadata: MetadataClient, blob: BlobClient, rid: str
) -> AssetOut:
    """An upload, counted in the upload metrics by outcome: the asset stored."""
    return AssetOut.model_validate_json(await counted_upload_body(request, scope, metadata, blob, rid))


async def counted_upload_body(
    request: Request, scope: UploadScope, metadata: MetadataClient, blob: BlobClient, rid: str
) -> bytes:
    """An upload, counted in the upload metrics by outcome: the asset as the public body."""
    started = time.perf_counter()
    outcome = "failed"
    try:
        body, size, image = await _upload(request, scope, metadata, blob, rid)
    except CofferError as exc:
        # quota_exceeded and file_too_large are worth telling apart; other refusals are not.
        outcome = exc.code if exc.status == 413 else "rejected" if exc.status < 500 else "failed"
        raise
    else:
        outcome = "created"
        UPLOAD_BYTES.inc(size)
        if scope.ingest.scan != "off" and (relay := edge_state(request).scans) is not None:
            relay.wake()  # its scan was queued with it (issue 48)
        if image and (facts := edge_state(request).facts) is not None:
            facts.wake()  # an image's facts were queued with it (issue 50)
        return body
    finally:
        UPLOADS.labels(outcome).inc()
        UPLOAD_DURATION.labels(outcome).observe(time.perf_counter() - started)


def _outside_scope(stored: Stored, scope: UploadScope) -> CofferError | None:
    """Why the stored file is not one this upload may keep (a token's size or media types)."""
    if stored.size > scope.max_bytes:
        return file_too_large(scope.max_bytes)
    if scope.content_types is not None and not media_type_allowed(stored.mime_type, scope.content_types):
        return unsupported_media_type(
            f"This upload accepts {', '.join(scope.content_types)}, not {stored.mime_type}."
        )
    return None


def _kept(stored: Stored, scope: UploadScope) -> tuple[dict[str, Any] | None, list[str] | None]:
    """The stored file's metadata and tags, if the upload may keep it (``_outside_scope``, and
    a good ``expiresAt``)."""
    refusal = _outside_scope(stored, scope) or (_expiry_problem(stored) if scope.expires_at is None else None)
    if refusal is not None:
        raise refusal
    return _description(stored, scope)


def _description(stored: Stored, scope: UploadScope) -> tuple[dict[str, Any] | None, list[str] | None]:
    """The asset's metadata and tags (issue 50): the form's fields, or the token's fixed ones;
    400 naming the field for a bad one, or for any under a token that forbids them."""
    if scope.forbid_description:
        for name in ("metadata", "tags"):
            if getattr(stored.fields, name):
                raise invalid(f"This upload token does not allow '{name}'.", field=name)
    if scope.fixed_description or scope.forbid_description:
        return scope.metadata, scope.tags
    return describe.parse_metadata_field(stored.fields.metadata), describe.parse_tags_field(
        stored.fields.tags
    )


async def _relay(
    body: _CappedBody, blob: BlobClient, scope: UploadScope, asset_id: str, content_type: str, rid: str
) -> Any:
    """Stream the body to blob; 503 if blob stops taking it (``_CappedBody``'s write timeout)."""
    # A body with a Content-Length is exactly that long (the server reads no more, and one
    # that ends short is a disconnect): blob gets the same length, and no chunked framing.
    declared = body.request.headers.get("content-length")
    length = int(declared) if declared is not None and declared.isascii() and declared.isdigit() else None
    try:
        async with asyncio.timeout(None) as deadline:
            body.deadline = deadline
            try:
                return await blob.upload(
                    scope.organization_id,
                    asset_id,
                    body.__aiter__(),
                    content_type,
                    request_id=rid,
                    visibility=scope.visibility,
                    fixed=scope.fixed_visibility,
                    content_length=length,
                    allow=scope.allow(),
                    held=scope.ingest.scan == "block",
                )
            finally:
                body.deadline = None  # the body may be finalised after the timeout is left
    except TimeoutError:
        raise unavailable("The blob service stopped reading the upload.") from None


def _expiry_problem(stored: Stored) -> CofferError | None:
    """Issue 47: a bad ``expiresAt`` form field (an empty one is as if absent)."""
    if not stored.fields.expires_at:
        return None
    try:
        expiry.parse_expires_at(stored.fields.expires_at)
    except CofferError as exc:
        return exc
    return None


def _expires_at(stored: Stored, scope: UploadScope) -> datetime | None:
    """The asset's ``expiresAt``: an upload token's (checked at minting), else the form's."""
    if scope.expires_at is not None:
        return expiry.parse_instant(scope.expires_at)
    return expiry.parse_expires_at(stored.fields.expires_at) if stored.fields.expires_at else None


async def _reserve(
    scope: UploadScope, metadata: MetadataClient, asset_id: str, size: tuple[int, int], rid: str
) -> Room | None:
    """A token's single use, then the upload's intent and its share of the quota: the room the
    quota left for the file (None: a metadata from before it told).

    The token is taken before the upload holds anything: a second upload with it is refused
    before it reserves any of the quota or takes one of the slots (one token held 11 uploads
    open, reserving 1.1 GB of a 1 GiB quota, when it was taken at the commit)."""
    if scope.claim is not None:
        await scope.claim(asset_id)
    try:
        org = scope.organization_id
        intent = await metadata.register_intent(
            org, asset_id, size=size, quota_bytes=scope.quota_bytes, request_id=rid
        )
    except CofferError:
        if scope.release is not None:
            await scope.release(asset_id)
        raise
    if intent.room_bytes is None or intent.used_bytes is None:
        return None
    return Room(intent.room_bytes, scope.quota_bytes, intent.used_bytes)


async def _upload(
    request: Request, scope: UploadScope, metadata: MetadataClient, blob: BlobClient, rid: str
) -> tuple[bytes, int, bool]:
    """The upload protocol (docs/architecture.md): intent, stream to blob, commit in metadata, or
    clean up. Answers the asset as the public body, its size, and whether its image facts were
    queued with it."""
    content_type = _require_multipart(request)
    size = _file_size_bounds(request, content_type, scope.max_bytes)
    org = scope.organization_id
    asset_id = new_id(ASSET)
    room = await _reserve(scope, metadata, asset_id, size, rid)

    async def discard() -> None:
        """Delete what blob may hold, then the intent; when blob cannot, end the intent's hold
        on the quota and the places in flight at once (a blob outage held them for the
        sweeper's hour), and leave its bytes to the sweeper. Give the token back."""
        try:
            try:
                await blob.delete_prefix(org, asset_id, request_id=rid)
            except CofferError:
                await metadata.release_intent(org, asset_id, request_id=rid)
                raise
            await metadata.abandon_intent(org, asset_id, request_id=rid)
        except CofferError:
            log.warning("cleanup deferred to the sweeper", extra={"asset_id": asset_id, "request_id": rid})
        if scope.release is not None:
            await scope.release(asset_id)

    settings = edge_state(request).settings
    tuning = settings.edge_tuning
    body = _CappedBody(
        request,
        tuning.blob_write_timeout_seconds,
        tuning.client_idle_timeout_seconds,
        scope.max_bytes,
        # Ended well before the sweeper may take its intent (and delete its bytes).
        time_limit=settings.sweep_intent_age_seconds * UPLOAD_TIME_SHARE,
        room=room,
    )
    try:
        # blob stores the object with its visibility, before metadata has a row: a private
        # asset is never public at the CDN, even for a moment.
        stored = await _relay(body, blob, scope, asset_id, content_type, rid)
    except (CofferError, ClientDisconnect):
        await discard()
        if (why := body.why_stopped()) is not None:
            raise why from None
        raise

    try:
        own_metadata, own_tags = _kept(stored, scope)
    except CofferError:
        await discard()
        raise
    asset = UploadCommit(
        id=asset_id,
        key=stored.key,
        # An empty name field (as an HTML form sends it) means "use the file name".
        name=scope.name or stored.fields.name or None,
        filename=stored.filename,
        folder_id=scope.folder_id if scope.fixed_folder else stored.fields.folder_id or None,
        mime_type=stored.mime_type,
        size=stored.size,
        sha256=stored.sha256,
        quota_bytes=scope.quota_bytes,
        visibility=stored.visibility,
        detected_type=stored.detected_type,
        scan_status=scope.ingest.first_scan_status(),
        expires_at=_expires_at(stored, scope),
        metadata=own_metadata,
        tags=own_tags,
    )
    try:
        answer = await metadata.commit_upload(org, asset, request_id=rid)
        return answer, stored.size, describe.facts_due(stored.mime_type, stored.detected_type)
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
@router.get(
    "",
    response_model=AssetList,
    responses=errors(404),
    openapi_extra=needs("assets:read", parameters=[META_FILTER_PARAMETER]),
)
async def list_assets(
    request: Request,
    principal: PrincipalDep,
    metadata: MetadataDep,
    rid: RequestIdDep,
    limit: Annotated[PageLimit, Query(description="Page size, 1–100.")] = PAGE_LIMIT_DEFAULT,
    offset: Annotated[PageOffset, Query(description="Assets to skip.")] = PAGE_OFFSET_DEFAULT,
    folder_id: Annotated[
        str | None,
        Query(
            alias="folderId", description="Omitted: all assets; empty: root level only; an id: that folder."
        ),
    ] = None,
    q: Annotated[
        str | SkipJsonSchema[None],
        Query(min_length=1, max_length=255, description="Only names containing this, in any case."),
    ] = None,
    sort: Annotated[
        AssetSort, Query(description="Order; ties by id in the same direction. Default `-createdAt`.")
    ] = "-createdAt",
    visibility: Annotated[
        Visibility | None, Query(description="Only `public` or only `private` assets; omitted: both.")
    ] = None,
    cursor: Annotated[
        str | SkipJsonSchema[None],
        Query(
            max_length=CURSOR_MAX_CHARS,
            description="A previous page's `nextCursor`: the page after it, with the same filters and sort.",
        ),
    ] = None,
    total: Annotated[
        TrueOrFalse | SkipJsonSchema[None],
        Query(
            description="Count every match into `total`: default true without `cursor` (the contract's "
            "`total`), false with one. `total=false` without a cursor reads the first page by cursor."
        ),
    ] = None,
    expires_before: Annotated[
        str | SkipJsonSchema[None],
        Query(
            alias="expiresBefore",
            max_length=40,
            description="Issue 47: only assets whose `expiresAt` is before this ISO 8601 time.",
        ),
    ] = None,
    tag: Annotated[
        # (the bound on the list, so that the schema says maxItems, not maxLength)
        Annotated[list[str], Field(max_length=MAX_TAG_FILTERS)] | SkipJsonSchema[None],
        Query(description="Only assets with this tag (repeat for several)."),
    ] = None,
    tag_match: Annotated[
        Literal["all", "any"],
        Query(alias="tagMatch", description="`all` (default): every `tag`; `any`: at least one."),
    ] = "all",
    media_type: Annotated[
        str | SkipJsonSchema[None],
        Query(
            alias="mediaType", max_length=255, description="`mimeType` equal to this, or a range `image/*`."
        ),
    ] = None,
    min_size: Annotated[
        ByteCount | SkipJsonSchema[None], Query(alias="minSize", description="Bytes, inclusive.")
    ] = None,
    max_size: Annotated[
        ByteCount | SkipJsonSchema[None], Query(alias="maxSize", description="Bytes, inclusive.")
    ] = None,
    created_after: Annotated[
        str | SkipJsonSchema[None],
        Query(alias="createdAfter", max_length=64, description="ISO 8601: `createdAt` at or after."),
    ] = None,
    created_before: Annotated[
        str | SkipJsonSchema[None],
        Query(alias="createdBefore", max_length=64, description="ISO 8601: `createdAt` before."),
    ] = None,
    recursive: Annotated[
        TrueOrFalse,
        Query(
            description="`true`: the folder's whole subtree (or the whole organization), each item "
            "with `folderPath`."
        ),
    ] = "false",
) -> Response:
    """List assets (newest first by default), with the total that match; search by name; filter
    by tags, metadata, media type, size and creation time; list a whole subtree; page by
    `offset` or by `cursor` (`nextCursor`)."""
    params: dict[str, Any] = {"limit": limit, "offset": offset, "sort": sort}
    if cursor is not None:
        params["cursor"] = cursor
    if total is not None:
        params["total"] = total
    params.update(
        describe_filters(
            request,
            tag=tag,
            tag_match=tag_match,
            media_type=media_type,
            min_size=min_size,
            max_size=max_size,
            created_after=created_after,
            created_before=created_before,
            recursive=recursive == "true",
            expires_before=expires_before,
        )
    )
    if visibility is not None:
        params["visibility"] = visibility
    if folder_id is not None:
        params["folderId"] = folder_id
    if q is not None:
        params["q"] = q
    page = await metadata.list_assets(principal.organization_id, params, request_id=rid)
    return Response(page, media_type="application/json")


def describe_filters(
    request: Request,
    *,
    tag: list[str] | None,
    tag_match: str,
    media_type: str | None,
    min_size: int | None,
    max_size: int | None,
    created_after: str | None,
    created_before: str | None,
    recursive: bool,
    expires_before: str | None,
) -> dict[str, Any]:
    """The listing's issue-50 filters as metadata takes them (it checks them: one authority for
    their bounds); ``meta[KEY]`` parameters are read from the query as sent."""
    params: dict[str, Any] = {}
    if tag:
        params["tag"] = tag
        params["tagMatch"] = tag_match
    for name, value in (
        ("mediaType", media_type),
        ("minSize", min_size),
        ("maxSize", max_size),
        ("createdAfter", created_after),
        ("createdBefore", created_before),
        ("expiresBefore", expires_before),
    ):
        if value is not None:
            params[name] = value
    if recursive:
        params["recursive"] = "true"
    metas = [(k, v) for k, v in request.query_params.multi_items() if k.startswith("meta[")]
    if len(metas) > MAX_META_FILTERS:
        raise invalid(f"At most {MAX_META_FILTERS} meta[KEY] parameters.", field="meta")
    for key, value in metas:  # each one a condition: a key sent twice is two (metadata ANDs them)
        params.setdefault(key, []).append(value)
    return params


@lean_router.get(
    "/{asset_id}", response_model=AssetOut, responses=errors(404), openapi_extra=needs("assets:read", **KEYED)
)
async def get_asset(request: Request, asset_id: str) -> Response:
    """One asset."""
    principal = await principal_of(request)
    metadata = edge_state(request).metadata
    asset = await metadata.get_asset_body(
        principal.organization_id, asset_id, request_id=request_id_of(request) or ""
    )
    return Response(asset, media_type="application/json")


@json_router.patch(
    "/{asset_id}", response_model=AssetOut, responses=errors(404, 415), openapi_extra=needs("assets:write")
)
async def update_asset(
    asset_id: str,
    body: AssetUpdate,
    principal: PrincipalDep,
    metadata: MetadataDep,
    blob: BlobDep,
    rid: RequestIdDep,
) -> Response:
    """Rename, move and/or change the visibility of an asset; its key and signed URLs do not
    change (a private asset's publicUrl is null). Setting ``expiresAt`` deletes the asset in
    time, so it takes the ``assets:delete`` scope too (clearing it does not)."""
    changes = body.changes()
    if not changes:
        raise invalid(
            "Send 'name', 'folderId', 'visibility', 'expiresAt', 'metadata' or 'tags'.", field="body"
        )
    if changes.get("expiresAt") is not None and "assets:delete" not in principal.actions:
        raise insufficient_scope(
            "assets:delete",
            scopes.ordered(principal.actions),
            "Setting an asset's expiry deletes it in time: this key lacks the assets:delete scope.",
        )
    asset = await update_stored_asset(principal.organization_id, asset_id, changes, metadata, blob, rid)
    return Response(asset, media_type="application/json")


async def update_stored_asset(
    org_id: str, asset_id: str, changes: dict[str, Any], metadata: MetadataClient, blob: BlobClient, rid: str
) -> bytes:
    """Rename, move and/or change the visibility (CONTRACT §12), as the public body.

    The store and metadata change in the order that never leaves a private asset public,
    whatever fails or crashes in between: to private, the store first (the CDN refuses the
    key at once), then metadata; to public, metadata first, then the store. A failure in
    between leaves the asset less reachable than metadata says, never more, and sending the
    same change again finishes it. Then the store is settled against metadata
    (``settle_visibility``), for changes of one asset made at once.
    """
    visibility = changes.get("visibility")
    if visibility is None:
        return await metadata.update_asset(org_id, asset_id, changes, request_id=rid)
    if visibility == "private":
        before = await metadata.get_asset(org_id, asset_id, request_id=rid)  # 404 / 403 first
        await blob.set_visibility(before.key, "private", request_id=rid)
        try:
            body = await metadata.update_asset(org_id, asset_id, changes, request_id=rid)
        except CofferError as exc:
            if 400 <= exc.status < 500 and before.visibility == "public":
                # Definitely refused (a bad name, a missing folder): as metadata has it.
                with contextlib.suppress(CofferError):
                    await settle_visibility(
                        org_id, asset_id, before.key, metadata, blob, rid, written="private"
                    )
            raise
        await settle_visibility(org_id, asset_id, before.key, metadata, blob, rid, written=None)
        return body
    body = await metadata.update_asset(org_id, asset_id, changes, request_id=rid)
    key = AssetOut.model_validate_json(body).key
    await blob.set_visibility(key, "public", request_id=rid)
    await settle_visibility(org_id, asset_id, key, metadata, blob, rid, written="public")
    return body


async def settle_visibility(
    org_id: str,
    asset_id: str,
    key: str,
    metadata: MetadataClient,
    blob: BlobClient,
    rid: str,
    *,
    written: str | None,
) -> None:
    """Settle the store's visibility against metadata (``trash.settle``): two changes of one
    asset at once could reach the store in the other order than metadata, and a "public"
    written last left a private asset served. An asset trashed or deleted meanwhile is left to
    the trash's hold or the delete."""

    async def visibility() -> str | None:
        try:
            return (await metadata.get_asset(org_id, asset_id, request_id=rid)).visibility
        except CofferError as exc:
            if 400 <= exc.status < 500:
                return None
            raise

    async def store(value: str) -> None:
        await blob.set_visibility(key, value, request_id=rid)

    await trash.settle(visibility, store, written)


@router.delete(
    "/{asset_id}", response_model=Success, responses=errors(404), openapi_extra=needs("assets:delete")
)
async def delete_asset(
    asset_id: str,
    principal: PrincipalDep,
    metadata: MetadataDep,
    blob: BlobDep,
    rid: RequestIdDep,
    permanent: Annotated[
        TrueOrFalse,
        Query(
            description="Issue 47: delete at once even when the organization keeps a trash "
            "(organization keys and owners' keys only)."
        ),
    ] = "false",
) -> Any:
    """Delete an asset's metadata and bytes; its URLs answer 404 afterwards. With a trash
    retention (issue 47), the asset goes to the trash instead, unless `permanent=true`."""
    if permanent == "true":
        trash.require_admin(principal, "delete permanently")
    await remove_asset(principal, asset_id, metadata, blob, rid, permanent=permanent == "true")
    return {"success": True}


async def remove_asset(
    principal: Principal,
    asset_id: str,
    metadata: MetadataClient,
    blob: BlobClient,
    rid: str,
    *,
    permanent: bool = False,
) -> None:
    """A delete as the organization keeps them: to the trash with a retention, else final."""
    org = principal.organization_id
    if principal.trash_retention_days > 0 and not permanent:
        await trash.trash_asset(
            org,
            asset_id,
            retention_days=principal.trash_retention_days,
            limit_bytes=principal.quota_bytes,
            metadata=metadata,
            blob=blob,
            rid=rid,
        )
        return
    await delete_stored_asset(org, asset_id, metadata, blob, rid)


async def delete_stored_asset(
    org_id: str, asset_id: str, metadata: MetadataClient, blob: BlobClient, rid: str
) -> None:
    """The delete protocol: tombstone in metadata, delete the bytes, drop the tombstone."""
    key = await metadata.hide_asset(org_id, asset_id, request_id=rid)
    # If this fails the tombstone stays: a retried DELETE, or the sweeper, finishes the job.
    await blob.delete_object(key, request_id=rid)
    await metadata.finish_delete(asset_id, request_id=rid)


def refuse_unscanned(asset: AssetOut, scan_mode: str) -> None:
    """Issue 48: no signed URL for a quarantined (infected) file, nor, under ``block``, for one
    whose scan has not passed (409 ``not_scanned``); the CDN holds their bytes back anyway."""
    if asset.scanStatus == "infected":
        raise CofferError(
            409,
            "quarantined",
            f"Asset {asset.id} is quarantined: the malware scan found {asset.scanSignature}.",
            details={"scanStatus": asset.scanStatus, "signature": asset.scanSignature},
        )
    if scan_mode == "block" and asset.scanStatus in ("pending", "unscanned"):
        raise CofferError(
            409,
            "not_scanned",
            f"Asset {asset.id} has not passed its malware scan ({asset.scanStatus}).",
            details={"scanStatus": asset.scanStatus},
        )


@router.get(
    "/{asset_id}/url", response_model=SignedUrl, responses=errors(404, 409), openapi_extra=needs("urls:sign")
)
async def get_signed_url(
    asset_id: str,
    principal: PrincipalDep,
    metadata: MetadataDep,
    blob: BlobDep,
    rid: RequestIdDep,
    expires_in: Annotated[
        ExpiresIn,
        Query(alias="expiresIn", description="Validity in seconds, 1–604800; never past the key's expiry."),
    ] = EXPIRES_IN_DEFAULT,
    preset: Annotated[
        str | SkipJsonSchema[None],
        Query(
            max_length=64,
            description="An image transform preset (built in: thumb, small, medium, large; or the "
            "organization's own). Not with the free parameters.",
        ),
    ] = None,
    w: Annotated[
        str | SkipJsonSchema[None],
        Query(description="Transform: width in pixels.", json_schema_extra=SIDE_SCHEMA),
    ] = None,
    h: Annotated[
        str | SkipJsonSchema[None],
        Query(description="Transform: height in pixels.", json_schema_extra=SIDE_SCHEMA),
    ] = None,
    fit: Annotated[
        str | SkipJsonSchema[None],
        Query(description="Transform: `cover` (default), `contain`, `inside`.", json_schema_extra=FIT_SCHEMA),
    ] = None,
    fmt: Annotated[
        str | SkipJsonSchema[None],
        Query(
            description="Transform: output format; `auto` follows the request's Accept.",
            json_schema_extra=FORMAT_SCHEMA,
        ),
    ] = None,
    q: Annotated[
        str | SkipJsonSchema[None],
        Query(description="Transform: quality, default 80.", json_schema_extra=QUALITY_SCHEMA),
    ] = None,
) -> Any:
    """A time-limited signed CDN URL for an asset, optionally of an image transform (CONTRACT §10).

    With ``preset`` or the free parameters (``w``, ``h``, ``fit``, ``fmt``, ``q``), the URL serves
    the transformed image and its signature covers the transform: changing it answers 403. A bad
    parameter or an unknown preset → 400 ``invalid_transform``. The URL dies with the key that
    made it: once that key is deleted (or, for a personal key, its member leaves the
    organization), the CDN refuses it within 5 seconds.
    """
    given = (("w", w), ("h", h), ("fit", fit), ("fmt", fmt), ("q", q))
    free = {name: value for name, value in given if value is not None}
    transform: TransformFields | None = None
    if preset is not None and free:
        raise transforms.invalid_transform_both()
    if free:
        parsed = transforms.parse_free(free)
        transform = TransformFields(**parsed.fields())
    asset = await metadata.get_asset(principal.organization_id, asset_id, request_id=rid)
    refuse_unscanned(asset, principal.ingest.scan)
    if preset is not None and preset not in transforms.BUILTIN_PRESETS:
        own = await blob.transform_presets(principal.organization_id, request_id=rid)
        if preset not in own.presets:
            raise invalid_transform(f"Unknown preset {preset!r}.", field="preset")
    if principal.key_expires_at is not None:
        # A bearer link lives no longer than the key that made it (blob rounds up by < 1 s).
        expires_in = max(1, min(expires_in, math.floor(principal.key_expires_at - time.time())))
    url = await blob.sign(
        asset.key,
        expires_in,
        request_id=rid,
        preset=preset,
        transform=transform,
        by=f"key:{principal.key_id}",
    )
    return SignedUrl(
        url=url,
        expiresIn=expires_in,
        asset=SignedAsset(id=asset.id, name=asset.name, mimeType=asset.mimeType, size=asset.size),
    )
