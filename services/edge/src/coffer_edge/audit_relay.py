"""The audit relay: copies metadata's change events (its outbox) into auth's audit log.

metadata writes an event in the transaction of every change to a file or folder, naming the
key, upload token or dashboard user edge said made it (coffer_edge.actor). This relay reads
the events auth does not hold yet, sends them to auth, which records each once whatever how
often it is sent, then marks them done in metadata. A crash anywhere resends a batch, never
loses one; several edges relaying at once only resend. Each change this edge makes wakes the
relay (after a short pause that gathers a burst into one batch); a slow tick catches the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextlib import suppress
from typing import Any

from coffer_edge.clients.auth import AuthClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.limits import AUDIT_BATCH_BYTES

log = logging.getLogger("coffer.edge.audit")

# Events per round trip (metadata's and auth's bound).
BATCH = 500
# The JSON of the events sent to auth at once, below its bound on that route's body
# (AUDIT_BATCH_BYTES, with room for the envelope): a batch is sent in as many pieces as it takes.
PIECE_BYTES = AUDIT_BATCH_BYTES - 4096
# How long a change waits for others to join its batch.
GATHER_SECONDS = 0.25


def pieces(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``events`` in order, in pieces of at most PIECE_BYTES of JSON each (an event alone is far
    below it: the contract bounds what a change holds)."""
    cut: list[list[dict[str, Any]]] = [[]]
    size = 0
    for event in events:
        length = len(json.dumps(event)) + 2  # (its separator)
        if cut[-1] and size + length > PIECE_BYTES:
            cut.append([])
            size = 0
        cut[-1].append(event)
        size += length
    return cut


class AuditRelay:
    def __init__(self, metadata: MetadataClient, auth: AuthClient, *, interval: float) -> None:
        self.metadata = metadata
        self.auth = auth
        self.interval = interval
        self._changed = asyncio.Event()

    def changed(self) -> None:
        """A change was made: relay soon."""
        self._changed.set()

    async def relay_once(self) -> int:
        """Relay until no event is pending; answers how many were relayed."""
        relayed = 0
        while True:
            events = await self.metadata.audit_pending(limit=BATCH)
            if not events:
                return relayed
            for piece in pieces(events):
                await self.auth.record_changes(piece)
                await self.metadata.mark_audited([e["id"] for e in piece])
                relayed += len(piece)
            if len(events) < BATCH:
                return relayed

    async def run(self) -> None:
        """Relay after each change and every ``interval`` seconds, until cancelled."""
        while True:
            with suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.interval)
            await asyncio.sleep(GATHER_SECONDS)
            self._changed.clear()
            try:
                await self.relay_once()
            except CofferError as exc:
                log.warning("audit relay failed; retrying", extra={"error": exc.message})
            except Exception:
                log.exception("audit relay crashed; retrying")
