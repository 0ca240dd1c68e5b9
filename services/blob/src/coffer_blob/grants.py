"""Grant revocations: signed URLs die with the authority that made them (docs/security.md).

A URL signed under an authority (an API key, a dashboard member) carries its grant tag and
the second it was made (``coffer_blob.signing``). When that authority stops acting in the
organization, edge relays auth's revocation to blob (``POST /internal/v1/grant-revocations``)
and blob keeps it as a small object of its own, ``{org}/grants/v%revoked.<tag>``, holding
``{"revokedAt": <unix seconds>}``: the CDN refuses every URL of that tag made at or before
that second. Each authority is its own object, written whole, so revocations written through
different replicas never touch one another's; a write keeps the later of the stored and the
new time, so a batch relayed again changes nothing.

The CDN reads the object from the store it reads originals from, and keeps what it read
``CdnTuning.revocation_cache_seconds`` (2 s): a revocation written through any replica is
seen by every CDN process within that.

A revocation stops mattering once every URL made before it has expired: ``STALE_SECONDS``
after it (the longest a signed URL lives, and a day). One that old is not written, and
storing an organization's revocations also deletes some of its stale ones (at most
``PRUNE_READS`` looked at per organization and call, chosen at random among the first
``_LIST_LIMIT`` listed, so that the sorted listing's tail is reached too).

Like presets (``coffer_blob.transforms.presets``), the keys' last segments have a ``%``, so
no asset key can name them and the CDN never serves them; their second segment is not an
asset id, so the scrub leaves them alone.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import time
from collections.abc import Callable, Iterable

import anyio
from starlette.concurrency import run_in_threadpool

from coffer_blob import signing
from coffer_blob.storage import Storage, write_small
from coffer_kit.contract.limits import EXPIRES_IN_MAX
from coffer_kit.contract.wire import GrantRevocation

log = logging.getLogger("coffer.blob.grants")

# ``{"revokedAt": …}``: a few dozen bytes; anything larger is not one of ours.
MAX_REVOCATION_BYTES = 1024
# Revocations one CDN process keeps at once; past it the cache starts afresh.
CACHE_ENTRIES = 10_000
# A revocation also refuses the URLs made this long after it: edge acts on what auth said of a
# key or member up to 5 s before (COFFER_EDGE_AUTH_CACHE_SECONDS), so a key deleted can still
# have a URL signed for that long, and auth's clock (the revocation's time) and blob's (the
# URL's) may differ. The cost: a member added back within it makes no working URL until then.
SETTLE_SECONDS = 30
# A URL lives at most EXPIRES_IN_MAX after it was made: a day past that (and the settling), no
# URL a revocation refuses is alive, and the revocation may go.
STALE_SECONDS = EXPIRES_IN_MAX + SETTLE_SECONDS + 24 * 3600
# Stored revocations of one organization looked at (each one read) per call that stores some.
PRUNE_READS = 100
# Store calls at once for one batch (each a read and a write: many round trips to S3, which
# one at a time would keep edge waiting past its internal client's timeout).
STORE_CONCURRENCY = 16
_LIST_LIMIT = 1000
_OBJECT_PREFIX = "v%revoked."


def _prefix(org_id: str) -> str:
    return f"{org_id}/grants/"


def revocation_key(org_id: str, tag: str) -> str:
    """Where the revocation of ``tag`` (``signing.grant_tag``) in ``org_id`` is kept."""
    return f"{_prefix(org_id)}{_OBJECT_PREFIX}{tag}"


def stale(revoked_at: int, now: float) -> bool:
    """Whether every URL a revocation at ``revoked_at`` refuses has expired by ``now``."""
    return revoked_at + STALE_SECONDS < now


def refuses(revoked_at: int | None, issued: int) -> bool:
    """Whether a revocation at ``revoked_at`` (None: none) refuses a URL made at ``issued``."""
    return revoked_at is not None and issued <= revoked_at + SETTLE_SECONDS


def read(storage: Storage, key: str) -> int | None:
    """The revocation time stored under ``key``, or None when there is none or what is there
    cannot be read (a damaged object must not stop the relay: the next write replaces it)."""
    found = storage.read_small(key, MAX_REVOCATION_BYTES)
    if found is None or found[1] is None:
        return None
    try:
        raw = json.loads(found[1])
    except ValueError:
        log.warning("unreadable grant revocation; treated as none", extra={"key": key})
        return None
    value = raw.get("revokedAt") if isinstance(raw, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _write(storage: Storage, key: str, revoked_at: int) -> None:
    """Store ``revoked_at`` under ``key`` unless a later time is there already."""
    current = read(storage, key)
    if current is not None and current >= revoked_at:
        return
    body = json.dumps({"revokedAt": revoked_at}).encode()
    write_small(storage, key, body, content_type="application/json", private=True)


def _prune(storage: Storage, org_id: str, keep: set[str], now: float) -> None:
    """Delete stale revocations of ``org_id`` among up to PRUNE_READS of its objects (not
    those of ``keep``, just written).

    A revocation written again by another replica between this read and its delete is lost;
    only one of an authority revoked again more than STALE_SECONDS after its first revocation."""
    prefix = _prefix(org_id)
    names = [n for n in storage.filenames(prefix, _LIST_LIMIT) if n.startswith(_OBJECT_PREFIX)]
    candidates = [prefix + n for n in names if prefix + n not in keep]
    for key in random.sample(candidates, min(len(candidates), PRUNE_READS)):
        revoked_at = read(storage, key)
        if revoked_at is not None and stale(revoked_at, now):
            storage.delete(key)


async def store(
    storage: Storage, secret: bytes, revocations: Iterable[GrantRevocation], *, now: float
) -> None:
    """Keep each revocation (tagged with ``secret``, which only blob has), then prune the
    organizations they belong to; idempotent."""
    latest: dict[str, int] = {}
    orgs: dict[str, set[str]] = {}
    for revocation in revocations:
        org_id = revocation.organization_id
        tag = signing.grant_tag(secret, org_id, revocation.authority)
        key = revocation_key(org_id, tag)
        latest[key] = max(latest.get(key, revocation.revoked_at), revocation.revoked_at)
        orgs.setdefault(org_id, set()).add(key)
    fresh = {key: at for key, at in latest.items() if not stale(at, now)}
    await _each(functools.partial(_write, storage, key, at) for key, at in fresh.items())
    await _each(
        functools.partial(_prune_quietly, storage, org_id, keys, now) for org_id, keys in orgs.items()
    )


def _prune_quietly(storage: Storage, org_id: str, keep: set[str], now: float) -> None:
    """Pruning is housekeeping: its failure must not fail the revocations just stored (edge
    would send the batch again and again); the next call tries again."""
    try:
        _prune(storage, org_id, keep, now)
    except Exception:
        log.warning("pruning grant revocations failed", extra={"org_id": org_id}, exc_info=True)


async def _each(calls: Iterable[Callable[[], None]]) -> None:
    """Make each call in a worker thread, STORE_CONCURRENCY at once."""
    limiter = anyio.CapacityLimiter(STORE_CONCURRENCY)
    async with anyio.create_task_group() as group:
        for call in calls:
            group.start_soon(functools.partial(anyio.to_thread.run_sync, call, limiter=limiter))


class RevocationCache:
    """The CDN's copy of the revocations it looked up (None: none stored), each read again
    after ``ttl`` seconds."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[int | None, float]] = {}

    async def revoked_at(self, storage: Storage, org_id: str, tag: str) -> int | None:
        """When ``tag`` was revoked in ``org_id`` (None: it was not), as read at most ``ttl``
        seconds ago."""
        key = revocation_key(org_id, tag)
        entry = self._entries.get(key)
        if entry is not None and time.monotonic() - entry[1] < self.ttl:
            return entry[0]
        read_at = time.monotonic()  # before the read: the entry is never older than it says
        found = await run_in_threadpool(read, storage, key)
        if len(self._entries) >= CACHE_ENTRIES:
            self._entries.clear()
        self._entries[key] = (found, read_at)
        return found
