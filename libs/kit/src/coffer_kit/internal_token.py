"""The internal token every service-to-service call carries, and the dependency that checks it.

Apart from ``coffer_kit.internal`` (the HTTP client, aiohttp) so that a service which only
answers internal calls (auth, metadata, blob) never imports a client it does not use.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from coffer_kit.contract.errors import unauthorized
from coffer_kit.state import ServiceState, request_state

INTERNAL_TOKEN_HEADER = "x-coffer-internal-token"


async def require_internal_token(request: Request) -> None:
    """Dependency for internal routers: refuse any caller without the shared token."""
    expected = request_state(request, ServiceState).settings.internal_secret()
    sent = request.headers.get(INTERNAL_TOKEN_HEADER, "")
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        raise unauthorized("Internal endpoint: missing or wrong internal token.")
