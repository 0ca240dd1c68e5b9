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

import functools
import re
import time
from collections.abc import AsyncIterator
from datetime import datetime
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute
from prometheus_client import Counter
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.types import ASGIApp, Receive, Scope, Send

from coffer_blob import keys, signing
from coffer_blob.config import Settings
from coffer_blob.deps import BlobState, blob_state
from coffer_blob.observe import DOWNLOAD_BYTES
from coffer_blob.storage import ObjectInfo, Reader
from coffer_kit.errors import CofferError, forbidden, not_found, precondition_failed, range_not_satisfiable
from coffer_kit.state import state_of

router = APIRouter()


@functools.lru_cache(maxsize=4)
def public_cache(max_age: int) -> str:
    """Cache-Control of a public answer (COFFER_CDN_PUBLIC_MAX_AGE; keys never change content)."""
    return f"public, max-age={max_age}, immutable"


PUBLIC_CACHE = public_cache(31_536_000)  # the default
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
async def download(request: Request) -> Response:
    """Serve the object under ``key``: public, or signed with ``expires`` and ``signature``."""
    # No parameters or dependencies for FastAPI to resolve on this, the busiest route:
    # resolving them cost about a fifth of a small download's CPU.
    key: str = request.path_params["key"]
    state = blob_state(request)
    storage = state.storage
    if request.method == "OPTIONS":
        return Response(status_code=204, headers=_PREFLIGHT)
    if not keys.is_valid_key(key):
        raise not_found("No such object.")
    cache, access = _access(request.query_params, key, state.settings)

    if storage.inline_read_bytes:
        # On the event loop: a page-cache read of a few KiB costs less than a worker-thread
        # trip (bench/results/anatomy.md); the bound keeps a cold read short.
        found = storage.read_small(key, storage.inline_read_bytes)
    else:
        found = await run_in_threadpool(storage.read_small, key, SMALL_OBJECT_BYTES)
    info, body = _servable(found, access)
    headers = _representation_headers(info, cache)

    precondition = _preconditions(request, info)
    if precondition == 412:
        raise precondition_failed()
    if precondition == 304:
        # RFC 9110 §15.4.5: the validators and caching headers a 200 would have had.
        kept = ("etag", "last-modified", "cache-control")
        return Response(status_code=304, headers={name: headers[name] for name in kept})

    start, end, status = _chosen_range(request, info, headers)
    if request.method == "HEAD":
        return Response(status_code=status, headers=headers)
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


def _servable(found: tuple[ObjectInfo, bytes | None] | None, access: str) -> tuple[ObjectInfo, bytes | None]:
    """What was read, if this request may have it: a private object without a valid signature
    answers exactly as a key that does not exist."""
    if found is None or (found[0].private and access == "public"):
        raise not_found("No such object.")
    return found


def _access(query: QueryParams, key: str, settings: Settings) -> tuple[str, str]:
    """(Cache-Control, access label): public, or signed once the signature checks out (else 403)."""
    if "expires" not in query and "signature" not in query:
        return public_cache(settings.cdn_public_max_age), "public"
    expires, sent = query.getlist("expires"), query.getlist("signature")
    if len(expires) != 1 or len(sent) != 1:
        raise forbidden("A signed URL carries exactly one 'expires' and one 'signature'.")
    assert settings.signing_secret is not None
    now = time.time()
    secret = settings.signing_secret.get_secret_value().encode()
    refusal = signing.check(secret, key, expires[0], sent[0], now=now)
    if refusal:
        raise forbidden(refusal)
    return f"private, max-age={max(0, int(int(expires[0]) - now))}", "signed"


# A request carrying any of these is left to the declared route (conditional or range).
_CONDITIONAL = frozenset(
    (b"range", b"if-range", b"if-match", b"if-none-match", b"if-modified-since", b"if-unmodified-since")
)
_ROUTE = next(route for route in router.routes if isinstance(route, APIRoute))


class FastDownloads:
    """The plain download, a GET of a small object with no range or condition, public or
    signed, answered without FastAPI (issue 16: CPU per CDN request).

    It sits inside the request-id, access-log and CDN-headers middleware, so those see the
    request as before (``scope["route"]`` is the declared route), and answers with the same
    functions as :func:`download`. Everything else goes to the app: other methods, conditional
    and range requests, objects past the driver's inline read, and any refusal or failure
    (bad key, bad signature, no such object, storage down), which the declared route then
    answers in the contract's envelope. Nothing is sent before the answer is whole, so
    handing a request over is always possible.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            try:
                answer = self._answer(scope)
            except Exception:  # noqa: BLE001 - the declared route meets it again, answers and logs it
                answer = None
            if answer is not None:
                headers, body = answer
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _answer(scope: Scope) -> tuple[list[tuple[bytes, bytes]], bytes] | None:
        """(headers, body) of the 200, or None to leave the request to the app."""
        key = scope["path"][1:]
        if any(name in _CONDITIONAL for name, _ in scope["headers"]) or not keys.is_valid_key(key):
            return None
        state = state_of(scope["app"], BlobState)
        storage = state.storage
        if not storage.inline_read_bytes:
            return None
        query = scope["query_string"]
        try:
            cache, access = (
                _access(QueryParams(query), key, state.settings)
                if query
                else (public_cache(state.settings.cdn_public_max_age), "public")
            )
        except CofferError:
            return None
        found = storage.read_small(key, storage.inline_read_bytes)
        if found is None:
            return None
        info, body = found
        if body is None or (info.private and access == "public"):
            return None
        headers = _representation_headers(info, cache)
        headers["content-length"] = str(len(body))
        scope["route"], scope["path_params"] = _ROUTE, {"key": key}
        _SENT[access].inc(len(body))
        raw = [(name.encode(), value.encode("latin-1")) for name, value in headers.items()]
        return raw + CDN_HEADERS, body


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
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else None


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
    match = _RANGE_SPEC.match(ranges[0])
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
