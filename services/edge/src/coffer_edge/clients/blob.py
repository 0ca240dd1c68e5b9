"""blob client: streams upload bytes, deletes objects, signs CDN URLs."""

from __future__ import annotations

from coffer_edge.clients.base import ServiceClient


class BlobClient(ServiceClient):
    service = "blob"
