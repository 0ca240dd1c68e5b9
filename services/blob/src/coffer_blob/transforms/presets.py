"""Organization presets (CONTRACT §10), kept as one small JSON object per organization in the store.

The CDN resolves ``preset=NAME`` without calling another service: it reads the organization's
object from the store it reads originals from, and keeps it at most
``COFFER_CDN_PRESET_CACHE_SECONDS`` (5 s), so a change shows within that; a name its copy
lacks is read again at once, so a new preset works on its first use. edge writes it
through blob's internal API (``/internal/v1/transform-presets/…``), one preset at a time;
blob reads, changes and rewrites the object under a lock (within one blob process: two
replicas changing one organization's presets in the same instant may lose one change, which
the owner sees and repeats).

The object's key, ``{org}/presets/v%transform-presets``, has a ``%`` in its last segment, so no
asset key can ever name it and the CDN never serves it (``coffer_blob.keys``), while both
drivers accept it (their reserved names start with ``%``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping

from coffer_blob.storage import Storage
from coffer_kit import transforms
from coffer_kit.errors import conflict
from coffer_kit.transforms import Transform

# The store's object is read whole: 20 presets are well under this.
MAX_PRESETS_BYTES = 64 * 1024
# Organizations whose presets one CDN process keeps at once; past it the cache starts afresh.
CACHE_ENTRIES = 10_000

_write_lock = threading.Lock()


def presets_key(org_id: str) -> str:
    return f"{org_id}/presets/v%transform-presets"


def read(storage: Storage, org_id: str) -> dict[str, Transform]:
    """The organization's presets by name ({} when it has none)."""
    found = storage.read_small(presets_key(org_id), MAX_PRESETS_BYTES)
    if found is None or found[1] is None:
        return {}
    raw = json.loads(found[1])
    return {name: transforms.preset_from_fields(fields) for name, fields in raw.get("presets", {}).items()}


def _write(storage: Storage, org_id: str, presets: Mapping[str, Transform]) -> None:
    body = json.dumps({"presets": {name: presets[name].fields() for name in sorted(presets)}}).encode()
    writer = storage.open_writer(presets_key(org_id))
    try:
        writer.write(body)
        writer.commit(content_type="application/json", sha256=hashlib.sha256(body).hexdigest(), private=True)
    except BaseException:
        writer.abort()
        raise


def put(storage: Storage, org_id: str, name: str, preset: Transform) -> bool:
    """Create or replace one preset; True when it is new. At most ``MAX_ORG_PRESETS`` (else 409)."""
    with _write_lock:
        presets = read(storage, org_id)
        created = name not in presets
        if created and len(presets) >= transforms.MAX_ORG_PRESETS:
            raise conflict(f"An organization has at most {transforms.MAX_ORG_PRESETS} transform presets.")
        presets[name] = preset
        _write(storage, org_id, presets)
        return created


def delete(storage: Storage, org_id: str, name: str) -> bool:
    """Remove one preset; False if there was none of that name."""
    with _write_lock:
        presets = read(storage, org_id)
        if presets.pop(name, None) is None:
            return False
        if presets:
            _write(storage, org_id, presets)
        else:
            storage.delete(presets_key(org_id))
        return True


class PresetCache:
    """The CDN's copy of organizations' presets, each kept at most ``ttl`` seconds."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, dict[str, Transform]]] = {}

    def get(self, org_id: str) -> dict[str, Transform] | None:
        entry = self._entries.get(org_id)
        if entry is None or entry[0] <= time.monotonic():
            return None
        return entry[1]

    def put(self, org_id: str, presets: dict[str, Transform]) -> None:
        if len(self._entries) >= CACHE_ENTRIES:
            self._entries.clear()
        self._entries[org_id] = (time.monotonic() + self.ttl, presets)
