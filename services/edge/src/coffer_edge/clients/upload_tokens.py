"""auth's upload-token API: mint (by hash), resolve a token's hash to its grant, claim, release."""

from __future__ import annotations

from coffer_edge.clients.base import ServiceClient
from coffer_kit.wire import Done, TokenClaim, UploadGrant, UploadTokenCreated, UploadTokenIn, UploadTokenPlace


class UploadTokenClient(ServiceClient):
    service = "auth"

    async def create(self, org_id: str, token: UploadTokenIn, *, request_id: str) -> UploadTokenCreated:
        """Store a token's hash and scope."""
        return await self.call(
            UploadTokenCreated,
            "POST",
            f"/internal/v1/orgs/{org_id}/upload-tokens",
            json=token.model_dump(by_alias=True),
            request_id=request_id,
        )

    async def place(self, org_id: str, token_id: str, *, request_id: str) -> UploadTokenPlace:
        """Where the token's upload goes; 404 for another organization's."""
        path = f"/internal/v1/orgs/{org_id}/upload-tokens/{token_id}"
        return await self.call(UploadTokenPlace, "GET", path, request_id=request_id)

    async def revoke(self, org_id: str, token_id: str, *, request_id: str) -> None:
        """Delete one of the organization's tokens; 404 for any other."""
        await self.call(
            Done, "DELETE", f"/internal/v1/orgs/{org_id}/upload-tokens/{token_id}", request_id=request_id
        )

    async def grant(self, token_hash: str, *, request_id: str) -> UploadGrant:
        """The grant of a live token; 401 for an unknown, expired or used one. Never cached:
        a token is good for one upload only."""
        return await self.call(
            UploadGrant,
            "GET",
            "/internal/v1/upload-tokens/grant",
            headers={"x-token-hash": token_hash},
            request_id=request_id,
        )

    async def claim(self, token_id: str, asset_id: str, *, request_id: str) -> None:
        """Hold the token for this upload; 401 if another upload holds or spent it."""
        await self.call(
            Done,
            "POST",
            f"/internal/v1/upload-tokens/{token_id}/claim",
            json=TokenClaim(asset_id=asset_id).model_dump(by_alias=True),
            request_id=request_id,
        )

    async def release(self, token_id: str, asset_id: str, *, request_id: str) -> None:
        await self.call(
            Done, "DELETE", f"/internal/v1/upload-tokens/{token_id}/claim/{asset_id}", request_id=request_id
        )
