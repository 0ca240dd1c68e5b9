"""What the sync and async clients share: configuration, retry policy, request and response handling,
and the streamed multipart body."""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import quote

import httpx
import pydantic_core
import tenacity
from pydantic import BaseModel, ValidationError

from coffer_client import errors
from coffer_client._options import CHUNK, MAX_FILE_BYTES, UNSET, ProgressCallback, RetryPolicy

__all__ = ["CHUNK", "MAX_FILE_BYTES", "UNSET", "ProgressCallback", "RetryPolicy"]

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
USER_AGENT = "coffer-client-python/0.1"
# The most of an API answer (JSON, decoded) the client holds: the largest the service gives,
# a page of 1,000 assets with their metadata, is a few MiB; a larger answer is not Coffer's
# (a 200 MB one took 1 GB of memory before this bound).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# The most batches ``empty_trash`` asks for (100 assets each, docs/api.md "The trash"): a million
# assets, then ``incomplete``; a service answering "more remain" for ever is stopped there.
MAX_EMPTY_ROUNDS = 10_000
# Sent on every request, whatever httpx client the caller gave: no content coding is asked
# for, and one that comes anyway is refused (``encoded``).
IDENTITY = {"accept-encoding": "identity"}

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Settings:
    base_url: str
    api_key: str
    organization_id: str | None

    def __repr__(self) -> str:  # the key never appears in a repr, a log or a traceback
        return f"Settings(base_url={self.base_url!r}, organization_id={self.organization_id!r})"


def settings_from(base_url: str | None, api_key: str | None, organization_id: str | None) -> Settings:
    """Arguments first, then COFFER_URL, COFFER_API_KEY and COFFER_ORGANIZATION_ID."""
    url = base_url or os.environ.get("COFFER_URL")
    key = api_key or os.environ.get("COFFER_API_KEY")
    org = organization_id or os.environ.get("COFFER_ORGANIZATION_ID") or None
    if not url:
        raise errors.ConfigurationError("No Coffer URL: pass base_url or set COFFER_URL.")
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise errors.ConfigurationError(f"The Coffer URL {url!r} is not a URL: {exc}") from None
    if not key:
        raise errors.ConfigurationError("No API key: pass api_key or set COFFER_API_KEY.")
    key = key.strip()  # (a key file written with a line break at its end)
    if not key.isascii() or not key.isprintable() or " " in key:
        # Never repeated here: the message reaches terminals, logs and --json output.
        raise errors.ConfigurationError(
            "The API key holds a character no API key has (a space, a line break or a character"
            " outside ASCII): copy it again."
        )
    return Settings(base_url=url.rstrip("/"), api_key=key, organization_id=org)


def auth_headers(s: Settings) -> dict[str, str]:
    headers = {"x-api-key": s.api_key}
    if s.organization_id:
        headers["x-organization-id"] = s.organization_id
    return headers


IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH"})
# PATCH counts as idempotent here: Coffer's PATCH sets fields to given values, so sending it twice
# leaves the same state as once.


def is_retryable(exc: BaseException, *, method: str, replayable: bool, delivered: bool = True) -> bool:
    """Whether trying again can neither duplicate nor corrupt anything.

    ``delivered``: whether the whole request may have reached the service (for a streamed body,
    whether its last byte was handed to the connection). A 503 does not prove that nothing was
    done: edge answers 503 when metadata did not answer the commit of an upload, which it may
    have made (services/edge ``_upload``). So a POST the service may have received in full is
    never sent again; one it answered, or that broke, before the body was out is.
    """
    if not replayable or errors.waits_too_long(exc):
        return False
    if isinstance(exc, errors.RateLimited):
        return True  # edge's rate limit refuses a request before its handler runs (edge deps.py)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return True  # nothing reached the service
    if not isinstance(exc, errors.Unavailable | httpx.TransportError):
        return False
    return method in IDEMPOTENT or not delivered


class Delivery:
    """Follows one request's streamed body: ``complete`` once its last chunk was sent."""

    def __init__(self) -> None:
        self.complete = True  # a request without a streamed body is sent in one piece

    def track(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        self.complete = False  # now, not when (or if) httpx starts reading the body

        def sending() -> Iterator[bytes]:
            yield from chunks
            # httpcore asks for a chunk only once the one before was written to the socket.
            self.complete = True

        return sending()

    def atrack(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        self.complete = False

        async def sending() -> AsyncIterator[bytes]:
            async for chunk in chunks:
                yield chunk
            self.complete = True

        return sending()


def retrying_kwargs(
    policy: RetryPolicy, *, method: str, replayable: bool, delivery: Delivery | None = None
) -> dict[str, Any]:
    """Arguments for tenacity's Retrying / AsyncRetrying."""
    backoff = tenacity.wait_exponential_jitter(multiplier=policy.initial_wait, max=policy.max_wait)

    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = getattr(exc, "retry_after", None) or 0.0
        return float(min(max(asked, backoff(state)), max(policy.max_wait, asked)))

    def retry(exc: BaseException) -> bool:
        delivered = delivery is None or delivery.complete
        return is_retryable(exc, method=method, replayable=replayable, delivered=delivered)

    return {
        "stop": tenacity.stop_after_attempt(max(1, policy.attempts)),
        "wait": wait,
        "retry": tenacity.retry_if_exception(retry),
        "reraise": True,
    }


class LazyTLSTransport(httpx.BaseTransport):
    """httpx's own transport, one pool for http and one for https made on first use. Building the
    https one loads the CA bundle, ~40 ms of CPU (more on a busy machine) that a command line would
    pay at every start even against a plain-http service."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        # verify=False only spares the CA bundle: an http:// origin never speaks TLS.
        self._plain = httpx.HTTPTransport(verify=False, limits=limits)
        self._tls: httpx.HTTPTransport | None = None
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            return self._plain.handle_request(request)
        with self._lock:
            if self._tls is None:
                self._tls = httpx.HTTPTransport(limits=self._limits)
        return self._tls.handle_request(request)

    def close(self) -> None:
        self._plain.close()
        if self._tls is not None:
            self._tls.close()


class AsyncLazyTLSTransport(httpx.AsyncBaseTransport):
    """``LazyTLSTransport`` for ``httpx.AsyncClient``."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._plain = httpx.AsyncHTTPTransport(verify=False, limits=limits)
        self._tls: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            return await self._plain.handle_async_request(request)
        if self._tls is None:  # one event loop: no await between the test and the assignment
            self._tls = httpx.AsyncHTTPTransport(limits=self._limits)
        return await self._tls.handle_async_request(request)

    async def aclose(self) -> None:
        await self._plain.aclose()
        if self._tls is not None:
            await self._tls.aclose()


def transport_error(exc: httpx.TransportError, method: str, url: str) -> errors.TransportError:
    what = type(exc).__name__
    return errors.TransportError(f"{method} {url} failed: {what}: {exc}".rstrip(": "), code="transport")


def unsendable(exc: httpx.InvalidURL, url: str) -> errors.CofferError:
    """A URL httpx refuses to send (a control character, a broken host): the caller's, or one
    the service gave (an upload token's, a signed URL)."""
    return errors.CofferError(f"{url!r} is not a URL the client can send: {exc}", code="bad_response")


def segment(value: str) -> str:
    """An id as one segment of an API path: quoted whole, so that neither a control character
    (which httpx refuses) nor a ``/`` or ``..`` (another path) goes into the URL as it is."""
    return quote(value, safe="")


def overdue(response: httpx.Response, seconds: float) -> httpx.ReadTimeout:
    """An answer whose bytes came too slowly to end within the deadline: a read timeout (so it
    is retried as one), though no single read waited the timeout."""
    message = f"the answer did not arrive whole within {seconds:g} s"
    return httpx.ReadTimeout(message, request=response.request)


def encoded(response: httpx.Response) -> errors.CofferError | None:
    """An answer in a content coding, which the client never asks for (``accept-encoding:
    identity``): a small gzip body can decode to gigabytes, and a download's length would not
    be the asset's."""
    coding = response.headers.get("content-encoding", "identity").strip().lower()
    if coding in ("", "identity"):
        return None
    return errors.CofferError(f"The service's answer is {coding}-encoded: not Coffer's.", code="bad_response")


def too_large(read: int) -> errors.CofferError:
    return errors.CofferError(
        f"The service's answer is larger than {MAX_RESPONSE_BYTES} bytes ({read} read): not Coffer's.",
        code="bad_response",
    )


def check(response: httpx.Response) -> httpx.Response:
    if response.is_error:
        raise errors.from_response(response)
    if response.is_redirect or 300 <= response.status_code < 400:
        # Never followed, whatever the httpx client (the caller's own may follow redirects):
        # the key is a header of every request, and httpx strips only Authorization on the way
        # to another host. Coffer's API answers no redirect.
        where = response.headers.get("location", "")
        to = f" to {where}" if where else ""
        raise errors.CofferError(
            f"The service answered {response.status_code} (a redirect{to}): not followed,"
            " so the key goes nowhere else; Coffer's API never redirects.",
            status=response.status_code,
            code="bad_response",
        )
    return response


def parse(model: type[M], response: httpx.Response) -> M:
    """The answer as ``model``; one that is not (no JSON, a field missing) is ``bad_response``."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise errors.CofferError(
            f"The service's answer is not Coffer's: {invalid(exc)}", code="bad_response"
        ) from None


def invalid(exc: ValidationError) -> str:
    """A validation error in one short line: how many, and the first. Never the whole error,
    which repeats every failure with its input."""
    count = exc.error_count()
    # (errors() makes a dict of each: only for a count the models' fail_fast keeps small)
    first = (
        exc.errors(include_url=False, include_context=False, include_input=False)[0] if count <= 100 else None
    )
    where = ".".join(str(part) for part in first["loc"]) if first else ""
    said = f": {where + ': ' if where else ''}{first['msg']}" if first else ""
    return f"{count} error{'s' if count != 1 else ''} in {exc.title}{said}"[:300]


def document(response: httpx.Response) -> Any:
    """An answer's JSON, through the parser pydantic validates with: its nesting is bounded
    (``json.loads`` recursed until RecursionError on ``[[[…]]]`` 100,000 deep), and a body that is
    no JSON is ``bad_response``."""
    try:
        return pydantic_core.from_json(response.content)
    except ValueError as exc:
        message = f"The service's answer is not Coffer's: {exc}"
        raise errors.CofferError(message, code="bad_response") from None


class Cursors:
    """The cursors a listing was given, kept as digests (a hostile service's may be long): one
    given again, however many pages later, or a page of nothing that goes on, would have the
    listing go round for ever (Coffer gives a next cursor only after a full page)."""

    def __init__(self) -> None:
        self._given: set[bytes] = set()

    def next(self, cursor: str, *, listed: int) -> str:
        """``cursor``, the next page's, unless the listing does not move on with it."""
        digest = hashlib.sha256(cursor.encode()).digest()
        if digest in self._given or not listed:
            raise errors.CofferError(
                "The service's listing does not move on (a cursor came back, or an empty page went on).",
                code="bad_response",
            )
        self._given.add(digest)
        return cursor


def partial_file(target: Path) -> tuple[int, str]:
    """A new file beside ``target`` to download into, open for writing, and its path. Made with
    mode 0666 less the umask, as ``cp`` and ``curl -o`` make a file (mkstemp's is always 0600,
    which the finished file kept); ``O_EXCL``: never an existing file or a link. Its name is
    short whatever the target's: ``.NAME.….part`` made a valid name of 233-255 bytes too long."""
    tmp = target.parent / f".coffer-{secrets.token_hex(8)}.part"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    return os.open(tmp, flags, 0o666), str(tmp)


def clean_params(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def filter_params(
    tags: Sequence[str], any_tag: bool, meta: Mapping[str, object] | None, recursive: bool
) -> dict[str, Any]:
    """A listing's issue-50 query parameters."""
    params: dict[str, Any] = {}
    if tags:
        params["tag"] = list(tags)
        if any_tag:
            params["tagMatch"] = "any"
    for key, value in (meta or {}).items():
        params[f"meta[{key}]"] = json.dumps(value) if isinstance(value, bool | int | float) else str(value)
    if recursive:
        params["recursive"] = "true"
    return params


def describe_fields(metadata: Mapping[str, object] | None, tags: Sequence[str]) -> dict[str, str]:
    """An upload's ``metadata`` and ``tags`` form fields."""
    fields: dict[str, str] = {}
    if metadata:
        fields["metadata"] = json.dumps(dict(metadata))
    if tags:
        fields["tags"] = ",".join(tags)
    return fields


def patch_body(name: str | None, parent_field: str, parent: object, **more: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if parent is not UNSET:
        body[parent_field] = parent
    body.update({field: value for field, value in more.items() if value is not None})
    if not body:
        raise ValueError("Nothing to change: give a new name, a new parent, or both.")
    return body


# --- the multipart body, streamed --------------------------------------------------------------


def _quote(value: str) -> str:
    # The HTML5 form encoding (what browsers and httpx send): escape quote, CR and LF.
    return value.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


@dataclass
class Source:
    """The file to upload: where to read it from, its size, and whether it can be read again."""

    name: str
    open: Callable[[], IO[bytes]]  # a fresh reader positioned at the start of the data
    size: int | None
    replayable: bool
    close_after: bool


def source_for(file: str | os.PathLike[str] | IO[bytes], filename: str | None) -> Source:
    if isinstance(file, str | os.PathLike):
        path = Path(file)
        return Source(filename or path.name, lambda: path.open("rb"), path.stat().st_size, True, True)
    name = filename or Path(str(getattr(file, "name", "") or "file")).name
    start: int | None = None
    size: int | None = None
    try:
        if file.seekable():
            start = file.tell()
            size = file.seek(0, os.SEEK_END) - start
            file.seek(start)
    except (OSError, ValueError):
        start = None

    def reopen() -> IO[bytes]:
        if start is not None:
            file.seek(start)
        return file

    return Source(name, reopen, size, start is not None, False)


@dataclass
class Multipart:
    """A multipart/form-data body whose file part is read from disk chunk by chunk."""

    source: Source
    fields: dict[str, str]
    content_type: str | None = None

    def __post_init__(self) -> None:
        self.boundary = secrets.token_hex(16)
        b = self.boundary
        head = b"".join(
            f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n'.encode() + v.encode() + b"\r\n"
            for k, v in self.fields.items()
        )
        ctype = self.content_type or mimetypes.guess_type(self.source.name)[0] or "application/octet-stream"
        head += (
            f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="{_quote(self.source.name)}"\r\n'
            f"Content-Type: {ctype}\r\n\r\n"
        ).encode()
        self.head = head
        self.tail = f"\r\n--{b}--\r\n".encode()

    @property
    def headers(self) -> dict[str, str]:
        h = {"content-type": f"multipart/form-data; boundary={self.boundary}"}
        if self.source.size is not None:
            h["content-length"] = str(len(self.head) + self.source.size + len(self.tail))
        return h
