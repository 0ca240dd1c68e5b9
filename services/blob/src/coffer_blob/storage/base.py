"""The storage driver interface: what blob needs from a place that keeps bytes.

Drivers are synchronous (the filesystem and boto3 both are); blob calls them from a
threadpool, except ``read_small`` up to the driver's ``inline_read_bytes``, which the CDN
calls on the event loop. Keys are ``/``-separated paths that blob has already validated
(``{org}/{asset}/{filename}``, see ``coffer_kit.contract.keys``); a prefix is a key's leading
segments ending in ``/``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from coffer_kit.contract.wire import HoldReason

# Reads yield chunks of at most this many bytes: streaming, never whole files.
READ_CHUNK = 1024 * 1024

# A flag change that changes nothing still writes the time (``ObjectInfo.flags_at``) when the
# stored one is older than this, well within the scrub's FLAGS_SETTLE: a change retried after a
# failure (the store set, the row not) then counts as made when it is retried, not at its first
# attempt, and a manifest read in between cannot have ``fix`` undo it. At most one write a minute
# for changes that change nothing (each an S3 copy).
FLAGS_AT_REFRESH_SECONDS = 60


def flags_at_fresh(flags_at: datetime | None) -> bool:
    """Whether a flag change that changes nothing may leave ``flags_at`` as it is: recent, or
    none (no flag of the object ever changed, so no earlier try of this change reached the
    store; most changes that change nothing, a scan's release of an object never held, write
    nothing then)."""
    return flags_at is None or (datetime.now(UTC) - flags_at).total_seconds() < FLAGS_AT_REFRESH_SECONDS


class StorageUnavailable(Exception):
    """The backend (disk, bucket) failed or could not be reached; callers answer 503."""


@dataclass(frozen=True)
class ObjectInfo:
    """A committed object: what the CDN needs to answer without reading the bytes."""

    key: str
    size: int
    sha256: str  # hex; also the object's strong ETag
    content_type: str
    last_modified: datetime  # timezone-aware UTC, whole seconds
    # CONTRACT §12: a private object is served on signed URLs only. Kept with the object
    # itself (fs: its sidecar; s3: its metadata), so the CDN learns it from the read it
    # makes anyway, with no call to another service.
    private: bool = False
    # Issue 48: held back from every download, signed or not (a file whose malware scan has
    # not passed under the ``block`` mode, or found infected). Kept with the object, as above.
    held: bool = False
    # Issue 47: in the trash, likewise held back from every download. A flag of its own, so
    # that a scan ending while the asset is in the trash releases only the scan's hold.
    trashed: bool = False
    # When a flag above last changed (None: never since it was stored, or by a blob before it
    # kept this); ``stat`` reads it. The scrub's ``--flags fix`` leaves alone an object whose
    # flags changed around or after its manifest (coffer_blob.scrub.FLAGS_SETTLE).
    flags_at: datetime | None = None

    @property
    def withheld(self) -> bool:
        """Never served, signed or not: held for its scan, or in the trash."""
        return self.held or self.trashed


@dataclass(frozen=True)
class StoredObject:
    """One committed object as a walk of the whole store finds it (``Storage.inventory``)."""

    key: str  # ``{org}/{asset}/{filename}``, or a driver-reserved key such as a preset's
    size: int
    last_modified: datetime  # timezone-aware UTC
    # Why the driver could not read what the object is (the fs driver's sidecar, which names
    # it, is damaged): ``key`` is then ``{org}/{asset}/`` and the object cannot be served.
    damage: str = ""


class Writer(Protocol):
    """One object being written. Nothing is visible under the key until ``commit``."""

    def write(self, chunk: bytes) -> None: ...

    def write_many(self, chunks: Sequence[bytes]) -> None:
        """``write`` of each chunk in order; a driver may do it in one call (no join)."""
        ...

    def commit(
        self, *, content_type: str, sha256: str, private: bool = False, held: bool = False
    ) -> ObjectInfo:
        """Publish the object atomically and durably; afterwards it is readable under the key."""
        ...

    def abort(self) -> None:
        """Discard everything written; idempotent, and a no-op after ``commit``."""
        ...


class Resumable(Writer, Protocol):
    """A resumable upload's object (tus, CONTRACT §9), written over several requests, possibly
    by several processes: each opens it at the durable offset, writes, and ``checkpoint``s.
    Its bytes live under the asset's prefix until ``commit`` publishes them, so
    ``delete_prefix`` discards an unfinished one. ``abort`` is never called on it."""

    def checkpoint(self, offset: int) -> dict[str, Any]:
        """Make every byte written so far durable (``offset`` is then the upload's length so
        far); answer the state to resume from (JSON), to be passed to ``open_resumable``."""
        ...


class Reader(Protocol):
    """An open object, positioned at the start of the requested range."""

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Storage(Protocol):
    """A storage driver (``fs`` or ``s3``)."""

    name: str
    # Objects up to this size may be read by ``read_small`` on the event loop: a few
    # page-cache syscalls cost less than a worker-thread trip. 0 where every read is network
    # I/O (S3), which never runs on the event loop.
    inline_read_bytes: int

    def open_writer(self, key: str) -> Writer:
        """Start writing an object under ``key`` (replacing any object there on commit)."""
        ...

    def open_resumable(self, key: str, upload_id: str, offset: int, state: dict[str, Any]) -> Resumable:
        """Continue the resumable upload ``upload_id`` of ``key`` from its durable ``offset``
        and the ``state`` its last checkpoint answered ({} for a new one); bytes written past
        ``offset`` by a request that failed are discarded."""
        ...

    def stat(self, key: str) -> ObjectInfo | None:
        """The committed object under ``key``, or None."""
        ...

    def open_reader(self, key: str, start: int = 0, end: int | None = None) -> Reader | None:
        """Bytes ``[start, end)`` of the object (``end`` None: to the end), or None if absent."""
        ...

    def read_small(self, key: str, limit: int) -> tuple[ObjectInfo, bytes | None] | None:
        """The committed object under ``key`` and, when it is at most ``limit`` bytes, all of
        them (else None); None if there is no object."""
        ...

    def delete(self, key: str) -> None:
        """Delete the object under ``key``; deleting a missing object is not an error."""
        ...

    def set_private(self, key: str, private: bool) -> bool:
        """Make the committed object under ``key`` private or public, atomically and durably
        (the next read sees it); False if there is no such object."""
        ...

    def set_held(self, key: str, held: bool, reason: HoldReason = "scan") -> bool:
        """Hold the committed object under ``key`` back from every download, or release it,
        for ``reason``: its malware scan (issue 48) or the trash (issue 47), each a flag of
        its own (served only when neither holds it); atomically and durably; False if there
        is no such object."""
        ...

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix`` (``…/``), uncommitted writes included; idempotent."""
        ...

    def filenames(self, prefix: str, limit: int) -> list[str]:
        """The filenames of the committed objects directly under ``prefix`` (``org/asset/``),
        sorted, at most ``limit`` of them; writes in progress are not listed."""
        ...

    def sizes(self, prefix: str, limit: int) -> list[tuple[str, int]]:
        """``filenames``, each with its object's size (from the same listing)."""
        ...

    def inventory(self) -> Iterator[StoredObject]:
        """Every committed object in the store, in no particular order, a few at a time (the
        scrub's walk); writes in progress, resumable uploads' parts and the driver's own files
        are not listed. Variants (``{org}/{asset}/v%…``) and presets (``{org}/presets/…``) are."""
        ...

    def check(self) -> None:
        """Raise unless the backend is reachable and writable (readiness)."""
        ...

    def close(self) -> None: ...


def write_small(storage: Storage, key: str, body: bytes, *, content_type: str, private: bool = False) -> None:
    """Publish ``body`` whole under ``key`` (replacing any object there); nothing is left
    behind if it fails. For blob's own small objects (presets, grant revocations)."""
    writer = storage.open_writer(key)
    try:
        writer.write(body)
        writer.commit(content_type=content_type, sha256=hashlib.sha256(body).hexdigest(), private=private)
    except BaseException:
        writer.abort()
        raise


def read_range(storage: Storage, key: str, start: int, end: int) -> bytes | None:
    """Bytes ``start`` to ``end`` (exclusive; fewer past the object's end) of the committed
    object under ``key``, in memory: only for small ranges or files the caller bounds. None if
    there is no object."""
    reader = storage.open_reader(key, start, end)
    if reader is None:
        return None
    try:
        return b"".join(reader)
    finally:
        reader.close()
