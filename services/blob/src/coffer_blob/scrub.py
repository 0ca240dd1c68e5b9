"""The scrub (issue 47): walk the store against metadata's manifest and report what is wrong.

blob owns bytes and metadata owns rows, and neither reads the other's store (docs/
architecture.md), so the scrub takes what *should* exist as a manifest: JSON lines that
``coffer-metadata manifest`` writes, one per asset row (whatever its state: a trashed asset
still owns its object), per delete in progress (tombstone), per upload in flight (intent) and
per resumable upload. It then walks the store (``Storage.inventory``) and reports:

- **missing**: an asset row whose object is not in the store;
- **corrupt**: an asset's object whose size differs from the row's, or whose bytes no longer
  hash to the row's SHA-256 (read for a sample of the assets, or all: ``verify``, at most
  ``rate`` bytes a second), or cannot be read (an I/O error, a damaged sidecar: reported
  with the reason, and the walk goes on);
- **orphans**: an object that no row owns, older than the in-flight window (``orphan_age``):
  the bytes of an upload are published before its row is written, and the manifest was read
  before the walk, so a young object without a row is most likely an upload finishing;
- **flags** (only when asked: ``flags`` ``check`` or ``fix``, one ``stat`` per object): an
  asset's object whose private or trashed flag is not its row's. The CDN serves by the flags
  it reads from the object, so a store restored from a copy made later than the database's
  serves a file the row calls private, or in the trash, to anyone (docs/backup.md).

What is not an asset's object is left alone: keys whose second segment is not an asset id
(an organization's presets, ``{org}/presets/…``, and grant revocations, ``{org}/grants/…``),
the driver's own files, writes in progress and resumable uploads' parts (neither drivers'
``inventory`` lists them), and an asset's image variants (``{org}/{asset}/v%…``) while the
asset has a row. A delete in progress or an upload in flight owns everything under its asset's
prefix and expects nothing.

Nothing is repaired unless asked: orphans are deleted (``delete_orphans``) and flags set to
the row's (``flags`` ``fix``) only then; a missing or corrupt object is reported with its
asset id and organization, for an operator to restore.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import IO, Any

from coffer_blob.storage.base import Storage, StorageUnavailable
from coffer_kit.contract import urls
from coffer_kit.contract.ids import is_asset_id

# What a manifest line may hold before it is parsed, and how many lines: bound before work.
MAX_LINE_BYTES = 8 * 1024
# An asset row expects its object; the others own its prefix (manifest ``state``).
OWNS_ONLY = frozenset({"deleting", "uploading"})
# Names read under an asset's prefix to tell a listed object without metadata from a deleted one
# (the original and its variants, which the CDN bounds well below this).
MAX_LISTED = 10_000
# A transform variant's filename starts with this (coffer_blob.cdn).
VARIANT_PREFIX = "v%"
# What the scrub does about the flags an object carries: nothing, report, or set the row's.
FLAG_MODES = ("skip", "check", "fix")
# ``fix`` leaves an object as it is when its flags changed after the manifest or less than this
# before it: on a live installation, a change to private reaches the store before its row
# (coffer_edge.routers.assets.update_stored_asset), and a manifest read in between would make
# the file public again. A restore's store copy is older than that.
FLAGS_SETTLE = timedelta(minutes=5)


class ManifestError(ValueError):
    """A manifest line that is not what ``coffer-metadata manifest`` writes."""


@dataclass(frozen=True, slots=True)
class Expected:
    """One manifest line: an asset row, or a delete or upload in progress. Held per asset for
    the whole run: slots, and the organization and state shared (``sys.intern``)."""

    org: str
    asset: str
    key: str
    size: int
    sha256: str
    state: str
    # The flags the object must carry (None: a manifest from before it said).
    private: bool | None = None
    trashed: bool | None = None


class Manifest(dict[str, Expected]):
    """The manifest's lines by ``{org}/{asset}`` prefix, and when its snapshot was taken (None:
    a manifest from before it said)."""

    at: datetime | None = None

    def flagless(self) -> int:
        """Asset lines that carry no flags (an older ``coffer-metadata``'s)."""
        return sum(1 for e in self.values() if e.state not in OWNS_ONLY and e.private is None)


def read_manifest(lines: Iterable[str | bytes], *, max_entries: int) -> Manifest:
    """The manifest's lines by ``{org}/{asset}`` prefix. A malformed line, or a manifest
    without its end line (``{"end": true, "count": N}``, N the entries before it: one cut
    short would make every object it leaves out an orphan), raises ManifestError."""
    found = Manifest()
    entries, end = 0, None
    for number, raw in enumerate(lines, 1):
        if len(raw) > MAX_LINE_BYTES:
            raise ManifestError(f"line {number}: longer than {MAX_LINE_BYTES} bytes")
        try:
            text = raw.decode() if isinstance(raw, bytes) else raw
            if not text.strip():
                continue
            if end is not None:
                raise ManifestError(f"line {number}: after the end line")
            row = json.loads(text)
            if isinstance(row, dict) and row.get("end") is True:
                end, found.at = _end(row)
                continue
            if entries >= max_entries:
                raise ManifestError(f"more than {max_entries} entries (COFFER_BLOB_SCRUB_MAX_ASSETS)")
            entry = Expected(
                org=sys.intern(str(row["org"])),
                asset=str(row["asset"]),
                key=str(row["key"]),
                size=int(row.get("size") or 0),
                sha256=str(row.get("sha256") or ""),
                state=sys.intern(str(row.get("state") or "asset")),
                private=_flag(row, "private"),
                trashed=_flag(row, "trashed"),
            )
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
            raise ManifestError(f"line {number}: {exc!r}"[:300]) from exc
        entries += 1
        prefix = f"{entry.org}/{entry.asset}"
        previous = found.get(prefix)
        # An asset row wins over a delete or upload of the same id (it expects the object).
        if previous is None or previous.state in OWNS_ONLY:
            found[prefix] = entry
    if end is None:
        raise ManifestError(f"no end line after {entries} entries: the manifest was cut short")
    if end != entries:
        raise ManifestError(f"the end line counts {end} entries, the manifest holds {entries}")
    return found


def _end(row: dict[str, Any]) -> tuple[int, datetime | None]:
    """The end line's count, and when the snapshot was taken (None: not said)."""
    at = datetime.fromisoformat(str(row["at"])) if row.get("at") is not None else None
    if at is not None and at.tzinfo is None:
        raise ValueError("'at' has no time zone")
    return int(row["count"]), at


def _flag(row: dict[str, Any], name: str) -> bool | None:
    value = row.get(name)
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"{name!r} is not true or false")


class RateLimit:
    """At most ``bytes_per_second`` over any interval, give or take one chunk.

    After each chunk the reader waits until the time its bytes are due at the rate (the due
    time never runs behind the clock, so an idle spell earns no burst): by the start of any
    read, the bytes taken are at most the rate times the time since the first. The accounting is kept
    (``bytes``, ``waited``) so the bound can be checked without a stopwatch.
    """

    def __init__(
        self,
        bytes_per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if bytes_per_second <= 0:
            raise ValueError("a rate is positive")
        self.rate = bytes_per_second
        self._clock = clock
        self._sleep = sleep
        self._due = clock()
        self.bytes = 0
        self.waited = 0.0

    def take(self, n: int) -> None:
        """Account for ``n`` bytes just read; sleep until they are due."""
        now = self._clock()
        # Due after the previous chunk's due time (the time spent reading counts toward it),
        # but never before now: time the reader fell behind is not saved up as credit.
        self._due = max(self._due + n / self.rate, now)
        self.bytes += n
        if self._due > now:
            self.waited += self._due - now
            self._sleep(self._due - now)


@dataclass
class Finding:
    """One problem, named by organization and asset (and key)."""

    kind: str  # missing | corrupt | orphan | flags
    org: str
    asset: str
    key: str
    detail: str = ""
    size: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "organizationId": self.org, "assetId": self.asset}
        out["key"] = self.key
        if self.detail:
            out["detail"] = self.detail
        if self.size is not None:
            out["size"] = self.size
        return out


@dataclass
class Report:
    """What a scrub found and did."""

    findings: list[Finding] = field(default_factory=list)
    assets: int = 0  # asset rows in the manifest
    objects: int = 0  # objects the walk found
    verified: int = 0  # objects whose bytes were hashed
    verified_bytes: int = 0
    young_orphans: int = 0  # unowned but inside the in-flight window: not reported
    deleted_orphans: int = 0
    fixed_flags: int = 0  # objects whose flags were set to their row's
    left_flags: int = 0  # out of step, but changed around or after the manifest: not set
    seconds: float = 0.0

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def clean(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        return {
            "clean": self.clean,
            "assets": self.assets,
            "objects": self.objects,
            "verified": self.verified,
            "verifiedBytes": self.verified_bytes,
            "missing": [f.as_dict() for f in self.of("missing")],
            "corrupt": [f.as_dict() for f in self.of("corrupt")],
            "orphans": [f.as_dict() for f in self.of("orphan")],
            "flags": [f.as_dict() for f in self.of("flags")],
            "youngOrphans": self.young_orphans,
            "deletedOrphans": self.deleted_orphans,
            "fixedFlags": self.fixed_flags,
            "leftFlags": self.left_flags,
            "seconds": round(self.seconds, 3),
        }

    def human(self) -> str:
        lines = [
            f"scrub: {self.assets} assets, {self.objects} objects, "
            f"{self.verified} hashed ({self.verified_bytes} bytes) in {self.seconds:.1f} s",
        ]
        for kind, title in (
            ("missing", "missing objects"),
            ("corrupt", "corrupt objects"),
            ("orphan", "orphans"),
            ("flags", "flags out of step with the row"),
        ):
            found = self.of(kind)
            lines.append(f"{title}: {len(found)}")
            for f in found:
                extra = f" ({f.detail})" if f.detail else ""
                lines.append(f"  {f.org} {f.asset} {f.key}{extra}")
        if self.young_orphans:
            young = self.young_orphans
            lines.append(f"objects without a row inside the in-flight window (not reported): {young}")
        if self.deleted_orphans:
            lines.append(f"orphans deleted: {self.deleted_orphans}")
        if self.fixed_flags:
            lines.append(f"flags set to the row's: {self.fixed_flags}")
        if self.left_flags:
            settle = int(FLAGS_SETTLE.total_seconds() // 60)
            lines.append(
                f"flags left as they are (changed after the manifest or less than {settle} minutes "
                f"before it; write a new manifest once writes have stopped): {self.left_flags}"
            )
        lines.append("clean" if self.clean else "PROBLEMS FOUND")
        return "\n".join(lines)


def _owned_by(entry: Expected, filename: str) -> bool:
    if entry.state in OWNS_ONLY:
        return True
    own = urls.split_key(entry.key)
    return filename.startswith(VARIANT_PREFIX) or (own is not None and own[2] == filename)


def scrub(
    storage: Storage,
    manifest: dict[str, Expected],
    *,
    verify: float,
    limit: RateLimit,
    orphan_age: timedelta,
    delete_orphans: bool = False,
    flags: str = "skip",
    manifest_at: datetime | None = None,
    now: datetime | None = None,
    pick: Callable[[], float] = random.random,
) -> Report:
    """Walk ``storage`` against ``manifest`` (module docstring); hash a ``verify`` share (0-1);
    ``flags`` (FLAG_MODES): compare each asset's object's flags with its row's, and set them,
    but not those that changed after ``manifest_at`` (its snapshot) or less than FLAGS_SETTLE
    before it."""
    started = time.monotonic()
    report = Report(assets=sum(1 for e in manifest.values() if e.state not in OWNS_ONLY))
    seen: set[str] = set()
    to_hash: list[Expected] = []
    cutoff = (now or datetime.now(UTC)) - orphan_age
    for obj in storage.inventory():
        report.objects += 1
        parts = obj.key.split("/")
        if len(parts) != 3 or not is_asset_id(parts[1]):
            continue  # presets and the like: not an asset's object
        org, asset, filename = parts
        if obj.damage:  # never an orphan: what it is, and whose, is unknown
            report.findings.append(Finding("corrupt", org, asset, obj.key, obj.damage, obj.size))
            continue
        entry = manifest.get(f"{org}/{asset}")
        if entry is None or not _owned_by(entry, filename):
            if obj.last_modified > cutoff:
                report.young_orphans += 1
            else:
                report.findings.append(Finding("orphan", org, asset, obj.key, size=obj.size))
        elif entry.state not in OWNS_ONLY and obj.key == entry.key:  # (else a variant, or in progress)
            seen.add(obj.key)
            if obj.size != entry.size:
                detail = f"size {obj.size}, expected {entry.size}"
                report.findings.append(Finding("corrupt", org, asset, obj.key, detail, obj.size))
            else:
                if flags != "skip":
                    _flags(storage, entry, report, fix=flags == "fix", manifest_at=manifest_at)
                if verify >= 1 or (verify > 0 and pick() < verify):
                    to_hash.append(entry)
    report.findings += [
        Finding("missing", entry.org, entry.asset, entry.key)
        for entry in manifest.values()
        if entry.state not in OWNS_ONLY and entry.key not in seen
    ]
    _verify(storage, to_hash, limit, report)
    if delete_orphans:
        for finding in report.of("orphan"):
            storage.delete(finding.key)
            report.deleted_orphans += 1
    report.seconds = time.monotonic() - started
    return report


def _flags(
    storage: Storage, entry: Expected, report: Report, *, fix: bool, manifest_at: datetime | None
) -> None:
    """Report (and with ``fix``, set) the object's flags that are not its row's."""
    info = storage.stat(entry.key)
    if info is None:
        prefix, _, filename = entry.key.rpartition("/")
        if filename in storage.filenames(prefix + "/", MAX_LISTED):
            # Listed, yet no committed object: its bytes without blob's metadata (a copy that
            # dropped x-amz-meta-*), which the CDN never serves and the hash alone cannot tell.
            detail = "stored without blob's metadata (sha256, flags): never served; restore it with them"
            report.findings.append(Finding("corrupt", entry.org, entry.asset, entry.key, detail))
        return  # (else gone since the walk listed it: the verify pass, or the next run, says so)
    wrong = [
        (name, stored, wanted)
        for name, stored, wanted in (
            ("private", info.private, entry.private),
            ("trashed", info.trashed, entry.trashed),
        )
        if wanted is not None and stored != wanted
    ]
    if not wrong:
        return
    detail = ", ".join(
        f"{name} {str(stored).lower()}, the row says {str(wanted).lower()}" for name, stored, wanted in wrong
    )
    if manifest_at is not None and info.flags_at is not None and info.flags_at > manifest_at - FLAGS_SETTLE:
        when = "after" if info.flags_at > manifest_at else "just before"
        detail += f"; its flags changed at {info.flags_at.isoformat()}, {when} the manifest: left as it is"
        if fix:
            report.left_flags += 1
            fix = False
    report.findings.append(Finding("flags", entry.org, entry.asset, entry.key, detail, info.size))
    if fix:
        try:
            for name, _, wanted in wrong:
                if name == "private":
                    done = storage.set_private(entry.key, bool(wanted))
                else:
                    done = storage.set_held(entry.key, bool(wanted), "trash")
                if not done:
                    return  # gone meanwhile (as above)
        except (StorageUnavailable, OSError) as exc:  # one object's: the run goes on
            report.findings[-1].detail += f"; not set: {exc}"[:300]
            return
        report.fixed_flags += 1


def _verify(storage: Storage, entries: list[Expected], limit: RateLimit, report: Report) -> None:
    """Hash each entry's object at the limit's rate; report the ones that differ."""
    for entry in entries:
        try:
            digest = _hash(storage, entry.key, limit)
        except OSError as exc:  # (a disk's EIO: the damage a scrub is for)
            detail = f"unreadable: {exc}"
            report.findings.append(Finding("corrupt", entry.org, entry.asset, entry.key, detail))
            continue
        report.verified += 1
        report.verified_bytes += entry.size
        if digest is None:
            gone = Finding("missing", entry.org, entry.asset, entry.key, "gone during the scrub")
            report.findings.append(gone)
        elif digest != entry.sha256:
            detail = f"sha256 {digest}, expected {entry.sha256}"
            report.findings.append(Finding("corrupt", entry.org, entry.asset, entry.key, detail))


def _hash(storage: Storage, key: str, limit: RateLimit) -> str | None:
    reader = storage.open_reader(key)
    if reader is None:
        return None
    digest = hashlib.sha256()
    try:
        for chunk in reader:
            digest.update(chunk)
            limit.take(len(chunk))
    finally:
        reader.close()
    return digest.hexdigest()


def iter_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """A binary stream's lines, each read at most ``MAX_LINE_BYTES + 1`` bytes at a time."""
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        yield line
