"""auth client: resolves a key hash to a principal, with a short bounded cache."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime

from cachetools import TLRUCache

from coffer_edge.clients.base import ServiceClient
from coffer_edge.metrics import AUTH_CACHE
from coffer_kit.internal import InternalClient

CacheKey = tuple[str, str | None]


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

    def __init__(self, http: InternalClient, *, cache_seconds: float, cache_size: int) -> None:
        super().__init__(http)
        self.cache_seconds = cache_seconds
        # Per-entry deadline: never longer than cache_seconds, never past the key's own expiry.
        self._cache: TLRUCache[CacheKey, tuple[Principal, float]] = TLRUCache(
            maxsize=cache_size, ttu=lambda _k, v, now: v[1], timer=time.monotonic
        )
        # Lookups on their way to auth: concurrent misses for one key wait for the same call.
        self._pending: dict[CacheKey, asyncio.Task[Principal]] = {}

    async def principal(
        self, key_hash: str, organization_id: str | None, *, request_id: str | None
    ) -> Principal:
        """The principal for a key (hash) and optional organization header; raises §2 refusals."""
        cache_key = (key_hash, organization_id)
        hit = self._cache.get(cache_key)
        if hit is not None:
            AUTH_CACHE.labels("hit").inc()
            return hit[0]
        call = self._pending.get(cache_key)
        if call is None or call.done():
            AUTH_CACHE.labels("miss").inc()
            # A task of its own, so a waiter that is cancelled (its client went away) does not
            # cancel the call for the others; it carries the first waiter's request id.
            call = asyncio.create_task(self._fetch(cache_key, request_id=request_id))
            self._pending[cache_key] = call
            call.add_done_callback(lambda done: self._settled(cache_key, done))
        else:
            AUTH_CACHE.labels("shared").inc()
        # Every waiter gets this call's answer or its error; a failure is not kept for later.
        return await asyncio.shield(call)

    def _settled(self, cache_key: CacheKey, call: asyncio.Task[Principal]) -> None:
        if self._pending.get(cache_key) is call:
            del self._pending[cache_key]
        if not call.cancelled():
            call.exception()  # retrieved, even when every waiter was cancelled

    async def _fetch(self, cache_key: CacheKey, *, request_id: str | None) -> Principal:
        """Ask auth, and cache a principal it answers."""
        key_hash, organization_id = cache_key
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
