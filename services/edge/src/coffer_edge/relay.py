"""A relay of jobs metadata queues (the malware scans, coffer_edge.scans; the image facts,
coffer_edge.facts): woken by an upload that queued one, and every ``interval`` seconds
anyway, it drains the queue, and a failure only waits for the next turn (the jobs are leases).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress

from coffer_kit.contract.errors import CofferError


class Relay:
    """Subclasses drain their queue in ``once``; ``run`` is the loop around it."""

    name = "relay"  # in the log lines of a failed turn

    def __init__(self, *, interval: float, log: logging.Logger) -> None:
        self.interval = interval
        self.log = log
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """A job may have been queued: look now."""
        self._wake.set()

    async def once(self) -> int:
        """Claim and run the due jobs until none is due; answers how many ran."""
        raise NotImplementedError

    async def run(self) -> None:
        """Drain when woken and every ``interval`` seconds, until cancelled."""
        while True:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            try:
                await self.once()
            except CofferError as exc:
                self.log.warning(f"{self.name} failed; retrying", extra={"error": exc.message})
            except Exception:
                self.log.exception(f"{self.name} crashed; retrying")
