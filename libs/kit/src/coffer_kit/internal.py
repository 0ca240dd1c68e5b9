"""Service-to-service calls: the internal token, and the httpx client factory."""

from __future__ import annotations

import hmac
from typing import Any

import httpx
from fastapi import Request
from httpx_aiohttp import AiohttpTransport

from coffer_kit.errors import CofferError, unavailable
from coffer_kit.tracing import tracing_enabled

INTERNAL_TOKEN_HEADER = "x-coffer-internal-token"


async def require_internal_token(request: Request) -> None:
    """Dependency for internal routers: refuse any caller without the shared token."""
    expected: str = request.app.state.settings.internal_token.get_secret_value()
    sent = request.headers.get(INTERNAL_TOKEN_HEADER, "")
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CofferError(401, "unauthorized", "Internal endpoint: missing or wrong internal token.")


def internal_client(
    base_url: str,
    token: str,
    *,
    timeout: float = 10.0,
    read_timeout: float | None = None,
    max_connections: int = 200,
) -> httpx.AsyncClient:
    """An AsyncClient for another service: timeouts, pooled connections, the internal token.

    Requests go through aiohttp (httpx-aiohttp's transport): the same httpx API at a quarter
    of the CPU per call of httpx's own pool (bench/results/anatomy.md). Traced when tracing
    is on, so W3C ``traceparent`` travels with every call.
    """
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=50)
    transport: httpx.AsyncBaseTransport = AiohttpTransport(limits=limits, trust_env=False)
    if tracing_enabled():
        from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransport

        transport = AsyncOpenTelemetryTransport(transport)
    return httpx.AsyncClient(
        base_url=base_url,
        headers={INTERNAL_TOKEN_HEADER: token},
        timeout=httpx.Timeout(timeout, read=read_timeout if read_timeout is not None else timeout),
        transport=transport,
    )


def relay_error(response: httpx.Response, service: str) -> CofferError:
    """Turn another service's error envelope into our own error (status and code kept)."""
    if response.status_code >= 500 and response.status_code != 503:
        return CofferError(500, "internal", f"The {service} service failed.")
    try:
        body: dict[str, Any] = response.json()["error"]
        return CofferError(
            response.status_code,
            body["code"],
            body["message"],
            details=body.get("details"),
            headers={"Retry-After": response.headers["retry-after"]}
            if "retry-after" in response.headers
            else None,
        )
    except (ValueError, KeyError, TypeError):
        if response.status_code == 503:
            return unavailable(f"The {service} service is unavailable.")
        return CofferError(500, "internal", f"The {service} service answered {response.status_code}.")


def transport_error(service: str) -> CofferError:
    """503 for a service that could not be reached or did not answer in time."""
    return unavailable(f"The {service} service is unavailable.", retry_after=1)
