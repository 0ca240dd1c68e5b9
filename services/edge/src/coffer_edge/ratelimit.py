"""Per-key rate limits (docs/contract.md §7) with the ``limits`` library: in process, or Redis when set."""

from __future__ import annotations

import logging
import math
import time

from limits import parse
from limits.aio.strategies import FixedWindowRateLimiter
from limits.storage import storage_from_string

from coffer_edge.metrics import RATE_LIMIT_FALLBACKS
from coffer_kit.contract.errors import CofferError, rate_limited

log = logging.getLogger("coffer.edge.ratelimit")


# After Redis fails, counting stays in process this long before Redis is tried again, so an
# outage costs one failed call per interval, not one per request.
REDIS_RETRY_SECONDS = 5.0


class RateLimiter:
    """One fixed window per key (an API key's id, a client address); shared across edges
    through Redis when configured.

    When Redis cannot be reached, each edge counts in its own memory instead (issue 23: the
    limiter let every request through then): the limit holds per edge, so N edges allow at
    most N times the budget until Redis is back.
    """

    def __init__(self, limit: str, redis_url: str | None, key_prefix: str = "coffer") -> None:
        self.item = parse(limit)
        self.memory = FixedWindowRateLimiter(storage_from_string("async+memory://"))
        self.shared: FixedWindowRateLimiter | None = None
        if redis_url:
            self.shared = FixedWindowRateLimiter(
                storage_from_string("async+" + redis_url, key_prefix=key_prefix)
            )
        self._redis_down_until = 0.0

    def _limiter(self) -> FixedWindowRateLimiter:
        if self.shared is not None and time.monotonic() >= self._redis_down_until:
            return self.shared
        return self.memory

    def _redis_failed(self) -> None:
        if time.monotonic() >= self._redis_down_until:
            log.warning("rate limiter: Redis unavailable; counting in this process", exc_info=True)
            RATE_LIMIT_FALLBACKS.inc()
        self._redis_down_until = time.monotonic() + REDIS_RETRY_SECONDS

    async def _hit(self, key: str, *, count: bool) -> tuple[bool, float]:
        """(allowed, when the window resets): with ``count``, one more request is counted."""
        for _ in range(2):  # Redis, then memory if Redis fails
            limiter = self._limiter()
            try:
                allowed = await (limiter.hit if count else limiter.test)(self.item, key)
                if allowed:
                    return True, 0.0
                stats = await limiter.get_window_stats(self.item, key)
                return False, stats.reset_time
            except Exception:
                if limiter is self.memory:
                    raise
                self._redis_failed()
        raise AssertionError("unreachable")

    def _refusal(self, what: str, reset_time: float) -> CofferError:
        retry_after = max(1, math.ceil(reset_time - time.time()))
        return rate_limited(f"{what} (limit {self.item}); retry in {retry_after} s.", retry_after=retry_after)

    async def check(self, key_id: str) -> None:
        """Count one request for ``key_id``; 429 with Retry-After once the window is used up."""
        allowed, reset = await self._hit(key_id, count=True)
        if not allowed:
            raise self._refusal("Too many requests for this key", reset)

    async def refuse_if_spent(self, key: str, what: str) -> None:
        """429 when ``key``'s window is used up, counting nothing (see :meth:`count`)."""
        allowed, reset = await self._hit(key, count=False)
        if not allowed:
            raise self._refusal(what, reset)

    async def count(self, key: str) -> None:
        """Count one event for ``key`` (a failure), refusing nothing now."""
        await self._hit(key, count=True)
