"""Per-key rate limits (docs/contract.md §7) with the ``limits`` library: in process, or Redis when set."""

from __future__ import annotations

import logging
import math
import time

from limits import parse
from limits.aio.strategies import FixedWindowRateLimiter
from limits.storage import storage_from_string

from coffer_kit.errors import rate_limited

log = logging.getLogger("coffer.edge.ratelimit")


class RateLimiter:
    """One fixed window per API key; shared across edges through Redis when configured."""

    def __init__(self, limit: str, redis_url: str | None, key_prefix: str = "coffer") -> None:
        self.item = parse(limit)
        if redis_url:
            self.storage = storage_from_string("async+" + redis_url, key_prefix=key_prefix)
        else:
            self.storage = storage_from_string("async+memory://")
        self.limiter = FixedWindowRateLimiter(self.storage)

    async def check(self, key_id: str) -> None:
        """Count one request for ``key_id``; 429 with Retry-After once the window is used up."""
        try:
            allowed = await self.limiter.hit(self.item, key_id)
            if allowed:
                return
            stats = await self.limiter.get_window_stats(self.item, key_id)
        except Exception:
            log.warning("rate limiter unavailable; allowing the request", exc_info=True)
            return
        retry_after = max(1, math.ceil(stats.reset_time - time.time()))
        raise rate_limited(
            f"Too many requests for this key (limit {self.item}); retry in {retry_after} s.",
            retry_after=retry_after,
        )
