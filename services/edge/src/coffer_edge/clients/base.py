"""What every typed internal client shares: request-id propagation and error mapping."""

from __future__ import annotations

from typing import Any

import httpx

from coffer_kit.internal import relay_error, transport_error


class ServiceClient:
    """A thin typed wrapper over an internal httpx client."""

    service = "internal"

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def request(
        self, method: str, url: str, *, request_id: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        """Send a request; transport failures become 503, error envelopes are relayed."""
        headers = dict(kwargs.pop("headers", None) or {})
        if request_id:
            headers["x-request-id"] = request_id
        try:
            response = await self.http.request(method, url, headers=headers, **kwargs)
        except httpx.TransportError as exc:
            raise transport_error(self.service) from exc
        if response.status_code >= 400:
            raise relay_error(response, self.service)
        return response

    async def json(self, method: str, url: str, **kwargs: Any) -> Any:
        return (await self.request(method, url, **kwargs)).json()
