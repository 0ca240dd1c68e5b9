"""What every typed internal client shares: request-id propagation and error mapping."""

from __future__ import annotations

import errno
import json as jsonlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import aiohttp
from aiohttp.http import RawResponseMessage
from cachetools import TLRUCache
from pydantic import BaseModel

from coffer_edge.actor import actor_header
from coffer_kit.contract.wire import ACTOR_HEADER
from coffer_kit.internal import TRANSPORT_ERRORS, Attempt, InternalClient, relay_error, transport_error

log = logging.getLogger("coffer.edge.clients")
K = TypeVar("K")
V = TypeVar("V")


def deadline_cache(maxsize: int) -> TLRUCache[K, tuple[V, float]]:
    """Answers kept with their own deadline (``time.monotonic``): (answer, deadline) pairs."""
    return TLRUCache(maxsize=maxsize, ttu=lambda _k, v, _now: v[1], timer=time.monotonic)


def reuse_seconds(cache_seconds: float, expires: str | float | None) -> float:
    """How long an answer about a key may be reused: ``cache_seconds``, never past the key's own
    expiry (ISO 8601 or Unix seconds; None: none)."""
    if expires is None:
        return cache_seconds
    unix = datetime.fromisoformat(expires).timestamp() if isinstance(expires, str) else expires
    return min(cache_seconds, unix - time.time())


# Stale pooled connections one call may meet in a row (a restarted service leaves every
# connection to it stale); each one that fails is dropped from the pool.
MAX_STALE_RETRIES = 3


def never_reached(exc: BaseException, attempt: Attempt) -> bool:
    """Whether a failed call provably never reached the server, so any method may be resent.

    That is a connection taken from the pool that the server had already closed: it ends
    before a single byte of a response (a clean close, or a reset of what we wrote). uvicorn
    closes a connection only between requests (keep-alive timeout, shutdown, or after an
    error) and answers every request it has read, so on such a connection our request was
    never read. A fresh connection, or a failure after part of a response, proves nothing:
    those are never resent.
    """
    if not attempt.reused:
        return False
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return not isinstance(exc.message, RawResponseMessage)  # no part of a response came
    if isinstance(exc, aiohttp.ClientOSError):
        return exc.errno in (errno.ECONNRESET, errno.EPIPE)
    return False


Params = Mapping[str, str | int | float]
M = TypeVar("M", bound=BaseModel)


class ServiceClient:
    """A thin typed wrapper over an internal client (one aiohttp session)."""

    service = "internal"

    def __init__(self, http: InternalClient) -> None:
        self.http = http

    async def request(
        self,
        method: str,
        path: str,
        *,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        params: Params | None = None,
        json: Any = None,
        content: AsyncIterator[bytes] | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """Send a request and answer the body of a success; failures become our own errors.

        Transport failures and timeouts become 503, error envelopes are relayed. ``content`` is
        sent as it is produced (chunked), never gathered; ``timeout`` bounds the whole call in
        place of the client's own timeouts. A call that met a stale pooled connection is resent
        (``never_reached``) unless its body was a stream, which cannot be sent twice.
        """
        sent = dict(headers) if headers else {}
        if request_id:
            sent["x-request-id"] = request_id
        if method != "GET" and (actor := actor_header()) is not None:
            sent[ACTOR_HEADER] = actor
        options: dict[str, Any] = {}
        if timeout is not None:
            options["timeout"] = aiohttp.ClientTimeout(total=timeout)
        retries = 0
        while True:
            attempt = Attempt()
            try:
                async with self.http.session.request(
                    method,
                    self.http.url(path),
                    headers=sent,
                    params=params,
                    json=json,
                    data=content,
                    allow_redirects=False,
                    trace_request_ctx=attempt,
                    **options,
                ) as response:
                    body = await response.read()
                break
            except TRANSPORT_ERRORS as exc:
                if content is None and retries < MAX_STALE_RETRIES and never_reached(exc, attempt):
                    retries += 1
                    log.info("resending a call a stale pooled connection refused", extra={"error": repr(exc)})
                    continue
                raise transport_error(self.service) from exc
        if response.status >= 400:
            raise relay_error(response.status, response.headers, body, self.service)
        return body

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return jsonlib.loads(await self.request(method, path, **kwargs))

    async def call(self, answer: type[M], method: str, path: str, **kwargs: Any) -> M:
        """Send a request and parse the body of a success as ``answer``."""
        return answer.model_validate_json(await self.request(method, path, **kwargs))
