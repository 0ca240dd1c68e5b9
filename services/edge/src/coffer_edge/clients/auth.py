"""auth client: resolves a key hash to a principal, with a short bounded cache."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from cachetools import TLRUCache

from coffer_edge.clients.base import ServiceClient
from coffer_edge.metrics import AUTH_CACHE


@dataclass(frozen=True, slots=True)
class Principal:
    organization_id: str
    key_id: str
    key_kind: str
    user_id: str | None
    quota_bytes: int
    key_expires_at: float | None  # unix seconds


class AuthClient(ServiceClient):
    service = "auth"

    def __init__(self, http, *, cache_seconds: float, cache_size: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(http)
        self.cache_seconds = cache_seconds
        # Per-entry deadline: never longer than cache_seconds, never past the key's own expiry.
        self._cache: TLRUCache[tuple[str, str | None], tuple[Principal, float]] = TLRUCache(
            maxsize=cache_size, ttu=lambda _k, v, now: v[1], timer=time.monotonic
        )

    async def principal(
        self, key_hash: str, organization_id: str | None, *, request_id: str | None
    ) -> Principal:
        """The principal for a key (hash) and optional organization header; raises §2 refusals."""
        cache_key = (key_hash, organization_id)
        hit = self._cache.get(cache_key)
        if hit is not None:
            AUTH_CACHE.labels("hit").inc()
            return hit[0]
        AUTH_CACHE.labels("miss").inc()
        headers = {"x-key-hash": key_hash}
        if organization_id is not None:
            headers["x-organization-id"] = organization_id
        body = await self.json("GET", "/internal/v1/principal", headers=headers, request_id=request_id)
        expires = body.get("keyExpiresAt")
        expires_unix = datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp() if expires else None
        principal = Principal(
            organization_id=body["organizationId"],
            key_id=body["keyId"],
            key_kind=body["keyKind"],
            user_id=body.get("userId"),
            quota_bytes=int(body["quotaBytes"]),
            key_expires_at=expires_unix,
        )
        ttl = self.cache_seconds
        if expires_unix is not None:
            ttl = min(ttl, expires_unix - time.time())
        if ttl > 0:
            self._cache[cache_key] = (principal, time.monotonic() + ttl)
        return principal
