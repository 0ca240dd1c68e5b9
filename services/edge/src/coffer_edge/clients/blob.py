"""blob client: streams upload bytes, deletes objects, signs CDN URLs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

from coffer_edge.clients.base import ServiceClient
from coffer_kit.wire import Deleted, SignIn, SignOut, Stored, VisibilityIn, VisibilityOut


class BlobClient(ServiceClient):
    service = "blob"

    async def upload(
        self,
        org_id: str,
        asset_id: str,
        body: AsyncIterator[bytes],
        content_type: str,
        *,
        request_id: str,
        visibility: str = "public",
        fixed: bool = False,
    ) -> Stored:
        """Stream a multipart body to blob; answers what it stored, and the form fields.

        ``visibility`` is what the object becomes unless the form's ``visibility`` field says
        otherwise; ``fixed``: whatever the form says."""
        return await self.call(
            Stored,
            "POST",
            f"/internal/v1/uploads/{org_id}/{asset_id}",
            params={"visibility": visibility, "fixed": "true" if fixed else "false"},
            content=body,
            headers={"content-type": content_type},
            request_id=request_id,
        )

    async def delete_object(self, key: str, *, request_id: str | None = None) -> None:
        await self.call(
            Deleted, "DELETE", f"/internal/v1/objects/{quote(key, safe='/')}", request_id=request_id
        )

    async def delete_prefix(self, org_id: str, asset_id: str, *, request_id: str | None = None) -> None:
        await self.call(
            Deleted, "DELETE", f"/internal/v1/prefixes/{org_id}/{asset_id}", request_id=request_id
        )

    async def set_visibility(self, key: str, visibility: str, *, request_id: str) -> None:
        """Make the object private or public at the CDN (its next read sees it)."""
        await self.call(
            VisibilityOut,
            "PUT",
            f"/internal/v1/visibility/{quote(key, safe='/')}",
            json=VisibilityIn.model_validate({"visibility": visibility}).model_dump(by_alias=True),
            request_id=request_id,
        )

    async def sign(self, key: str, expires_in: int, *, request_id: str) -> str:
        body = SignIn(key=key, expires_in=expires_in)
        signed = await self.call(
            SignOut, "POST", "/internal/v1/sign", json=body.model_dump(by_alias=True), request_id=request_id
        )
        return signed.url
