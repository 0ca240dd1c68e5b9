"""Organization presets (CONTRACT §10), one small JSON object per preset in the store.

The CDN resolves ``preset=NAME`` without calling another service: it reads the preset's
object from the store it reads originals from, and keeps an organization's presets at most
``CdnTuning.preset_cache_seconds`` (5 s), so a change or a deletion shows within that; a
name its copy lacks is read again at once, so a new preset works on its first use. edge
writes them through blob's internal API (``/internal/v1/transform-presets/…``), one preset at
a time.

Each preset is its own object, ``{org}/presets/v%preset.<name>``, written whole: two writes
of different presets touch different objects, so both land, whichever blob replica takes
them (two writes of the same preset: the last one wins, as for any PUT). The listing is the
store's (``Storage.filenames``). The bound of ``MAX_ORG_PRESETS`` is checked before a
creation and again after it: a creation that finds more presets than the bound once its own
object is written takes it back and answers 409, so concurrent creations can never leave
more than the bound.

Organizations whose presets were written before 2026-11-27 have them in one object,
``{org}/presets/v%transform-presets``: it is still read (each preset of its own object wins),
and the first write of such an organization moves its presets into objects of their own and
deletes it.

The keys' last segments have a ``%``, so no asset key can ever name them and the CDN never
serves them (``coffer_kit.contract.keys``), while both drivers accept them (their reserved names start
with ``%``).
"""

from __future__ import annotations

import json
import re
import time

from coffer_blob.storage import Storage, write_small
from coffer_kit.contract import transforms
from coffer_kit.contract.errors import conflict
from coffer_kit.contract.transforms import Transform

# A preset's object is a few hundred bytes; the retired whole-organization object held 20.
MAX_PRESET_BYTES = 64 * 1024
# Organizations whose presets one CDN process keeps at once; past it the cache starts afresh.
CACHE_ENTRIES = 10_000
# What a listing may return: the bound, and room for concurrent creations past it.
_LIST_LIMIT = 4 * transforms.MAX_ORG_PRESETS
_OBJECT_PREFIX = "v%preset."


def valid_name(name: str) -> bool:
    """Whether ``name`` may name an organization preset (and so a key in the store)."""
    return re.fullmatch(transforms.PRESET_NAME_PATTERN, name) is not None


def _prefix(org_id: str) -> str:
    return f"{org_id}/presets/"


def preset_key(org_id: str, name: str) -> str:
    if not valid_name(name):
        raise ValueError(f"not a preset name: {name!r}")
    return f"{_prefix(org_id)}{_OBJECT_PREFIX}{name}"


def legacy_key(org_id: str) -> str:
    """The one object per organization that held every preset before 2026-11-27."""
    return f"{_prefix(org_id)}v%transform-presets"


def _read_object(storage: Storage, key: str) -> dict[str, object] | None:
    found = storage.read_small(key, MAX_PRESET_BYTES)
    if found is None or found[1] is None:
        return None
    raw = json.loads(found[1])
    return raw if isinstance(raw, dict) else None


def _legacy(storage: Storage, org_id: str) -> dict[str, Transform]:
    raw = _read_object(storage, legacy_key(org_id))
    fields = raw.get("presets") if raw is not None else None
    if not isinstance(fields, dict):
        return {}
    return {name: transforms.preset_from_fields(f) for name, f in fields.items()}


def _names(storage: Storage, org_id: str) -> list[str]:
    found = storage.filenames(_prefix(org_id), _LIST_LIMIT)
    return [f[len(_OBJECT_PREFIX) :] for f in found if f.startswith(_OBJECT_PREFIX)]


def read_one(storage: Storage, org_id: str, name: str) -> Transform | None:
    """One preset, or None: what the CDN reads for a name its copy lacks (one read, two for an
    organization whose presets were never moved out of the old object)."""
    raw = _read_object(storage, preset_key(org_id, name))
    if raw is not None:
        return transforms.preset_from_fields(raw)
    return _legacy(storage, org_id).get(name)


def read(storage: Storage, org_id: str) -> dict[str, Transform]:
    """The organization's presets by name ({} when it has none)."""
    presets = _legacy(storage, org_id)
    for name in _names(storage, org_id):
        raw = _read_object(storage, preset_key(org_id, name))
        if raw is not None:  # deleted meanwhile otherwise
            presets[name] = transforms.preset_from_fields(raw)
    return dict(sorted(presets.items()))


def _write(storage: Storage, org_id: str, name: str, preset: Transform) -> None:
    body = json.dumps(preset.fields()).encode()
    write_small(storage, preset_key(org_id, name), body, content_type="application/json", private=True)


def _move_legacy(storage: Storage, org_id: str) -> None:
    """Give each preset of the old whole-organization object an object of its own (one that
    has one already keeps it), then delete the old object."""
    old = _legacy(storage, org_id)
    if not old:
        return
    have = set(_names(storage, org_id))
    for name, preset in old.items():
        if name not in have:
            _write(storage, org_id, name, preset)
    storage.delete(legacy_key(org_id))


def put(storage: Storage, org_id: str, name: str, preset: Transform) -> bool:
    """Create or replace one preset; True when it is new. At most ``MAX_ORG_PRESETS`` (else 409)."""
    _move_legacy(storage, org_id)
    names = _names(storage, org_id)
    created = name not in names
    too_many = conflict(f"An organization has at most {transforms.MAX_ORG_PRESETS} transform presets.")
    if created and len(names) >= transforms.MAX_ORG_PRESETS:
        raise too_many
    _write(storage, org_id, name, preset)
    if created and len(_names(storage, org_id)) > transforms.MAX_ORG_PRESETS:
        # Another creation landed meanwhile: take this one back (both may; neither stays).
        storage.delete(preset_key(org_id, name))
        raise too_many
    return created


def delete(storage: Storage, org_id: str, name: str) -> bool:
    """Remove one preset; False if there was none of that name (none can have an invalid one)."""
    if not valid_name(name):
        return False
    _move_legacy(storage, org_id)
    key = preset_key(org_id, name)
    if storage.stat(key) is None:
        return False
    storage.delete(key)
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
