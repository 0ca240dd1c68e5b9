"""Service-to-service calls: the internal HTTP client factory and error mapping (the token's
check lives in ``coffer_kit.internal_token``, free of aiohttp)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp
from yarl import URL

from coffer_kit.contract.errors import CofferError, internal, unavailable
from coffer_kit.internal_token import INTERNAL_TOKEN_HEADER, require_internal_token
from coffer_kit.tracing import client_trace_config, redact_url, tracing_enabled

# Re-exported: callers and tests name the token header and its check from here too.
__all__ = [
    "INTERNAL_TOKEN_HEADER",
    "TRANSPORT_ERRORS",
    "Attempt",
    "InternalClient",
    "internal_client",
    "relay_error",
    "require_internal_token",
    "transport_error",
]


class InternalClient:
    """A pooled ``aiohttp.ClientSession`` to one service, and that service's base URL."""

    __slots__ = ("base_url", "session")

    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = str(URL(base_url)).rstrip("/")
        self.session = session

    def url(self, path: str) -> URL:
        """``path`` (percent-encoded already) under the base URL, as it will be sent.

        Built as encoded text rather than through the session's ``base_url``: that would drop
        a path in the base URL, and both would resolve ``..`` in a caller-supplied id.
        """
        return URL(self.base_url + path, encoded=True)

    async def close(self) -> None:
        await self.session.close()

    async def __aenter__(self) -> InternalClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def internal_client(
    base_url: str,
    token: str,
    *,
    timeout: float = 10.0,
    read_timeout: float | None = None,
    max_connections: int = 200,
) -> InternalClient:
    """A client for another service: timeouts, pooled connections, the internal token.

    A plain aiohttp session: about half the CPU per call of httpx over aiohttp's transport
    (bench/results/anatomy.md). ``timeout`` bounds waiting for a pooled connection, connecting,
    and each wait for response bytes unless ``read_timeout`` is given; nothing bounds the whole
    call, so an upload streams for as long as its client sends. Traced when tracing is on
    (a client span per call, W3C ``traceparent`` sent along). Open it in a running event loop.
    """
    # One trace config: aiohttp builds each signal's parameters once per config and call, so
    # the reuse hooks ride on the tracing one when there is one.
    trace_config = (
        client_trace_config(url_filter=lambda url: redact_url(str(url)))
        if tracing_enabled()
        else aiohttp.TraceConfig()
    )
    _watch_reuse(trace_config)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=5.0),
        headers={INTERNAL_TOKEN_HEADER: token},
        timeout=aiohttp.ClientTimeout(
            total=None,
            connect=timeout,
            sock_connect=timeout,
            sock_read=read_timeout if read_timeout is not None else timeout,
        ),
        trace_configs=[trace_config],
        trust_env=False,
    )
    return InternalClient(base_url, session)


class Attempt:
    """Pass as ``trace_request_ctx``: tells whether the call went out on a pooled connection."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


def _watch_reuse(trace: aiohttp.TraceConfig) -> None:
    """Have ``trace`` tell an :class:`Attempt` whether its call reused a pooled connection."""

    async def on_reuse(_session: aiohttp.ClientSession, context: Any, _params: Any) -> None:
        attempt = getattr(context, "trace_request_ctx", None)
        if isinstance(attempt, Attempt):
            attempt.reused = True

    async def on_new(_session: aiohttp.ClientSession, context: Any, _params: Any) -> None:
        attempt = getattr(context, "trace_request_ctx", None)
        if isinstance(attempt, Attempt):
            attempt.reused = False

    trace.on_connection_reuseconn.append(on_reuse)
    trace.on_connection_create_start.append(on_new)


# What a call that never got a whole answer raises: connection failures, timeouts, a body
# that failed while being sent, a malformed or cut-off response.
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)


def relay_error(status: int, headers: Mapping[str, str], body: bytes, service: str) -> CofferError:
    """Turn another service's error envelope into our own error (status and code kept)."""
    if status >= 500 and status != 503:
        return internal(f"The {service} service failed.")
    try:
        error: dict[str, Any] = json.loads(body)["error"]
        return CofferError(
            status,
            error["code"],
            error["message"],
            details=error.get("details"),
            headers={"Retry-After": headers["retry-after"]} if "retry-after" in headers else None,
        )
    except (ValueError, KeyError, TypeError):
        if status == 503:
            return unavailable(f"The {service} service is unavailable.")
        return internal(f"The {service} service answered {status}.")


def transport_error(service: str) -> CofferError:
    """503 for a service that could not be reached or did not answer in time."""
    return unavailable(f"The {service} service is unavailable.", retry_after=1)
