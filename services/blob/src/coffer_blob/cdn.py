"""The CDN host (docs/contract.md §6): public and signed downloads of live objects, and nothing else.

Conditional and range requests follow RFC 9110 §13–14: ``If-Match`` and
``If-Unmodified-Since`` (412), ``If-None-Match`` (weak comparison, ``*``) and
``If-Modified-Since`` (304), then a single ``Range`` (206, or 416) unless ``If-Range``
names another representation. A private object (CONTRACT §12) is served on a valid signed
URL only; without one its key answers 404, exactly as a key that does not exist. Its
visibility comes with the read the CDN makes anyway (the sidecar, the S3 metadata), so a
change shows on the next request, with no call to another service. Several ranges get the
whole object (200), as does ``HEAD``
(range handling is defined for GET only). ``OPTIONS`` answers a CORS preflight (204)
without looking the key up: downloads need no credentials, so there is nothing to protect.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from prometheus_client import Counter
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams

from coffer_blob import grants, signing
from coffer_blob.deps import BlobState, blob_state
from coffer_blob.metrics import DOWNLOAD_BYTES
from coffer_blob.storage import ObjectInfo, Reader, Storage, read_range
from coffer_blob.transforms import formats, presets
from coffer_blob.transforms.pool import CACHE_HITS
from coffer_kit.contract import keys, transforms
from coffer_kit.contract.errors import (
    CofferError,
    forbidden,
    not_an_image,
    not_found,
    precondition_failed,
    range_not_satisfiable,
    unavailable,
)
from coffer_kit.contract.transforms import Transform
from coffer_kit.routes import LeanRoute

router = APIRouter(route_class=LeanRoute)


@functools.lru_cache(maxsize=4)
def public_cache(max_age: int) -> str:
    """Cache-Control of a public answer (COFFER_CDN_PUBLIC_MAX_AGE; keys never change content)."""
    return f"public, max-age={max_age}, immutable"


_PREFLIGHT = {
    "access-control-allow-methods": "GET, HEAD, OPTIONS",
    "access-control-allow-headers": "Range, If-Range, If-None-Match, If-Modified-Since, If-Match, "
    "If-Unmodified-Since",
    "access-control-max-age": "86400",
    "allow": "GET, HEAD, OPTIONS",
}
_RANGE_SPEC = re.compile(r"^(\d*)-(\d*)$")
# Objects up to this size are read whole and sent in one piece (on the event loop up to the
# driver's inline_read_bytes, else with their metadata in one worker-thread trip); larger
# ones stream. Small files are most requests and least bytes.
SMALL_OBJECT_BYTES = 256 * 1024
_SENT = {access: DOWNLOAD_BYTES.labels(access) for access in ("public", "signed")}


# On every CDN answer, errors included: CORS so browsers can read them cross-origin, and a
# sandbox for every type (issue 23: it was on HTML, XML and scripts only, and a PDF, whose
# viewer runs script, rendered on the CDN's origin). An <img> or <video> is not affected.
CDN_HEADERS: list[tuple[bytes, bytes]] = [
    (b"access-control-allow-origin", b"*"),
    (b"access-control-expose-headers", b"Content-Range, Content-Disposition, ETag, Accept-Ranges"),
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", b"sandbox"),
]


@router.api_route("/{key:path}", methods=["GET", "HEAD", "OPTIONS"], include_in_schema=False)
async def download(request: Request, key: str) -> Response:
    """Serve the object under ``key``: public, or signed with ``expires`` and ``signature``
    (and ``by``, the authority it dies with)."""
    # A lean route (coffer_kit.routes): nothing for FastAPI to solve on this, the busiest
    # route, whose plain downloads are most of the CDN's requests (issue 28: one path for
    # them all, with tracing on or off).
    state = blob_state(request)
    storage = state.storage
    if request.method == "OPTIONS":
        return Response(status_code=204, headers=_PREFLIGHT)
    if not keys.is_valid_key(key):
        raise not_found("No such object.")
    query = request.query_params
    if query and transforms.wants_transform(query):
        return await _transformed(request, key, state)
    cache, access = await _access(query, key, state)

    if storage.inline_read_bytes:
        # On the event loop: a page-cache read of a few KiB costs less than a worker-thread
        # trip (bench/results/anatomy.md); the bound keeps a cold read short.
        found = storage.read_small(key, storage.inline_read_bytes)
    else:
        found = await run_in_threadpool(storage.read_small, key, SMALL_OBJECT_BYTES)
    info, body = _servable(found, access)
    return await _serve(request, storage, info, body, _representation_headers(info, cache), access)


async def _serve(
    request: Request,
    storage: Storage,
    info: ObjectInfo,
    body: bytes | None,
    headers: dict[str, str],
    access: str,
) -> Response:
    """The answer for an object that may be served (an original, or a variant): 200, 206, 304,
    412 or 416, its bytes from ``body`` when read already."""
    precondition = _preconditions(request, info)
    if precondition == 412:
        raise precondition_failed()
    if precondition == 304:
        # RFC 9110 §15.4.5: the validators and caching headers a 200 would have had.
        kept = ("etag", "last-modified", "cache-control", "vary")
        return Response(status_code=304, headers={name: headers[name] for name in kept if name in headers})

    start, end, status = _chosen_range(request, info, headers)
    if request.method == "HEAD":
        return Response(status_code=status, headers=headers)
    key = info.key
    if body is None and info.size <= SMALL_OBJECT_BYTES:
        # Too large to read on the event loop, small enough to read whole in one trip.
        found = await run_in_threadpool(storage.read_small, key, SMALL_OBJECT_BYTES)
        if found is None:  # deleted since
            raise not_found("No such object.")
        body = found[1]
    if body is not None:
        _SENT[access].inc(end - start)
        return Response(body[start:end], status_code=status, headers=headers)
    reader = await run_in_threadpool(storage.open_reader, key, start, end)
    if reader is None:  # deleted since the stat
        raise not_found("No such object.")
    return StreamingResponse(_chunks(reader, _SENT[access]), status_code=status, headers=headers)


async def _transformed(request: Request, key: str, state: BlobState) -> Response:
    """A transformed answer (CONTRACT §10): the stored variant, rendered first if it is new.

    Order: transforms on at all (else 404), the signature over key, expiry and transform,
    then its authority's revocation (403), the original and its visibility (404, as for any
    key), then the parameters (400: free parameters on a public URL, an unknown preset), then
    the variant.
    """
    settings, storage, pool = state.settings, state.storage, state.transforms
    if not settings.transforms or pool is None:
        raise not_found("Image transforms are switched off on this host.")
    query = request.query_params
    cache, access = await _access(query, key, state)
    # The original's stat on the event loop where the driver reads small files there (a stat
    # is less than such a read): a stored variant cost 1.8-2.0x an original's CPU per request
    # with the stat in a worker thread (bench: transforms).
    info = storage.stat(key) if storage.inline_read_bytes else await run_in_threadpool(storage.stat, key)
    if info is None or info.withheld or (info.private and access == "public"):
        raise not_found("No such object.")
    transform = await _requested(query, key, access, state)
    auto = transform.fmt == "auto"
    if auto:
        chosen = formats.auto_format(request.headers.get("accept", "")) or "auto"
        transform = dataclasses.replace(transform, fmt=chosen)
    name = variant_key(key, transform)
    # A source refused already (or too slow lately) costs no more reads of the store.
    _raise_remembered(pool.remembered(key, name))
    found = await _read_variant(storage, name)
    if found is None:
        source = await _check_source_type(storage, key)
        if request.method == "HEAD":
            # HEAD never renders: what the variant will be, without its validators or length
            # (unknown until it is rendered), and not to be cached.
            out_fmt = formats.resolve_format(transform, source, "")
            filename = _stem(info.key) + formats.EXTENSIONS[out_fmt]
            head = {
                "content-type": formats.MEDIA_TYPES[out_fmt],
                "content-disposition": "inline; filename*=UTF-8''" + quote(filename, safe=""),
                "cache-control": "no-store",
            }
            if auto:
                head["vary"] = "Accept"
            unknown = Response(status_code=200, headers=head)
            # No Content-Length (Starlette writes 0 for the empty body): a HEAD must not say
            # a length its GET will not have (RFC 9110 §9.3.2).
            unknown.raw_headers = [(k, v) for k, v in unknown.raw_headers if k != b"content-length"]
            return unknown
        outcome = await pool.render(key, name, transform, private=info.private)
        if outcome[0] == "gone":
            raise not_found("No such object.")
        _raise_remembered(outcome)
        # Deleted while it rendered? The variant must not outlive its original: the delete
        # removes variants after the original, so one stored after that removal is caught here.
        if await run_in_threadpool(storage.stat, key) is None:
            await run_in_threadpool(storage.delete, name)
            raise not_found("No such object.")
        found = await _read_variant(storage, name)
        if found is None:  # deleted since with its original, or made room for another render
            raise unavailable("The variant was replaced as it was made; ask again.", retry_after=1)
    else:
        CACHE_HITS.inc()
    variant, body = found
    headers = _representation_headers(variant, cache)
    filename = _stem(info.key) + _EXTENSIONS.get(variant.content_type, "")
    headers["content-disposition"] = "inline; filename*=UTF-8''" + quote(filename, safe="")
    if auto:
        headers["vary"] = "Accept"
    return await _serve(request, storage, variant, body, headers, access)


def _raise_remembered(outcome: tuple[object, ...] | None) -> None:
    """A worker's refusal (415, 422: of the source, or of this variant) as the error it is."""
    if outcome is not None and outcome[0] in ("refused", "oversize"):
        _, status, code, message, details = outcome
        raise CofferError(status, code, message, details=details)  # type: ignore[arg-type]


_EXTENSIONS = {media: formats.EXTENSIONS[fmt] for fmt, media in formats.MEDIA_TYPES.items()}


def _stem(key: str) -> str:
    """The original's file name without its extension (a variant's name takes its own)."""
    stem = key.rsplit("/", 1)[-1]
    return stem.rsplit(".", 1)[0] if "." in stem.lstrip(".") else stem


def variant_key(key: str, transform: Transform) -> str:
    """Where a variant of ``key`` is kept: beside it, named by the transform's canonical form.

    The name holds ``%``, which no sanitised filename does (``coffer_kit.contract.keys``): no asset's
    key can be a variant's, the CDN never serves one by its own name, and ``delete_prefix``
    of the asset removes it with the original.
    """
    return key.rsplit("/", 1)[0] + "/v%" + transform.canonical().replace("&", ",")


async def _requested(query: QueryParams, key: str, access: str, state: BlobState) -> Transform:
    """The transform a request names; organization presets only looked up for a name that is
    not built in."""
    org_presets: dict[str, Transform] | None = None
    preset = query.get("preset")
    if preset is not None and preset not in transforms.BUILTIN_PRESETS and state.presets is not None:
        org_id = key.split("/", 1)[0]
        org_presets = state.presets.get(org_id)
        if org_presets is None:
            org_presets = await run_in_threadpool(presets.read, state.storage, org_id)
            state.presets.put(org_id, org_presets)
        elif preset not in org_presets and presets.valid_name(preset):
            # A name the cache lacks is read again at once (its own object: one read): a preset
            # just created is known on its first use (its public URLs exist already).
            found = await run_in_threadpool(presets.read_one, state.storage, org_id, preset)
            if found is not None:
                org_presets = {**org_presets, preset: found}
                state.presets.put(org_id, org_presets)
    transform = transforms.parse(query, signed=access == "signed", presets=org_presets)
    assert transform is not None  # wants_transform() held
    return transform


async def _read_variant(storage: Storage, name: str) -> tuple[ObjectInfo, bytes | None] | None:
    if storage.inline_read_bytes:
        return storage.read_small(name, storage.inline_read_bytes)
    return await run_in_threadpool(storage.read_small, name, SMALL_OBJECT_BYTES)


async def _check_source_type(storage: Storage, key: str) -> str:
    """The source's format from the original's first bytes (else 415 ``not_an_image``),
    before a worker is asked."""

    first = await run_in_threadpool(read_range, storage, key, 0, 32)
    if first is None:
        raise not_found("No such object.")
    source = formats.sniff_format(first)
    if source is None:
        raise not_an_image()
    return source


def _servable(found: tuple[ObjectInfo, bytes | None] | None, access: str) -> tuple[ObjectInfo, bytes | None]:
    """What was read, if this request may have it: a private object without a valid signature
    answers exactly as a key that does not exist."""
    if found is None or found[0].withheld or (found[0].private and access == "public"):
        # (A held object, issue 48: its scan has not passed, or found it infected; or one in
        # the trash, issue 47.)
        raise not_found("No such object.")
    return found


async def _access(query: QueryParams, key: str, state: BlobState) -> tuple[str, str]:
    """(Cache-Control, access label): public, or signed once the signature checks out and its
    authority, if it names one, was not revoked since (else 403)."""
    settings = state.settings
    if "expires" not in query and "signature" not in query:
        return public_cache(settings.cdn_public_max_age), "public"
    expires, sent, by = query.getlist("expires"), query.getlist("signature"), query.getlist("by")
    if len(expires) != 1 or len(sent) != 1:
        raise forbidden("A signed URL carries exactly one 'expires' and one 'signature'.")
    if len(by) > 1:
        raise forbidden("A signed URL carries at most one 'by'.")
    spec = ""
    if transforms.wants_transform(query):
        try:
            spec = transforms.signed_spec(query)
        except CofferError as exc:
            # edge signs only parameters it has checked: anything else was changed after.
            raise forbidden("The URL signature does not cover this transform.") from exc
    assert settings.signing_secret is not None
    now = time.time()
    secret = settings.signing_secret.get_secret_value().encode()
    refusal = signing.check(
        secret, key, expires[0], sent[0], now=now, transform=spec, by=by[0] if by else None
    )
    if refusal:
        raise forbidden(refusal)
    if by:
        await _check_unrevoked(state, key, by[0])
    return f"private, max-age={max(0, int(int(expires[0]) - now))}", "signed"


async def _check_unrevoked(state: BlobState, key: str, by: str) -> None:
    """403 when the authority of a genuine URL (``by``, checked) was revoked at or after the
    URL was made (coffer_blob.grants)."""
    parsed = signing.parse_by(by)
    assert parsed is not None and state.revocations is not None
    tag, issued = parsed
    revoked_at = await state.revocations.revoked_at(state.storage, key.split("/", 1)[0], tag)
    if grants.refuses(revoked_at, issued):
        raise forbidden("This signed URL was revoked: the key or member that made it no longer acts.")


def _chosen_range(request: Request, info: ObjectInfo, headers: dict[str, str]) -> tuple[int, int, int]:
    """(start, end, status) of what to send; sets Content-Range and Content-Length in ``headers``."""
    start, end, status = 0, info.size, 200
    if request.method == "GET" and _range_applies(request, info):
        chosen = _parse_range(request.headers["range"], info.size)
        if chosen is not None:
            start, end = chosen
            status = 206
            headers["content-range"] = f"bytes {start}-{end - 1}/{info.size}"
    headers["content-length"] = str(end - start)
    return start, end, status


async def _chunks(reader: Reader, sent: Counter) -> AsyncIterator[bytes]:
    """The reader's chunks, each read in a worker thread; the reader is closed however it ends."""
    iterator = iter(reader)
    try:
        while True:
            chunk = await run_in_threadpool(next, iterator, None)
            if chunk is None:
                return
            yield chunk
            sent.inc(len(chunk))
    finally:
        reader.close()


def _representation_headers(info: ObjectInfo, cache: str) -> dict[str, str]:
    filename = info.key.rsplit("/", 1)[-1]
    headers = {
        "content-type": info.content_type,
        "etag": f'"{info.sha256}"',
        "last-modified": _http_date(info.last_modified),
        "accept-ranges": "bytes",
        "content-disposition": "inline; filename*=UTF-8''" + quote(filename, safe=""),
        "cache-control": cache,
    }
    return headers


@functools.lru_cache(maxsize=4096)  # objects are immutable: a few dates serve many downloads
def _http_date(value: datetime) -> str:
    return format_datetime(value, usegmt=True)


def _parse_date(value: str) -> datetime | None:
    """An HTTP-date, or None for one that cannot be read (RFC 9110 §13.1.3: ignored). Any of
    its three forms: asctime's has no zone and means GMT (§5.6.7), as every HTTP-date does."""
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):  # (a number past a C int: 500)
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _etags(value: str) -> list[tuple[bool, str]] | None:
    """An If-(None-)Match list as (weak, opaque-tag) pairs; None for ``*``."""
    if value.strip() == "*":
        return None
    tags = []
    for match in re.finditer(r'(W/)?("[^"]*")', value):
        tags.append((match.group(1) is not None, match.group(2)))
    return tags


def _preconditions(request: Request, info: ObjectInfo) -> int | None:
    """RFC 9110 §13.2.2, for GET and HEAD: 412, 304, or None to go on."""
    etag = f'"{info.sha256}"'
    if_match = request.headers.get("if-match")
    if if_match is not None:
        tags = _etags(if_match)
        if tags is not None and not any(not weak and tag == etag for weak, tag in tags):
            return 412
    elif (unmodified := request.headers.get("if-unmodified-since")) is not None:
        since = _parse_date(unmodified)
        if since is not None and info.last_modified > since:
            return 412
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None:
        tags = _etags(if_none_match)
        if tags is None or any(tag == etag for _weak, tag in tags):  # weak comparison
            return 304
    elif (modified := request.headers.get("if-modified-since")) is not None:
        since = _parse_date(modified)
        if since is not None and info.last_modified <= since:
            return 304
    return None


def _range_applies(request: Request, info: ObjectInfo) -> bool:
    """A Range header, and no If-Range naming another representation (strong comparison)."""
    if "range" not in request.headers:
        return False
    if_range = request.headers.get("if-range")
    if if_range is None:
        return True
    if_range = if_range.strip()
    if if_range.startswith(('"', "W/")):
        return if_range == f'"{info.sha256}"'
    since = _parse_date(if_range)
    return since is not None and since == info.last_modified


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """One byte range as ``[start, end)``, or None to send everything; 416 when unsatisfiable.

    None covers headers that are malformed, in another unit, or ask for several ranges.
    """
    unit, _, specs = value.partition("=")
    if unit.strip().lower() != "bytes":
        return None
    ranges = [spec.strip() for spec in specs.split(",") if spec.strip()]
    if len(ranges) != 1:
        return None
    match = _RANGE_SPEC.fullmatch(ranges[0])
    if match is None or match.group(0) == "-":
        return None
    first, last = match.group(1), match.group(2)
    if not first:  # suffix: the last N bytes
        length = _bound(last)
        if length == 0 or size == 0:
            raise range_not_satisfiable(size)
        return max(0, size - length), size
    start = _bound(first)
    if last and _bound(last) < start:
        return None
    if start >= size:
        raise range_not_satisfiable(size)
    end = size if not last else min(_bound(last) + 1, size)
    return start, end


def _bound(digits: str) -> int:
    """A range bound; too many digits to be a real offset (``int`` refuses over 4,300 of them,
    a 500 once) reads as 10**30, past any object."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 30 else 10**30
