"""Resumable uploads: tus 1.0.0 (CONTRACT §9) at ``/api/uploads/tus``.

Creation, upload (``PATCH``), ``HEAD``, termination, expiration and checksums (sha1, sha256),
so every tus client works unchanged. Edge keeps nothing of an upload: metadata holds its state
(``coffer_metadata.tus``), blob its bytes and the SHA-256 so far (``coffer_blob.tus``), so any
edge and any blob can take the next request.

A ``PATCH``: take the upload's lease in metadata at the client's offset (409 if it is not the
upload's, 423 while another request writes), stream the body to blob, which makes it durable
and answers the new offset, then move the offset in metadata (or, on the last byte, create the
asset there). The lease is renewed while the bytes stream. A client that goes away mid-chunk
keeps what arrived (unless the chunk had a checksum, which then cannot match): the next
``HEAD`` answers it, and the upload resumes from there.

Credentials: the API key headers on every request; or an upload token (``?token=cof_upl_…``,
§8) on the creation request only, which spends it and answers a ``Location`` carrying a
capability of its own (``?token=cof_tus_…``, whose SHA-256 metadata keeps) for the rest.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import re
import secrets
import string
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic.json_schema import SkipJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Scope

from coffer_edge import subtree
from coffer_edge.actor import act_as, subtree_root
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.deps import (
    EdgeState,
    MetadataDep,
    PrincipalDep,
    RequestIdDep,
    authenticate,
    edge_state,
    failures_counted,
    needs,
)
from coffer_edge.metrics import UPLOAD_BYTES, UPLOADS
from coffer_edge.routers.assets import arriving, media_type_allowed
from coffer_edge.routers.uploads import TOKEN_PREFIX, UPLOADS_PATH, token_hash
from coffer_edge.schemas import (
    ErrorEnvelope,
    OpenUploadList,
    PageLimit,
    PageOffset,
    Success,
    TrueOrFalse,
    errors,
)
from coffer_kit.contract import describe, expiry, keys, media
from coffer_kit.contract.errors import (
    CofferError,
    file_too_large,
    invalid,
    not_found,
    offset_mismatch,
    request_id_of,
    unauthorized,
    unsupported_media_type,
    unsupported_version,
)
from coffer_kit.contract.ids import ASSET, TUS_UPLOAD, TUS_UPLOAD_ID_PATTERN, new_id
from coffer_kit.contract.limits import (
    CURSOR_MAX_CHARS,
    MAX_FILE_BYTES,
    PAGE_LIMIT_DEFAULT,
    PAGE_OFFSET_DEFAULT,
    TUS_EXPIRY_SECONDS,
)
from coffer_kit.contract.names import normalize_name
from coffer_kit.contract.resources import Visibility
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_kit.contract.wire import (
    Ingest,
    MinterRef,
    TokenAsset,
    TusAdvance,
    TusAppended,
    TusComplete,
    TusCreate,
    TusUpload,
)

log = logging.getLogger("coffer.edge.tus")
T = TypeVar("T")
TUS_PATH = "/api/uploads/tus"
TUS_VERSION = "1.0.0"
EXTENSIONS = "creation,creation-with-upload,termination,expiration,checksum"
CHECKSUMS = ("sha1", "sha256")
OFFSET_STREAM = "application/offset+octet-stream"
CAPABILITY_PREFIX = "cof_tus_"
_BASE62 = string.digits + string.ascii_letters
# The lease a PATCH holds on its upload, renewed every third of it while the bytes stream: an
# edge that dies mid-chunk holds the upload this long at most.
LEASE_SECONDS = 30.0
# Upload-Metadata: its whole header, and each decoded value.
# (8,192 since issue 50: room for an asset's metadata and tags, base64.)
MAX_METADATA_CHARS = 8192

router = APIRouter(prefix=TUS_PATH, tags=["resumable uploads (tus)"])


# The key headers, or none: an upload token (creation) or the upload's capability (``?token=``).
_SECURITY: list[dict[str, list[str]]] = [{"ApiKey": []}, {"ApiKey": [], "OrganizationId": []}, {}]


# What the routes below enforce of each request header, said in the OpenAPI document too, so
# that a request valid by the document is never refused for a header (schemathesis checks it).
# Upload-Checksum: a base64 SHA-1 digest is 27 characters and one "=", a SHA-256 one 43 and "=".
_HEADER_RULES: dict[str, dict[str, Any]] = {
    "Tus-Resumable": {"required": True, "schema": {"type": "string", "enum": [TUS_VERSION]}},
    "Upload-Length": {
        "required": True,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_FILE_BYTES},
    },
    "Upload-Offset": {"required": True, "schema": {"type": "integer", "minimum": 0, "maximum": 10**12 - 1}},
    "Upload-Checksum": {
        "schema": {"type": "string", "pattern": "^(sha1 [A-Za-z0-9+/]{27}=|sha256 [A-Za-z0-9+/]{43}=)$"}
    },
    "Upload-Metadata": {"required": True, "schema": {"type": "string", "maxLength": MAX_METADATA_CHARS}},
}


def _documented(*, body: str | None = None, **headers: str) -> dict[str, Any]:
    """A tus route's credentials, request headers and (``body``: its description) chunk body,
    for the OpenAPI document."""
    parameters = [
        {"name": name, "in": "header", "schema": {"type": "string"}, "description": text}
        | _HEADER_RULES.get(name, {})
        for name, text in {"Tus-Resumable": "1.0.0, the only version this server speaks.", **headers}.items()
    ]
    documented: dict[str, Any] = {"parameters": parameters, "security": _SECURITY}
    if body is not None:
        chunk = {"schema": {"type": "string", "format": "binary"}}
        documented["requestBody"] = {"required": True, "description": body, "content": {OFFSET_STREAM: chunk}}
    return documented


# -- credentials -----------------------------------------------------------------------------


@dataclass(slots=True)
class Caller:
    """Who asks: an organization's key (``organization_id`` set), or the holder of an upload's
    capability (None: the upload's organization, once the upload is looked up)."""

    organization_id: str | None
    quota_bytes: int = 0
    default_visibility: Visibility = "public"
    capability: str | None = None


async def _caller(request: Request, token: str | None) -> Caller:
    """The API key headers, else a capability (``cof_tus_…``) for an upload's own requests."""
    headers = request.headers
    if token and token.startswith(CAPABILITY_PREFIX) and not headers.get("x-api-key"):
        return Caller(None, capability=token)
    if token and not headers.get("x-api-key"):
        raise unauthorized("This upload's URL takes the capability its creation answered (?token=cof_tus_…).")
    principal = await authenticate(request, headers.get("x-api-key"), headers.get("x-organization-id"))
    return Caller(principal.organization_id, principal.quota_bytes, principal.default_visibility)


async def _authorized(request: Request, caller: Caller, upload: TusUpload) -> None:
    """A capability must be this upload's (compared in constant time), and the key that minted
    its upload token must still act in the organization (``_minter_acts``); its holder then
    acts as that token, rate limited per upload."""
    if caller.capability is None:
        return
    if upload.capability_hash is None or not hmac.compare_digest(
        upload.capability_hash, token_hash(caller.capability)
    ):
        raise unauthorized("This capability is not the upload's.")
    request.state.organization_id = upload.organization_id
    caller.quota_bytes = await _minter_acts(request, upload)
    await edge_state(request).rate_limiter.check(upload.id)
    act_as(request, "token", upload.token_id or upload.id)


async def _minter_acts(request: Request, upload: TusUpload) -> int:
    """The organization's quota, if the key that minted the upload's token can still act in
    it (auth's answer, reused for 5 s at most, as a key's is). Otherwise the capability died
    with its authority: the upload is terminated now, its bytes and reservation released
    (edge's sweep does it for uploads nobody calls on again), and the caller gets 401."""
    state = edge_state(request)
    rid = request_id_of(request) or ""
    ref = MinterRef(
        organization_id=upload.organization_id,
        key_id=upload.minter_key_id,
        user_id=upload.minter_user_id,
        token_id=upload.token_id,
    )
    minter = await state.upload_tokens.minter(ref, request_id=rid)
    if minter.acting and (quota := minter.quota_bytes) is not None:
        # The upload stays in the subtree its key may reach now.
        await subtree.confine_token(
            state.metadata, upload.organization_id, minter.confined_to, minter.confined_within, request_id=rid
        )
        return quota
    kept: Kept | None = state.kept_uploads.pop(upload.id, None)  # for a chunk that will not come
    lock_token = await kept.given_up() if kept is not None else upload.lock_token
    with contextlib.suppress(CofferError):  # (a PATCH still running: the sweep ends it)
        await _terminate(
            upload.id,
            upload.organization_id,
            state.metadata,
            state.blob,
            rid,
            lock_token=lock_token,
        )
    raise unauthorized("The key that allowed this upload was deleted, or its user left the organization.")


def _known(upload_id: str) -> None:
    """An id that no upload can have is unknown: 404, as CONTRACT §3 says of any id in a path
    (tus clients take 404 for "start again")."""
    if len(upload_id) > 64 or re.fullmatch(TUS_UPLOAD_ID_PATTERN, upload_id) is None:
        raise not_found(f"Upload {upload_id[:64]!r} does not exist (or has expired).")


def new_capability() -> str:
    return CAPABILITY_PREFIX + "".join(secrets.choice(_BASE62) for _ in range(32))


# -- headers ---------------------------------------------------------------------------------


def _require_version(request: Request) -> None:
    if request.headers.get("tus-resumable") != TUS_VERSION:
        raise unsupported_version(TUS_VERSION)


def _offset(value: str | None) -> int:
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 12:
        raise invalid("Upload-Offset must be a non-negative integer.", field="Upload-Offset")
    return int(value)


def _length(request: Request) -> int:
    if request.headers.get("upload-defer-length") is not None:
        raise invalid("Upload-Defer-Length is not supported: send Upload-Length.", field="Upload-Length")
    value = request.headers.get("upload-length")
    if value is None:
        raise invalid("Upload-Length is required.", field="Upload-Length")
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise invalid("Upload-Length must be a non-negative integer.", field="Upload-Length")
    length = int(value)
    if length > MAX_FILE_BYTES:
        raise file_too_large(MAX_FILE_BYTES)
    return length


def _checksum(value: str | None) -> str | None:
    """``Upload-Checksum: <algorithm> <base64 digest>``, checked before any byte is read."""
    if value is None:
        return None
    algorithm, _, digest = value.strip().partition(" ")
    if algorithm not in CHECKSUMS:
        raise invalid("Upload-Checksum names sha1 or sha256.", field="Upload-Checksum")
    size = hashlib.new(algorithm).digest_size
    try:
        if len(base64.b64decode(digest, validate=True)) != size:
            raise ValueError
    except (ValueError, binascii.Error):
        problem = f"Upload-Checksum's {algorithm} digest is not {size} bytes of base64."
        raise invalid(problem, field="Upload-Checksum") from None
    return f"{algorithm} {digest}"


@dataclass(slots=True)
class Metadata:
    filename: str
    filetype: str | None
    folder_id: str | None
    visibility: Visibility | None
    raw: str
    # Issue 47: the client's asset expiry, checked with its metadata and tags where they count
    # (``_check_own``): what an upload token fixes replaces them unread, as the form's.
    expires_at: str | None = None


def _metadata(value: str | None) -> Metadata:
    """``Upload-Metadata`` (key and base64 value pairs, comma-separated): ``filename``
    (required, the name rules of §4), ``folderId``, ``filetype``, ``visibility``."""
    if value is None or not value.strip():
        raise invalid("Upload-Metadata must carry filename (base64).", field="Upload-Metadata")
    if len(value) > MAX_METADATA_CHARS:
        raise invalid(f"Upload-Metadata is over {MAX_METADATA_CHARS} characters.", field="Upload-Metadata")
    pairs: dict[str, str] = {}
    for item in value.split(","):
        key, _, encoded = item.strip().partition(" ")
        if not key or key in pairs:
            raise invalid("Upload-Metadata has an empty or repeated key.", field="Upload-Metadata")
        try:
            pairs[key] = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
        except (ValueError, binascii.Error, UnicodeDecodeError):
            problem = f"Upload-Metadata's {key!r} is not base64 of UTF-8 text."
            raise invalid(problem, field="Upload-Metadata") from None
    if "filename" not in pairs:
        raise invalid("Upload-Metadata must carry filename.", field="filename")
    filename = normalize_name(pairs["filename"], field="filename")
    visibility = pairs.get("visibility") or None
    if visibility not in (None, "public", "private"):
        raise invalid("visibility is 'public' or 'private'.", field="visibility")
    filetype = pairs.get("filetype") or None
    if filetype is not None and (len(filetype) > 255 or not filetype.isprintable()):
        raise invalid("filetype must be a media type.", field="filetype")
    folder_id, expires_at = pairs.get("folderId") or None, pairs.get(expiry.FIELD) or None
    return Metadata(filename, filetype, folder_id, visibility, value.strip(), expires_at)  # type: ignore[arg-type]


def _http_date(moment: datetime) -> str:
    return format_datetime(moment.astimezone(UTC), usegmt=True)


def _upload_headers(upload: TusUpload) -> dict[str, str]:
    headers = {
        "Upload-Offset": str(upload.offset),
        "Upload-Length": str(upload.length),
        "Upload-Expires": _http_date(upload.expires_at),
    }
    if upload.completed:
        headers["Coffer-Asset-Id"] = upload.asset_id
    return headers


# -- the body --------------------------------------------------------------------------------


class _Chunk:
    """A PATCH's body on its way to blob: at most ``room`` bytes (413 past it). A client that
    goes away, or sends nothing for ``idle_timeout`` seconds, ends it cleanly, so blob keeps
    what arrived."""

    def __init__(self, request: Request, room: int, idle_timeout: float) -> None:
        self.request, self.room, self.idle_timeout = request, room, idle_timeout
        self.received = 0
        self.too_large = self.client_gone = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for data in arriving(self.request, self.idle_timeout):
                self.received += len(data)
                if self.received > self.room:
                    self.too_large = True
                    raise file_too_large(self.room)
                if data:
                    yield data
        except (ClientDisconnect, TimeoutError):
            self.client_gone = True


# Lease affinity. Between two chunks of one client this edge keeps the upload's lease for
# KEEP_SECONDS and the upload as metadata would answer it, so the next chunk neither asks for
# the lease nor waits for the last one's record, which metadata writes while it streams (each
# record waits for the one before it: they stay in order; and a chunk that finds the last
# record failed is refused, sending the client back to HEAD with at most two 204s ahead of
# metadata's offset). Measured on tus 100 MiB in 5 MiB chunks
# (docs/performance.md).
# Another edge's request for the upload meanwhile waits for the kept lease to run out
# (KEEP_SECONDS at most; ``_lock``); a HEAD there may read one chunk behind for a few
# milliseconds (never ahead: the bytes are durable before the chunk is answered). This edge's
# HEAD waits for the record (``tus_records``), also while the next chunk streams.
KEEP_SECONDS = 2.0
# The edge uses a kept lease only in the first half of its time in metadata (which counts from
# the record's landing, later than this edge's count from its sending), and a chunk renews it
# a quarter in: no other edge can take it while this one writes.
_KEEP_USABLE = KEEP_SECONDS / 2
_FIRST_RENEWAL = KEEP_SECONDS / 4
_MAX_KEPT = 10_000
# How long another edge's chunk waits for a record on its way. A record is one write in
# metadata, milliseconds when all is well, but seconds behind a busy pooler or a disk slow to
# sync: a bound of 3 s (as the wait's bound was) answered a client 423 mid-upload on a loaded
# CI machine, for a chunk that would have been taken a moment later.
RECORD_BOUND_SECONDS = 10.0
# Its asks meanwhile: after 0.25 s, then twice as long each time, at most 1 s apart.
_FIRST_PAUSE, _MAX_PAUSE = 0.25, 1.0


@dataclass(slots=True)
class Kept:
    """An upload whose lease this edge keeps between two chunks."""

    upload: TusUpload  # as after the last chunk, with the lease's token
    until: float  # loop time after which it is not used (the lease may have run out)
    recorded: asyncio.Future[TusUpload]  # the last chunk's record in metadata

    @staticmethod
    def keep(state: EdgeState, upload: TusUpload, recorded: asyncio.Future[TusUpload]) -> None:
        kept: dict[str, Kept] = state.kept_uploads
        if len(kept) >= _MAX_KEPT:
            kept.pop(next(iter(kept)))  # the oldest
        until = asyncio.get_running_loop().time() + _KEEP_USABLE
        kept[upload.id] = Kept(upload, until, recorded)
        Kept.recording(state, upload.id, recorded)

    @staticmethod
    def recording(state: EdgeState, upload_id: str, recorded: asyncio.Future[TusUpload]) -> None:
        """The last chunk's record on its way (``_recorded`` waits for it), its lease not kept."""
        recorded.add_done_callback(_quiet)
        records: dict[str, asyncio.Future[TusUpload]] = state.tus_records
        records[upload_id] = recorded

        def forget(done: asyncio.Future[TusUpload]) -> None:
            if records.get(upload_id) is done:
                del records[upload_id]

        recorded.add_done_callback(forget)

    @staticmethod
    async def take(request: Request, caller: Caller, upload_id: str, offset: int | None) -> Kept | None:
        """The kept upload, its lease the caller's now (None: not kept, or no longer usable:
        ask metadata, where another request of this edge writing to it meanwhile makes 423);
        409 at another offset than ``offset`` (None: any, to end it); 401 for a capability
        that is not the upload's."""
        if subtree_root() is not None:
            return None  # a subtree key's chunk: metadata checks the upload is in its subtree
        kept: dict[str, Kept] = edge_state(request).kept_uploads
        entry = kept.get(upload_id)
        if entry is None or asyncio.get_running_loop().time() >= entry.until:
            kept.pop(upload_id, None)
            return None
        if caller.organization_id is not None and caller.organization_id != entry.upload.organization_id:
            return None  # (metadata answers 404)
        await _authorized(request, caller, entry.upload)
        if kept.get(upload_id) is not entry or subtree_root() is not None:
            return None  # another request took it meanwhile, or metadata checks the subtree
        if offset is not None and offset != entry.upload.offset:
            raise offset_mismatch(entry.upload.offset)
        del kept[upload_id]  # (kept again after this chunk)
        return entry

    async def given_up(self) -> str | None:
        """This edge's lease, given up to end the upload: its token, once the last chunk's record
        has landed (or failed)."""
        with contextlib.suppress(CofferError):
            await self.recorded
        return self.upload.lock_token


def _quiet(recorded: asyncio.Future[TusUpload]) -> None:
    """A record nobody waits for (the client sent no next chunk) fails quietly: its chunk's
    client goes back to HEAD, which tells what metadata has."""
    if not recorded.cancelled() and recorded.exception() is not None:
        log.info("a chunk's record failed", extra={"error": repr(recorded.exception())})


async def _past_kept_leases(call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` to metadata; when another edge only keeps the upload's lease between two of
    its writer's chunks (nobody writes), or is about to (it answered a chunk whose record is
    on its way), wait for the lease to run out rather than answer 423: for the record (at most
    RECORD_BOUND_SECONDS), then for at most KEEP_SECONDS."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECORD_BOUND_SECONDS + KEEP_SECONDS + 1
    pause = _FIRST_PAUSE
    while True:
        try:
            return await call()
        except CofferError as exc:
            details = (exc.details or {}) if exc.status == 423 else {}
            kept = details.get("keptFor")
            if isinstance(kept, int | float) and details.get("recording") is True:
                # A record on its way: ask again soon, then less often (metadata slow to write
                # it is metadata busy: not to be asked 40 times in 10 s).
                kept, pause = max(float(kept), pause), min(pause * 2, _MAX_PAUSE)
            if not isinstance(kept, int | float) or loop.time() + kept > deadline:
                if exc.status == 423:
                    exc.details = None  # (internal: the client gets tus's plain 423)
                raise
            await asyncio.sleep(float(kept) + 0.01)  # (a kept lease: once, when it runs out)


async def _lock(metadata: MetadataClient, upload_id: str, caller: Caller, offset: int, rid: str) -> TusUpload:
    """Take the upload's lease in metadata (see ``_past_kept_leases``); an idle upload asks for
    its reservation again within the caller's organization's quota."""
    return await _past_kept_leases(
        lambda: metadata.tus_lock(
            upload_id,
            caller.organization_id,
            offset,
            LEASE_SECONDS,
            quota_bytes=caller.quota_bytes,
            request_id=rid,
        )
    )


async def _renewing(
    metadata: MetadataClient,
    upload: TusUpload,
    rid: str,
    work: Callable[[], Awaitable[Any]],
    previous: asyncio.Future[TusUpload] | None = None,
) -> Any:
    """``work()`` while the lease is renewed: soon after the start, then every third of its
    length. The first renewal waits for the last chunk's record (``previous``): landing after
    it, the record made the renewed lease a kept one again, of KEEP_SECONDS, which another
    request then took while this chunk streamed, and both wrote the upload. A renewal refused
    (the lease lost all the same) stops the work: this request writes no more."""
    assert upload.lock_token is not None
    done = asyncio.Event()

    async def renew() -> None:
        wait = _FIRST_RENEWAL  # (a kept lease runs out KEEP_SECONDS after the last chunk)
        if previous is not None:
            with contextlib.suppress(CofferError):
                await asyncio.shield(previous)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), wait)
                return
            await metadata.tus_renew(upload.id, upload.lock_token or "", LEASE_SECONDS, request_id=rid)
            wait = LEASE_SECONDS / 3

    renewer = asyncio.create_task(renew())
    worker = asyncio.ensure_future(work())
    try:
        await asyncio.wait((worker, renewer), return_when=asyncio.FIRST_COMPLETED)
        if not worker.done():  # the renewal failed: another request may hold the lease now
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, CofferError):
                await worker
            renewer.result()  # (its error: 409 for a lease lost, 503 for metadata unreachable)
        return await worker
    finally:
        worker.cancel()  # (this request cancelled: its work with it)
        # A renewal on its way is let finish, never cancelled: cancelled, it could still reach
        # metadata after the chunk's record, and turn the lease kept for this writer's next
        # chunk back into a writing one, which another edge's next chunk would meet as 423
        # (issue 44: after a 204, the next PATCH on another edge answered 423).
        done.set()
        with contextlib.suppress(asyncio.CancelledError, CofferError):
            await renewer


async def _write(
    request: Request, upload: TusUpload, rid: str, previous: asyncio.Future[TusUpload] | None = None
) -> TusUpload:
    """Append the request's body to the upload, whose lease the caller holds: the upload as it
    is after (its offset moved, or complete with its asset). A chunk that did not complete the
    upload is answered before metadata has its record, which is written while the next chunk
    streams, the lease kept for it (``Kept``); records are written in order (each after
    ``previous``, the last chunk's). A chunk whose last one's record is done already, failed,
    is refused before it streams (409, ``_recorded_before``), and one that may complete the
    upload waits for that record first. Waiting for it before every 204 read 6 and 13 % slower
    for a 100 MiB upload in 5 MiB chunks in two A/B pairs on the embedded stack (2026-11-30;
    runs there move by up to 15 % either way): instead
    the chunk that streamed while a record failed is answered, and the one after it refused, so
    at most two 204s run ahead of metadata's offset. On every other way out the lease is given
    back."""
    state = edge_state(request)
    metadata = state.metadata
    assert upload.lock_token is not None
    declared = request.headers.get("content-length")
    size = int(declared) if declared is not None and declared.isascii() and declared.isdigit() else None
    if previous is not None and (previous.done() or size is None or upload.offset + size >= upload.length):
        await _recorded_before(metadata, upload, rid, previous)
        previous = None
    appended, held = await _append(request, upload, rid, size, previous)
    UPLOAD_BYTES.inc(appended.offset - upload.offset)
    if appended.sha256 is None:
        # A subtree key's next chunk is never given the kept lease (``Kept.take``): for it the
        # record gives the lease back, or that chunk meets it in metadata and waits it out (423
        # past ``_past_kept_leases``'s bound).
        keep = subtree_root() is None
        step = TusAdvance(
            lock_token=upload.lock_token,
            from_offset=upload.offset,
            offset=appended.offset,
            resume=appended.state or {},
            keep_seconds=KEEP_SECONDS if keep else 0,
        )
        expires = utcnow() + timedelta(seconds=TUS_EXPIRY_SECONDS)
        after = upload.model_copy(
            update={"offset": appended.offset, "resume": step.resume, "expires_at": expires}
        )

        async def record() -> TusUpload:
            if previous is not None:
                await previous
            return await metadata.tus_advance(upload.id, step, request_id=rid)

        recorded = asyncio.ensure_future(record())
        if keep:
            Kept.keep(state, after, recorded)
        else:
            state.kept_uploads.pop(upload.id, None)  # (an older chunk's, never to be taken)
            Kept.recording(state, upload.id, recorded)
        return after
    ingest = await _admitted(state, upload, appended, rid, published_held=held)
    done = TusComplete(
        lock_token=upload.lock_token,
        from_offset=upload.offset,
        sha256=appended.sha256,
        detected_type=appended.detected_type,
        scan_status=ingest.first_scan_status(),
    )
    try:
        completed = await metadata.tus_complete(upload.id, done, request_id=rid)
    except CofferError as exc:
        await _let_go(metadata, upload, rid)
        if 400 <= exc.status < 500:
            # Refused for good (its folder was deleted meanwhile, say): the upload ends here,
            # its bytes and reservation released, so nothing is left half-done.
            await _terminate(upload.id, upload.organization_id, metadata, state.blob, rid)
        UPLOADS.labels("failed").inc()
        raise
    UPLOADS.labels("created").inc()
    if done.scan_status == "pending" and state.scans is not None:
        state.scans.wake()
    if state.facts is not None and describe.facts_due(upload.mime_type, appended.detected_type):
        state.facts.wake()  # an image's facts were queued with it (issue 50)
    return completed


async def _recorded_before(
    metadata: MetadataClient, upload: TusUpload, rid: str, previous: asyncio.Future[TusUpload]
) -> None:
    """The last chunk's record, waited for (never cancelled by this request); if it failed,
    the lease is given back and this chunk refused (409): the client asks HEAD, which answers
    the offset metadata has, and resumes from there (blob drops what was written past it)."""
    try:
        await asyncio.shield(previous)
    except CofferError:
        await _let_go(metadata, upload, rid)
        raise CofferError(409, "conflict", "The last chunk was not recorded; ask HEAD and resume.") from None


async def _admitted(
    state: EdgeState, upload: TusUpload, appended: TusAppended, rid: str, *, published_held: bool
) -> Ingest:
    """Safe ingest (issue 48) at the last byte, before the asset exists: the organization's
    rules (asked of auth, not of the caller's principal: the caller may hold only the upload's
    capability; kept as long as a principal is, AuthClient.ingest) and, under ``enforce``,
    the contentTypes of the upload token it was created with; a type they do not allow ends
    the upload (415; bytes and reservation released, the token given back as a refused
    multipart upload leaves it); under ``block`` the object is held back from downloads until
    its scan passes, and otherwise released if it was published held (``_append``). A failure
    gives the lease back at once (the client's retry of this PATCH publishes the file again)."""
    metadata = state.metadata
    try:
        ingest = await state.auth.ingest(upload.organization_id, request_id=rid)
        token_types: list[str] | None = None
        if ingest.mode == "enforce" and upload.token_id is not None:
            place = await state.upload_tokens.place(upload.organization_id, upload.token_id, request_id=rid)
            token_types = place.content_types
        detected = appended.detected_type or "application/octet-stream"
        for ranges in ingest.allow_lists(token_types):
            if not media.admits(ranges.split(","), detected, upload.mime_type):
                await _let_go(metadata, upload, rid)
                await _terminate(upload.id, upload.organization_id, metadata, state.blob, rid)
                if upload.token_id is not None:
                    with contextlib.suppress(CofferError):
                        await state.upload_tokens.release(upload.token_id, upload.asset_id, request_id=rid)
                UPLOADS.labels("rejected").inc()
                raise media.type_mismatch(upload.mime_type, detected, ranges.split(","))
        if ingest.scan == "block":
            await state.blob.set_held(upload.key, True, request_id=rid)
        elif published_held:  # its type matched: served from now on
            await state.blob.set_held(upload.key, False, request_id=rid)
    except CofferError as exc:
        if exc.status != 415:
            await _let_go(metadata, upload, rid)
        raise
    return ingest


async def _let_go(metadata: MetadataClient, upload: TusUpload, rid: str) -> None:
    with contextlib.suppress(CofferError):
        await metadata.tus_unlock(upload.id, upload.lock_token or "", request_id=rid)


async def _append(
    request: Request,
    upload: TusUpload,
    rid: str,
    size: int | None,
    previous: asyncio.Future[TusUpload] | None,
) -> tuple[TusAppended, bool]:
    """Stream the body to blob, at most the upload's remaining bytes; blob answers the new
    offset once they are durable; and whether a last byte published the file held. On failure
    the lease is given back (after the last chunk's record, so that it is not refused for the
    lease)."""
    state = edge_state(request)
    checksum = _checksum(request.headers.get("upload-checksum"))
    room = upload.length - upload.offset
    chunk = _Chunk(request, room, state.settings.edge_tuning.client_idle_timeout_seconds)
    held = False

    async def append() -> TusAppended:
        nonlocal held
        if size is not None and size > room:
            raise file_too_large(room)
        # A chunk that may end the upload publishes it held under scan=block (never served, not
        # even before _admitted holds it, nor ever, were that call to fail), and under enforce
        # until _admitted has matched its type (a file refused was served until terminated).
        if size is None or size >= room:
            ingest = await state.auth.ingest(upload.organization_id, request_id=rid)
            held = ingest.scan == "block" or ingest.mode == "enforce"
        return await state.blob.tus_append(
            upload.id,
            chunk.__aiter__(),
            org_id=upload.organization_id,
            asset_id=upload.asset_id,
            key=upload.key,
            offset=upload.offset,
            length=upload.length,
            media_type=upload.mime_type,
            private=upload.visibility == "private",
            resume=upload.resume,
            checksum=checksum,
            request_id=rid,
            held=held,
        )

    try:
        appended: TusAppended = await _renewing(state.metadata, upload, rid, append, previous)
    except BaseException as exc:
        if previous is not None:
            with contextlib.suppress(CofferError):
                await previous
        await _let_go(state.metadata, upload, rid)
        if chunk.too_large:
            raise file_too_large(room) from None
        if isinstance(exc, CofferError) and exc.status == 503 and chunk.client_gone:
            raise invalid("The client went away.") from None
        raise
    return appended, held


async def _terminate(
    upload_id: str,
    org_id: str | None,
    metadata: MetadataClient,
    blob: BlobClient,
    rid: str,
    *,
    lock_token: str | None = None,
    found: bool = False,
) -> None:
    """End the upload: gone at once; its bytes deleted now (the sweeper retries if this
    fails), then its reservation released. ``found``: only an unfinished upload (404 for a
    complete one, which only a tus client may forget)."""
    ended = await _past_kept_leases(
        lambda: metadata.tus_terminate(
            upload_id, org_id, lock_token=lock_token, unfinished_only=found, request_id=rid
        )
    )
    if ended is None:
        if found:  # a metadata of the previous release forgot it all the same
            raise not_found(f"Upload {upload_id} is finished: its asset is an asset now.")
        return
    owner = org_id or ended.prefix.split("/", 1)[0]
    with contextlib.suppress(CofferError):
        await blob.delete_prefix(owner, ended.asset_id, request_id=rid)
        await metadata.finish_intent(ended.asset_id)


# -- routes ----------------------------------------------------------------------------------


Token = Annotated[
    str | None,
    Query(
        description="Creation: an upload token (`cof_upl_…`, §8) instead of a key. Later requests: "
        "the capability (`cof_tus_…`) the creation's `Location` carries.",
        max_length=256,
    ),
]
# (Not a pattern: an id no upload can have is 404, not 400; ``_known``.)
UploadIdPath = Annotated[str, Path(description="The upload's id (`tus_…`).")]
_TUS_ERRORS = {
    409: "`Upload-Offset` is not the upload's (`offset_mismatch`, with `details.offset`).",
    412: "`Tus-Resumable` is not 1.0.0 (`unsupported_version`); see `Tus-Version`.",
    423: "Another request is writing to this upload (`locked`); retry.",
    460: "The chunk does not match its `Upload-Checksum` (`checksum_mismatch`); it was discarded.",
}


def _responses(status: int, text: str, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answers of a tus route: its success, and the contract's errors."""
    documented = errors(*(s for s in statuses if s not in _TUS_ERRORS))
    for code in statuses:
        if code in _TUS_ERRORS:
            documented[code] = {"model": ErrorEnvelope, "description": _TUS_ERRORS[code]}
    return {status: {"description": text}, **documented}


@router.options("", status_code=204, include_in_schema=False)
@router.options("/{upload_id}", status_code=204, include_in_schema=False)
async def options() -> Response:
    """What this server speaks (and the CORS preflight)."""
    return Response(
        status_code=204,
        headers={
            "Tus-Version": TUS_VERSION,
            "Tus-Extension": EXTENSIONS,
            "Tus-Max-Size": str(MAX_FILE_BYTES),
            "Tus-Checksum-Algorithm": ",".join(CHECKSUMS),
        },
    )


@dataclass(slots=True)
class _Target:
    """Where a new upload goes, and for whom."""

    organization_id: str
    quota_bytes: int
    name: str
    folder_id: str | None
    visibility: Visibility
    mime_type: str
    key: str
    token_id: str | None = None
    capability: str | None = None
    minter_key_id: str | None = None
    # An upload token's ``Upload-Metadata``, with what the token fixes about the asset in it.
    upload_metadata: str | None = None
    minter_user_id: str | None = None


async def _target(request: Request, meta: Metadata, length: int, asset_id: str, token: str | None) -> _Target:
    """The creation's credentials and scope: a key's organization and the metadata's folder,
    name and visibility; or an upload token's, whose scope fixes them (it is spent here)."""
    state = edge_state(request)
    rid = request_id_of(request) or ""
    if not token or request.headers.get("x-api-key"):
        caller = await _caller(request, None)
        assert caller.organization_id is not None
        org = caller.organization_id
        _check_own(meta, None)
        key, mime_type = keys.named(org, asset_id, meta.filename, meta.filetype)
        visibility = meta.visibility or caller.default_visibility
        return _Target(org, caller.quota_bytes, meta.filename, meta.folder_id, visibility, mime_type, key)
    if not token.startswith(TOKEN_PREFIX):
        raise unauthorized("Missing or malformed upload token: send ?token=cof_upl_….")
    async with failures_counted(request):
        grant = await state.upload_tokens.grant(token_hash(token), request_id=rid)
    request.state.organization_id = org = grant.organization_id
    await state.rate_limiter.check(grant.token_id)
    act_as(request, "token", grant.token_id)
    # In the subtree its key may reach now, as the key's own.
    await subtree.confine_token(state.metadata, org, grant.confined_to, grant.confined_within, request_id=rid)
    if length > grant.max_bytes:
        raise file_too_large(grant.max_bytes)
    key, mime_type = keys.named(org, asset_id, meta.filename, meta.filetype)
    allowed = grant.content_types
    if allowed is not None and not media_type_allowed(mime_type, tuple(allowed)):
        raise unsupported_media_type(f"This upload accepts {', '.join(allowed)}, not {mime_type}.")
    _check_own(meta, grant.asset)
    upload_metadata = _with_token_asset(meta.raw, grant.asset)
    await state.upload_tokens.claim(grant.token_id, asset_id, request_id=rid)
    return _Target(
        org,
        grant.quota_bytes,
        grant.name or meta.filename,
        grant.folder_id,
        grant.visibility or grant.default_visibility,
        mime_type,
        key,
        token_id=grant.token_id,
        capability=new_capability(),
        minter_key_id=grant.key_id,
        minter_user_id=grant.user_id,
        upload_metadata=upload_metadata,
    )


def _check_own(meta: Metadata, fixed: TokenAsset | None) -> None:
    """What the upload says of its asset (issues 47 and 50: ``expiresAt``, ``metadata``,
    ``tags``), checked at creation, before any byte (metadata reads them again at completion);
    not what an upload token fixes, which replaces it unread (or, for a token that forbids
    metadata, refuses it: ``_with_token_asset``)."""
    if meta.expires_at is not None and (fixed is None or fixed.expires_at is None):
        expiry.parse_expires_at(meta.expires_at)
    if fixed is None or not (fixed.fixes_description or fixed.forbid_description):
        describe.tus_description(meta.raw)


def _with_token_asset(raw: str, asset: TokenAsset | None) -> str:
    """A token upload's ``Upload-Metadata`` with what the token fixes about the asset (issues 47
    and 50): its ``expiresAt``, ``metadata`` and ``tags`` entries replace the client's, which
    are refused (400) under a token that forbids them. metadata reads them at completion."""
    if asset is None:
        return raw
    items = [item.strip() for item in raw.split(",")]
    keys = {item.partition(" ")[0] for item in items}
    if asset.forbid_description:
        for name in ("metadata", "tags"):
            if name in keys:
                raise invalid(f"This upload token does not allow '{name}'.", field=name)
    fixed: dict[str, str] = {}
    if asset.expires_at is not None:
        fixed[expiry.FIELD] = asset.expires_at
    if asset.metadata is not None:
        fixed["metadata"] = describe.encode_metadata(asset.metadata)
    if asset.tags:
        fixed["tags"] = ",".join(asset.tags)
    dropped = set(fixed) | ({"metadata", "tags"} if asset.fixes_description else set())
    kept = [item for item in items if item.partition(" ")[0] not in dropped]
    added = [f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in fixed.items()]
    joined = ",".join(kept + added)
    if len(joined) > MAX_METADATA_CHARS:  # refused before the token is taken
        raise invalid(
            f"Upload-Metadata, with what the upload token fixes, is over {MAX_METADATA_CHARS} characters.",
            field="Upload-Metadata",
        )
    return joined


@router.post(
    "",
    status_code=201,
    responses=_responses(201, "Created; `Location` is the upload's URL.", 404, 412, 413, 415, 460),
    openapi_extra=needs("assets:write")
    | _documented(
        **{
            "Upload-Length": "The file's size in bytes (at most 104857600); required.",
            "Upload-Metadata": "Comma-separated `key base64(value)`: `filename` (required), `folderId`, "
            "`filetype`, `visibility`.",
            "Upload-Checksum": "With a body (creation-with-upload): `sha1|sha256 base64(digest)`.",
        }
    ),
)
async def create_upload(request: Request, token: Token = None) -> Response:
    """Create a resumable upload (tus creation; with a body, creation-with-upload). The length
    is held against the quota until the upload completes, is terminated or expires."""
    _require_version(request)
    length = _length(request)
    meta = _metadata(request.headers.get("upload-metadata"))
    if _has_body(request) and _media_type(request) != OFFSET_STREAM:
        raise unsupported_media_type(f"A creation's body is Content-Type: {OFFSET_STREAM}.")
    _checksum(request.headers.get("upload-checksum"))
    declared = request.headers.get("content-length") or ""
    if declared.isascii() and declared.isdigit() and int(declared) > length:
        raise file_too_large(length)  # a body longer than the upload: refused before it exists
    state = edge_state(request)
    rid = request_id_of(request) or ""
    asset_id, upload_id = new_id(ASSET), new_id(TUS_UPLOAD)
    target = await _target(request, meta, length, asset_id, token)
    new = TusCreate(
        id=upload_id,
        asset_id=asset_id,
        key=target.key,
        name=target.name,
        folder_id=target.folder_id,
        mime_type=target.mime_type,
        visibility=target.visibility,
        upload_metadata=target.upload_metadata or meta.raw,
        length=length,
        quota_bytes=target.quota_bytes,
        capability_hash=token_hash(target.capability) if target.capability else None,
        token_id=target.token_id,
        minter_key_id=target.minter_key_id,
        minter_user_id=target.minter_user_id,
    )
    try:
        upload = await state.metadata.tus_create(target.organization_id, new, request_id=rid)
    except CofferError:
        await _release_token(state, target, asset_id, rid)
        raise
    location = f"{state.settings.base_url}{TUS_PATH}/{upload_id}"
    if target.capability:
        location += f"?token={target.capability}"
    headers = {"Location": location, "Upload-Expires": _http_date(upload.expires_at)}
    if _has_body(request) or length == 0:
        upload = await state.metadata.tus_lock(
            upload_id, target.organization_id, 0, LEASE_SECONDS, request_id=rid
        )
        try:
            upload = await _write(request, upload, rid)
            if upload.offset < upload.length and await request.is_disconnected():
                raise invalid("The client went away.")  # (blob kept what arrived)
        except Exception as exc:
            entry = state.kept_uploads.pop(upload_id, None)
            lock_token = await entry.given_up() if entry is not None else None
            completed = await _completed_after(state, upload_id, target, exc, rid)
            if completed is None:
                await _abandon(state, upload_id, target, asset_id, exc, rid, lock_token=lock_token)
                raise
            upload = completed
        headers |= _upload_headers(upload)
    return Response(status_code=201, headers=headers)


async def _completed_after(
    state: EdgeState, upload_id: str, target: _Target, failure: Exception, rid: str
) -> TusUpload | None:
    """The upload, if a creation's failure of unknown outcome (anything but a refusal, 4xx:
    the completion's answer lost, say) came after metadata made its asset: then the creation
    succeeded, and is answered so, its upload token spent once (answered 503 and the token
    released, the client's retry made a second asset with a single-use token)."""
    if isinstance(failure, CofferError) and failure.status < 500:
        return None
    try:
        upload = await state.metadata.tus_get(upload_id, target.organization_id, request_id=rid)
    except CofferError:
        return None
    if not upload.completed:
        return None
    UPLOADS.labels("created").inc()
    for relay in (state.scans, state.facts):  # (its scan or its image's facts may be due)
        if relay is not None:
            relay.wake()
    return upload


async def _abandon(
    state: EdgeState,
    upload_id: str,
    target: _Target,
    asset_id: str,
    failure: Exception,
    rid: str,
    *,
    lock_token: str | None,
) -> None:
    """A creation that failed: the client got no Location to resume with, so the upload ends
    now, its reservation released, rather than hold it until it expires (a day); its upload
    token is given back only when nothing was made: the failure was a refusal (4xx), or the
    termination ended the upload unfinished. Otherwise (metadata unreachable, say) the token
    stays spent, as a one-shot upload's whose commit's outcome is unknown."""
    ended = False
    with contextlib.suppress(CofferError):
        await _terminate(
            upload_id,
            target.organization_id,
            state.metadata,
            state.blob,
            rid,
            lock_token=lock_token,
            found=True,
        )
        ended = True
    if ended or (isinstance(failure, CofferError) and failure.status < 500):
        await _release_token(state, target, asset_id, rid)


async def _release_token(state: EdgeState, target: _Target, asset_id: str, rid: str) -> None:
    """An upload token's spend undone, when its upload failed at creation: good for another try."""
    if target.token_id is not None:
        with contextlib.suppress(CofferError):
            await state.upload_tokens.release(target.token_id, asset_id, request_id=rid)


def _media_type(request: Request) -> str:
    return (request.headers.get("content-type") or "").split(";")[0].strip().lower()


def _has_body(request: Request) -> bool:
    declared = request.headers.get("content-length")
    chunked = "chunked" in request.headers.get("transfer-encoding", "")
    return (declared is not None and declared != "0") or chunked


@router.head(
    "/{upload_id}",
    responses=_responses(200, "The upload's offset and length.", 404, 412),
    openapi_extra=needs("assets:write") | _documented(),
)
async def upload_state(upload_id: UploadIdPath, request: Request, token: Token = None) -> Response:
    """How much of the upload is stored (`Upload-Offset`), and its asset once complete."""
    _require_version(request)
    caller = await _caller(request, token)
    _known(upload_id)
    rid = request_id_of(request) or ""
    state = edge_state(request)
    await _recorded(state, upload_id)
    upload = await state.metadata.tus_get(upload_id, caller.organization_id, request_id=rid)
    await _authorized(request, caller, upload)
    headers = _upload_headers(upload)
    if upload.upload_metadata:
        headers["Upload-Metadata"] = upload.upload_metadata
    return Response(status_code=200, headers=headers)


async def _recorded(state: EdgeState, upload_id: str) -> None:
    """Wait for metadata's record of this edge's last chunk of the upload, if one is on its way
    (a request that goes away leaves the record be; a record that failed is the next call's
    to find)."""
    recorded = state.tus_records.get(upload_id)
    if recorded is not None:
        with contextlib.suppress(CofferError):
            await asyncio.shield(recorded)


@router.patch(
    "/{upload_id}",
    status_code=204,
    responses=_responses(
        204, "Stored; `Upload-Offset` is the new offset.", 404, 409, 412, 413, 415, 423, 460
    ),
    openapi_extra=needs("assets:write")
    | _documented(
        body="The chunk's bytes, at most what the upload still lacks.",
        **{
            "Upload-Offset": "Where this chunk starts: the offset HEAD answered.",
            "Upload-Checksum": "Optional `sha1|sha256 base64(digest)` of this chunk; a mismatch → 460.",
        },
    ),
)
async def upload_chunk(upload_id: UploadIdPath, request: Request, token: Token = None) -> Response:
    """Append a chunk (`Content-Type: application/offset+octet-stream`) at `Upload-Offset`."""
    _require_version(request)
    offset = _offset(request.headers.get("upload-offset"))
    if _media_type(request) != OFFSET_STREAM:
        raise unsupported_media_type(f"A chunk is Content-Type: {OFFSET_STREAM}.")
    _checksum(request.headers.get("upload-checksum"))
    caller = await _caller(request, token)
    _known(upload_id)
    metadata = edge_state(request).metadata
    rid = request_id_of(request) or ""
    entry = await Kept.take(request, caller, upload_id, offset)
    previous = entry.recorded if entry is not None else None
    upload = entry.upload if entry is not None else None
    if upload is None:
        if caller.capability is not None:
            await _authorized(request, caller, await metadata.tus_get(upload_id, None, request_id=rid))
        # Not kept for this chunk (a subtree key's, a confined token's): the last chunk's
        # record first, or its lease is a writer's.
        await _recorded(edge_state(request), upload_id)
        upload = await _lock(metadata, upload_id, caller, offset, rid)
    if upload.lock_token is not None:
        upload = await _write(request, upload, rid, previous)
    elif offset != upload.offset:  # complete already: only its own offset is right
        raise offset_mismatch(upload.offset)
    else:  # complete, at its own offset: any byte is past Upload-Length
        async for data in request.stream():
            if data:
                raise CofferError(413, "file_too_large", "This upload is complete: it takes no more bytes.")
    headers = _upload_headers(upload)
    del headers["Upload-Length"]
    return Response(status_code=204, headers=headers)


@router.delete(
    "/{upload_id}",
    status_code=204,
    responses=_responses(204, "Terminated: its bytes and reservation released.", 404, 412, 423),
    openapi_extra=needs("assets:write") | _documented(),
)
async def terminate_upload(upload_id: UploadIdPath, request: Request, token: Token = None) -> Response:
    """Terminate the upload (tus termination): its bytes are deleted and its reservation
    released. A complete upload is only forgotten: its asset stays."""
    _require_version(request)
    caller = await _caller(request, token)
    _known(upload_id)
    state = edge_state(request)
    rid = request_id_of(request) or ""
    entry = await Kept.take(request, caller, upload_id, None)
    if entry is None and caller.capability is not None:
        await _authorized(request, caller, await state.metadata.tus_get(upload_id, None, request_id=rid))
    token = await entry.given_up() if entry is not None else None
    await _terminate(upload_id, caller.organization_id, state.metadata, state.blob, rid, lock_token=token)
    return Response(status_code=204)


# The methods a POST on an upload's URL may name in X-HTTP-Method-Override, and their routes.
_OVERRIDES: dict[str, Callable[[str, Request, str | None], Awaitable[Response]]] = {
    "PATCH": upload_chunk,
    "DELETE": terminate_upload,
    "HEAD": upload_state,
}


@router.post("/{upload_id}", include_in_schema=False, openapi_extra=needs("assets:write"))
async def overridden(upload_id: UploadIdPath, request: Request, token: Token = None) -> Response:
    """A POST naming its method in ``X-HTTP-Method-Override``, which tus 1.0.0 says MUST be
    taken as the request's method (for a client or proxy that sends no PATCH or DELETE:
    tus-js-client's ``overridePatchMethod``; the CORS preflight allows the header): that
    method's route, with its every check; any other method 400; without the header, 405."""
    method = request.headers.get("x-http-method-override")
    if method is None:
        raise StarletteHTTPException(405, headers={"Allow": "DELETE, HEAD, OPTIONS, PATCH"})
    route = _OVERRIDES.get(method.strip())
    if route is None:
        problem = f"X-HTTP-Method-Override on an upload's URL is one of {', '.join(_OVERRIDES)}."
        raise invalid(problem, field="X-HTTP-Method-Override")
    return await route(upload_id, request, token)


# -- an organization's open uploads (GET /api/uploads, DELETE /api/uploads/{id}) ----------

open_router = APIRouter(tags=["resumable uploads (tus)"])


def open_upload(upload: TusUpload) -> dict[str, Any]:
    """An unfinished upload as ``GET /api/uploads`` writes it."""
    return {
        "id": upload.id,
        "organizationId": upload.organization_id,
        "folderId": upload.folder_id,
        "name": upload.name,
        "size": upload.length,
        "offset": upload.offset,
        "reservedBytes": upload.length if upload.active else 0,
        "createdAt": isoformat(upload.created_at or upload.expires_at),
        "expiresAt": isoformat(upload.expires_at),
        "viaToken": upload.capability_hash is not None,
    }


@open_router.get(
    UPLOADS_PATH,
    response_model=OpenUploadList,
    responses=errors(),
    tags=["resumable uploads (tus)"],
    openapi_extra=needs("assets:write"),
)
async def list_open_uploads(
    principal: PrincipalDep,
    metadata: MetadataDep,
    rid: RequestIdDep,
    limit: Annotated[PageLimit, Query(description="Page size, 1–100.")] = PAGE_LIMIT_DEFAULT,
    offset: Annotated[PageOffset, Query(description="Uploads to skip.")] = PAGE_OFFSET_DEFAULT,
    cursor: Annotated[
        str | SkipJsonSchema[None],
        Query(max_length=CURSOR_MAX_CHARS, description="A previous page's `nextCursor`: the page after it."),
    ] = None,
    total: Annotated[
        TrueOrFalse | SkipJsonSchema[None],
        Query(description="Count every upload into `total`: default true without `cursor`, false with one."),
    ] = None,
) -> Any:
    """The organization's unfinished resumable uploads, newest first, and what each holds; paged by
    `offset` or `cursor`."""
    extra: dict[str, str] = {}
    if cursor is not None:
        extra["cursor"] = cursor
    if total is not None:
        extra["total"] = total
    page = await metadata.tus_list(
        principal.organization_id, limit=limit, offset=offset, request_id=rid, extra=extra
    )
    uploads = [open_upload(u) for u in page.uploads]
    body: dict[str, Any] = {"uploads": uploads, "limit": limit}
    if page.total is not None:
        body["total"] = page.total
    if cursor is None and total != "false":
        body["offset"] = offset
    body["nextCursor"] = page.next_cursor
    return JSONResponse(body)


@open_router.delete(
    UPLOADS_PATH + "/{upload_id}",
    response_model=Success,
    responses={**errors(404), 423: {"model": ErrorEnvelope, "description": "A PATCH is running (`locked`)."}},
    tags=["resumable uploads (tus)"],
    openapi_extra=needs("assets:write"),
)
async def terminate_open_upload(
    upload_id: Annotated[str, Path(description="The upload's id (`tus_…`).")],
    request: Request,
    principal: PrincipalDep,
    rid: RequestIdDep,
) -> Any:
    """Terminate one of the organization's unfinished uploads: its bytes are deleted and its
    reservation released (as tus `DELETE`); another organization's is 404."""
    state = edge_state(request)
    await end_open_upload(upload_id, principal.organization_id, state.metadata, state.blob, rid)
    return {"success": True}


async def end_open_upload(
    upload_id: str, org_id: str, metadata: MetadataClient, blob: BlobClient, rid: str
) -> None:
    """Terminate one of the organization's unfinished uploads (the API's ``DELETE
    /api/uploads/{id}`` and the dashboard's Usage page): 404 for any other, 423 while a PATCH
    runs."""
    _known(upload_id)
    await _terminate(upload_id, org_id, metadata, blob, rid, found=True)


# -- CORS and Tus-Resumable on every answer --------------------------------------------------

_ALWAYS = [
    (b"tus-resumable", TUS_VERSION.encode()),
    (b"access-control-allow-origin", b"*"),
    (
        b"access-control-expose-headers",
        b"location, upload-offset, upload-length, upload-metadata, upload-expires, tus-resumable, "
        b"tus-version, tus-extension, tus-max-size, tus-checksum-algorithm, coffer-asset-id, x-request-id",
    ),
]
_PREFLIGHT = [
    (b"access-control-allow-methods", b"POST, HEAD, PATCH, DELETE, OPTIONS"),
    (
        b"access-control-allow-headers",
        b"content-type, tus-resumable, upload-length, upload-metadata, upload-offset, upload-checksum, "
        b"upload-defer-length, upload-concat, x-api-key, x-organization-id, x-request-id, "
        b"x-http-method-override",
    ),
    (b"access-control-max-age", b"600"),
]


def tus_headers(scope: Scope) -> list[tuple[bytes, bytes]] | None:
    """``Tus-Resumable`` and CORS on every answer of the tus routes (errors included), and
    the preflight's headers on ``OPTIONS`` (for ``ResponseHeadersMiddleware``)."""
    path = scope.get("path", "")
    if path != TUS_PATH and not path.startswith(TUS_PATH + "/"):
        return None
    if scope.get("method") == "OPTIONS":
        return _ALWAYS[1:] + _PREFLIGHT
    return _ALWAYS
