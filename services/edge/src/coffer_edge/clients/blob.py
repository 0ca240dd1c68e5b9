"""blob client: streams upload bytes, deletes objects, signs CDN URLs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from coffer_edge.clients.base import ServiceClient


class BlobClient(ServiceClient):
    service = "blob"

    async def upload(
        self, org_id: str, asset_id: str, body: AsyncIterator[bytes], content_type: str, *, request_id: str
    ) -> Any:
        """Stream a multipart body to blob; answers key, size, sha256, mimeType and the form fields."""
        return await self.json(
            "POST",
            f"/internal/v1/uploads/{org_id}/{asset_id}",
            content=body,
            headers={"content-type": content_type},
            request_id=request_id,
        )

    async def delete_object(self, key: str, *, request_id: str | None = None) -> None:
        await self.request("DELETE", f"/internal/v1/objects/{quote(key, safe='/')}", request_id=request_id)

    async def delete_prefix(self, org_id: str, asset_id: str, *, request_id: str | None = None) -> None:
        await self.request("DELETE", f"/internal/v1/prefixes/{org_id}/{asset_id}", request_id=request_id)

    async def sign(self, key: str, expires_in: int, *, request_id: str) -> str:
        body = await self.json(
            "POST", "/internal/v1/sign", json={"key": key, "expiresIn": expires_in}, request_id=request_id
        )
        return str(body["url"])
