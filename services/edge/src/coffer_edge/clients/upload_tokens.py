"""auth's upload-token API: mint (by hash), resolve a token's hash to its grant, claim, release."""

from __future__ import annotations

import time
from typing import NamedTuple

from cachetools import TLRUCache

from coffer_edge.clients.base import ServiceClient, deadline_cache, reuse_seconds
from coffer_kit.contract.wire import (
    Done,
    MinterRef,
    MintersIn,
    MintersOut,
    TokenClaim,
    UploadGrant,
    UploadTokenCreated,
    UploadTokenIn,
    UploadTokenPlace,
)
from coffer_kit.internal import InternalClient


class Minter(NamedTuple):
    acting: bool
    quota_bytes: int | None
    confined_to: str | None
    confined_within: tuple[str, ...] = ()


class UploadTokenClient(ServiceClient):
    service = "auth"

    def __init__(self, http: InternalClient, *, cache_seconds: float = 5.0, cache_size: int = 10_000) -> None:
        super().__init__(http)
        # Minters' answers, reused for as long as a key's (CONTRACT §2: a deleted key stops
        # acting within 5 s, its uploads' capabilities with it), and never past the key's own
        # expiry.
        self._cache_seconds = cache_seconds
        self._minters: TLRUCache[tuple[str, str | None, str | None], tuple[Minter, float]] = deadline_cache(
            cache_size
        )

    async def minter(self, ref: MinterRef, *, request_id: str | None = None) -> Minter:
        """Whether the key behind an upload's capability can still act, its organization's
        quota, and the folder the key is confined to (cached, see ``_minters``)."""
        cache_key = (ref.organization_id, ref.key_id, ref.token_id)
        if (known := self._minters.get(cache_key)) is not None:
            return known[0]
        answer = await self.minters([ref], request_id=request_id)
        confined = answer.confined_to[0] if answer.confined_to else None
        within = tuple(answer.confined_within[0]) if answer.confined_within else ()
        minter = Minter(answer.acting[0], answer.quota_bytes[0], confined, within)
        until = answer.acting_until[0] if answer.acting_until else None
        if (ttl := reuse_seconds(self._cache_seconds, until)) > 0:
            self._minters[cache_key] = (minter, time.monotonic() + ttl)
        return minter

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

    async def minters(self, refs: list[MinterRef], *, request_id: str | None = None) -> MintersOut:
        """Whether each upload token's minting key can still act in its organization, and that
        organization's quota."""
        return await self.call(
            MintersOut,
            "POST",
            "/internal/v1/upload-tokens/minters",
            json=MintersIn(minters=refs).model_dump(by_alias=True),
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
