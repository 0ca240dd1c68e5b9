"""The revocation relay: signed URLs die with the key or member that made them.

A signed URL is bearer authority, checked by the CDN alone, and blob calls no other service.
So auth queues each authority that stops acting in an organization (a key deleted, with the
keys it replaced; a member removed, with their personal keys) in the transaction that ends it,
edge carries the queue to blob, which stores each revocation beside the organization's objects
and refuses the URLs issued under it until then (docs/security.md, "Signed URLs"). Only after
blob has stored a batch does auth forget it: a relay that dies midway sends it again, and
storing a revocation twice changes nothing. Several edges relaying at once do the same.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

from coffer_edge.clients.auth import AuthClient
from coffer_edge.clients.blob import BlobClient
from coffer_edge.relay import Relay

log = logging.getLogger("coffer.edge.revocations")

REVOCATIONS = Counter(
    "coffer_grant_revocations_relayed_total", "Ended authorities relayed from auth to blob."
)
# Revocations carried per round trip (the wire's bound is MAX_REVOCATIONS).
BATCH = 500


class RevocationRelay(Relay):
    name = "revocation relay"

    def __init__(self, auth: AuthClient, blob: BlobClient, *, interval: float) -> None:
        super().__init__(interval=interval, log=log)
        self.auth = auth
        self.blob = blob

    async def once(self) -> int:
        """Relay the queue until it is empty; answers how many revocations went."""
        relayed = 0
        while True:
            pending = await self.auth.grant_revocations(limit=BATCH)
            if not pending.revocations:
                return relayed
            await self.blob.store_revocations(pending)
            await self.auth.revocations_relayed([r.seq for r in pending.revocations])
            REVOCATIONS.inc(len(pending.revocations))
            relayed += len(pending.revocations)
