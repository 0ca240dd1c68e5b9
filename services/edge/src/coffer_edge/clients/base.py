"""What every typed internal client shares: request-id propagation and error mapping."""

from __future__ import annotations

import json as jsonlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from coffer_kit.internal import TRANSPORT_ERRORS, InternalClient, relay_error, transport_error

Params = Mapping[str, str | int | float]


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
        place of the client's own timeouts.
        """
        sent = dict(headers) if headers else {}
        if request_id:
            sent["x-request-id"] = request_id
        options: dict[str, Any] = {}
        if timeout is not None:
            options["timeout"] = aiohttp.ClientTimeout(total=timeout)
        try:
            async with self.http.session.request(
                method,
                self.http.url(path),
                headers=sent,
                params=params,
                json=json,
                data=content,
                allow_redirects=False,
                **options,
            ) as response:
                body = await response.read()
        except TRANSPORT_ERRORS as exc:
            raise transport_error(self.service) from exc
        if response.status >= 400:
            raise relay_error(response.status, response.headers, body, self.service)
        return body

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return jsonlib.loads(await self.request(method, path, **kwargs))
