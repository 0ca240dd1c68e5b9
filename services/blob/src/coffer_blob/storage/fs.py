"""The filesystem driver (the embedded default): objects as files under ``<blob_dir>/objects/``.

A key ``<org>/<asset>/<filename>`` is stored in a *bucket* directory that its organization
shares with the assets whose ids start alike: ``objects/<org>/%<bucket>/``, where the bucket
is the first seven characters of the asset id after its type prefix (``ast_``). Asset ids
are ULIDs, so that is about 33 seconds of ids, and an upload creates no directory of its
own (a directory is one more fsync). In a bucket, for each object:

- ``<asset>.<h>``: the object's bytes, ``<h>`` being the first 32 hex digits of the SHA-256
  of the filename (so names stay short, whatever the filename);
- ``<asset>%meta.<h>``: its sidecar: the filename, content type and checksum, as JSON, and
  ``"private": true`` for a private object (CONTRACT §12; replaced whole, temp file then
  rename, when the visibility changes);
- ``<asset>%tmp.<random>``: writes in progress.

Everything stored for an asset is named ``<asset>.…`` or ``<asset>%…`` in its bucket (asset
ids are letters, digits and ``_``), which is how ``delete_prefix`` finds it without looking
beyond one bucket.

``%`` never survives filename sanitising (``coffer_kit.contract.keys``) and no key segment may start
with it, so no key can name a bucket, a sidecar or a temp file.

Publishing: the bytes go to a temp file in the bucket, fdatasynced every ``SYNC_EVERY``
bytes and fsynced at commit; the sidecar is written to a temp file and fsynced too. The
sidecar is renamed into place first and the data file second (the commit point), then one
fsync of the bucket makes both renames durable. So a data file is never visible without its
sidecar (deletes remove it first); a crash before that fsync may keep either rename or
neither, but nothing was acknowledged yet: the upload's intent still stands and the
sweeper's ``delete_prefix`` removes what is left. A directory made for a write is fsynced
into its parent before this process acknowledges any commit in it.

A file that arrives in batches of a MiB or more (a large upload) is written with
``O_DIRECT`` where the file system allows it: through a page-aligned stage a MiB at a time,
the last block padded and the file cut back to its length before the fsync at commit. Its
bytes never pass through the page cache, which a buffered write would first have to fill
with fresh pages (more CPU a MB than the direct write even with pages the kernel has at hand,
many times more on a virtual machine whose free pages go back to its host:
docs/performance.md#this-machine-memory-noise-and-swings; bench/results/journal.md, "Figures
moved out of code comments"), and the cache is left to what is read. Small files are written
buffered. So is a resumable upload's request (a tus chunk) whose first batch is smaller; a
larger one writes direct from the block boundary before its offset, the partial block there
read back and written again (``_FsResumable``).

Commits in one bucket share its fsync (``_DirSync``): a commit waits for an fsync of the
bucket that *started after its renames*, and one such fsync answers every commit waiting
for it, so concurrent uploads cost one directory fsync per group instead of one each.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import mmap
import os
import re
import secrets
import stat as stat_mod
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from coffer_blob.storage.base import READ_CHUNK, ObjectInfo, StorageUnavailable, StoredObject, flags_at_fresh
from coffer_kit.contract.ids import TUS_UPLOAD_ID_PATTERN
from coffer_kit.contract.wire import HoldReason

_RESERVED = "%"  # first character of the driver's own file names
# A sidecar's field: when a flag of the object last changed, in Unix seconds (ObjectInfo.flags_at).
FLAGS_AT = "flagsAt"
# A file being written is flushed to disk every this many bytes, so the fsync at commit
# (which the answer waits for) has at most this much left to write.
SYNC_EVERY = 16 * 1024 * 1024
# (A resumable upload's part file is flushed the same way: every fdatasync of a growing file
# also commits the file system's journal, so flushing a 5 MiB chunk every 512 KiB as it
# arrived cost the disk more than the checkpoint's one fsync saved; bench/results/journal.md,
# "Issue 24: resumable uploads (tus) ÷ `POST /api/assets`".)
# A file whose first batch is at least this large is written with O_DIRECT (module docstring).
DIRECT_MIN_BYTES = 1024 * 1024
# Direct writes go out a stage at a time; offsets and lengths are multiples of a block (the
# device's logical block is 512 or 4096 bytes), the stage's memory page-aligned (mmap).
_STAGE_BYTES = 1024 * 1024
_DIRECT_BLOCK = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux's; elsewhere every file is written buffered
# Characters of the asset id (after "ast_") that name its bucket: 7 ULID characters are the
# top 33 bits of a millisecond timestamp, about 33 s of uploads. Part of the on-disk format.
BUCKET_CHARS = 7
# Buffers ``os.writev`` takes in one call (Linux's IOV_MAX).
_IOV_MAX = 1024
_ASSET = re.compile(r"^[0-9A-Za-z_]{1,128}$")
_UPLOAD_ID = re.compile(TUS_UPLOAD_ID_PATTERN)


class _Place(NamedTuple):
    """Where one key's files are, in one layout (a tuple: made on every read)."""

    directory: str
    data: str
    sidecar: str
    temp_prefix: str  # a temp file's name is this plus a random suffix
    filename: str  # the key's filename, as its sidecar records it


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_data(place: _Place, key: str, doing: str) -> int | None:
    """The object's data file opened for reading; None if there is no such object (the error
    says what could not be done: ``doing`` the key)."""
    try:
        return os.open(place.data, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise StorageUnavailable(f"cannot {doing} {key}: {exc}") from exc


class _DirSync:
    """Group fsync of one directory: renames made before an fsync starts are durable when it
    ends, so every commit that arrived while one ran waits for the next, and one runs for all.

    At 16 concurrent 4 KiB uploads into one bucket, the directory fsync was one of three per
    upload, with a share of blob's busy samples of its own in ``bench/profile.py upload-small``
    (bench/results/journal.md, "3. 4 KiB uploads, 16 concurrent: 0.01× of nginx").
    """

    __slots__ = ("done", "running", "started", "users", "wake")

    def __init__(self) -> None:
        self.wake = threading.Condition()
        self.started = 0  # fsyncs begun
        self.done = 0  # the latest fsync that completed (they complete in order)
        self.running = False
        self.users = 0  # commits using this entry (guarded by the storage's lock)

    def sync(self, path: str) -> None:
        with self.wake:
            # One that is running may have started before our renames: the next one counts.
            needed = self.started + 1
            while self.done < needed:
                if self.running:
                    self.wake.wait()
                    continue
                self.started += 1
                ticket, self.running = self.started, True
                self.wake.release()
                try:
                    _fsync_dir(path)
                finally:
                    self.wake.acquire()
                    self.running = False
                    self.wake.notify_all()
                # (A failed fsync raised above; waiters start another one of their own.)
                self.done = ticket


def _read_fd(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``fd``'s position (fewer only at end of file)."""
    chunks = []
    while size > 0:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


_SIDECAR_READ = 64 * 1024


def _flags_at(value: Any) -> datetime | None:
    """A sidecar's ``flagsAt`` (Unix seconds), or None (absent, or not a time: never a reason
    to refuse the object)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _read_sidecar(path: str) -> dict[str, Any]:
    """A sidecar's JSON, read in plain syscalls (no buffered file object)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # A short read of a regular file is its end: one read for any sidecar (a few hundred
        # bytes), not a second one to find the end.
        chunks = [os.read(fd, _SIDECAR_READ)]
        while len(chunks[-1]) == _SIDECAR_READ:
            chunks.append(os.read(fd, _SIDECAR_READ))
    finally:
        os.close(fd)
    meta = json.loads(b"".join(chunks))
    if not isinstance(meta, dict):
        raise ValueError("a sidecar holds a JSON object")
    return meta


def _write_durably(fh: IO[bytes]) -> None:
    fh.flush()
    os.fsync(fh.fileno())


class FsStorage:
    """Objects as files; see the module docstring for the layout and the publish order."""

    name = "fs"
    inline_read_bytes = 64 * 1024

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self._objects = str(self.objects)
        # Directories this process made whose entry in their parent is not yet fsynced: a
        # commit in one of them (by another writer) fsyncs that parent itself.
        self._unsettled: set[str] = set()
        self._lock = threading.Lock()
        # Buckets with commits waiting for their fsync (entries go when the last one is done).
        self._dir_syncs: dict[str, _DirSync] = {}

    # -- paths ---------------------------------------------------------------------------

    def _split(self, key: str, segments: int = 3) -> list[str]:
        """``org/asset/filename`` (or, for a prefix, ``org/asset``) in its parts."""
        parts = key.split("/")
        if len(parts) != segments or not _ASSET.fullmatch(parts[1]):
            raise ValueError(f"not a storage key: {key!r}")
        for part in parts:
            if part in ("", ".", "..") or part.startswith(_RESERVED) or "\x00" in part:
                raise ValueError(f"not a storage key: {key!r}")
        return parts

    def _bucket(self, org: str, asset: str) -> str:
        return f"{self._objects}/{org}/{_RESERVED}{asset.split('_', 1)[-1][:BUCKET_CHARS]}"

    def _place(self, key: str) -> _Place:
        """Where ``key`` is written, and read first."""
        org, asset, filename = self._split(key)
        directory = self._bucket(org, asset)
        h = hashlib.sha256(filename.encode("utf-8", "surrogateescape")).hexdigest()[:32]
        return _Place(
            directory=directory,
            data=f"{directory}/{asset}.{h}",
            sidecar=f"{directory}/{asset}{_RESERVED}meta.{h}",
            temp_prefix=f"{directory}/{asset}{_RESERVED}tmp.",
            filename=filename,
        )

    def _makedirs(self, directory: str) -> None:
        """Create a bucket and its parents, fsyncing each parent that gains an entry."""
        self.root.mkdir(parents=True, exist_ok=True)
        org_dir = os.path.dirname(directory)
        for parent, child in (
            (str(self.root), self._objects),
            (self._objects, org_dir),
            (org_dir, directory),
        ):
            try:
                os.mkdir(child)
            except FileExistsError:
                continue
            with self._lock:
                self._unsettled.add(child)
            try:
                _fsync_dir(parent)
            finally:
                with self._lock:
                    self._unsettled.discard(child)

    def _sync_dir(self, directory: str) -> None:
        """Make renames already done in ``directory`` durable, sharing the fsync (``_DirSync``)."""
        with self._lock:
            sync = self._dir_syncs.get(directory)
            if sync is None:
                sync = self._dir_syncs[directory] = _DirSync()
            sync.users += 1
        try:
            sync.sync(directory)
        finally:
            with self._lock:
                sync.users -= 1
                if sync.users == 0:
                    del self._dir_syncs[directory]

    def _settle(self, directory: str) -> None:
        """Make ``directory``'s own entry durable if a writer that made it is still at it."""
        if not self._unsettled:  # (almost always)
            return
        with self._lock:
            made = [d for d in self._unsettled if directory == d or directory.startswith(d + "/")]
        for child in made:
            _fsync_dir(os.path.dirname(child))

    # -- the interface -------------------------------------------------------------------

    def open_writer(self, key: str) -> _FsWriter:
        place = self._place(key)
        try:
            # The bucket usually exists. It may also vanish (emptied and removed by a
            # delete) between mkdir and create: try again.
            for attempt in range(3):
                try:
                    return _FsWriter(self, place, key)
                except FileNotFoundError:
                    if attempt == 2:
                        raise
                    self._makedirs(place.directory)
        except OSError as exc:
            raise StorageUnavailable(f"cannot write {key}: {exc}") from exc
        raise AssertionError("unreachable")

    def open_resumable(
        self,
        key: str,
        upload_id: str,
        offset: int,
        state: dict[str, Any],  # noqa: ARG002 (the file is the whole state)
    ) -> _FsResumable:
        place = self._place(key)
        try:
            for attempt in range(3):
                try:
                    return _FsResumable(self, place, key, upload_id, offset)
                except FileNotFoundError:
                    if attempt == 2 or offset > 0:
                        raise
                    self._makedirs(place.directory)
        except FileNotFoundError as exc:
            raise StorageUnavailable(f"the bytes of upload {upload_id} are gone") from exc
        except OSError as exc:
            raise StorageUnavailable(f"cannot write {key}: {exc}") from exc
        raise AssertionError("unreachable")

    def stat(self, key: str) -> ObjectInfo | None:
        place = self._place(key)
        try:
            st = os.stat(place.data)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageUnavailable(f"cannot stat {key}: {exc}") from exc
        return self._info(key, place, st)

    def read_small(self, key: str, limit: int) -> tuple[ObjectInfo, bytes | None] | None:
        place = self._place(key)
        if (fd := _open_data(place, key, "read")) is None:
            return None
        try:
            # One open for the size and the bytes: a delete in between cannot split them.
            st = os.fstat(fd)
            info = self._info(key, place, st)
            if info is None:
                return None
            return info, _read_fd(fd, st.st_size) if st.st_size <= limit else None
        except OSError as exc:
            raise StorageUnavailable(f"cannot read {key}: {exc}") from exc
        finally:
            os.close(fd)

    def open_reader(self, key: str, start: int = 0, end: int | None = None) -> _FsReader | None:
        place = self._place(key)
        try:
            fh = open(place.data, "rb")  # noqa: SIM115 (closed by the reader)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as exc:
            raise StorageUnavailable(f"cannot read {key}: {exc}") from exc
        try:
            size = os.fstat(fh.fileno()).st_size
            end = size if end is None else min(end, size)
            fh.seek(start)
        except OSError as exc:
            fh.close()
            raise StorageUnavailable(f"cannot read {key}: {exc}") from exc
        return _FsReader(fh, max(0, end - start))

    def delete(self, key: str) -> None:
        place = self._place(key)
        try:
            # Data first: from here on the object is gone; the sidecar and the bucket follow.
            for path in (place.data, place.sidecar):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            # Even when nothing was left: an earlier attempt may have stopped before this.
            # (A missing bucket raises here: nothing was stored.)
            _fsync_dir(place.directory)
            self._remove_if_empty(place.directory)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise StorageUnavailable(f"cannot delete {key}: {exc}") from exc

    def delete_prefix(self, prefix: str) -> None:
        if not prefix.endswith("/"):
            raise ValueError(f"a prefix ends with '/': {prefix!r}")
        org, asset = self._split(prefix[:-1], segments=2)
        try:
            self._delete_in_bucket(org, asset)
        except OSError as exc:
            raise StorageUnavailable(f"cannot delete {prefix}: {exc}") from exc

    def filenames(self, prefix: str, limit: int) -> list[str]:
        return [name for name, _ in self.sizes(prefix, limit)]

    def sizes(self, prefix: str, limit: int) -> list[tuple[str, int]]:
        if not prefix.endswith("/"):
            raise ValueError(f"a prefix ends with '/': {prefix!r}")
        org, asset = self._split(prefix[:-1], segments=2)
        bucket = self._bucket(org, asset)
        sidecar = f"{asset}{_RESERVED}meta."
        try:
            with os.scandir(bucket) as entries:
                found = [e.name for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageUnavailable(f"cannot list {prefix}: {exc}") from exc
        hashes = {name[len(sidecar) :] for name in found if name.startswith(sidecar)}
        data = {name[len(asset) + 1 :] for name in found if name.startswith(f"{asset}.")}
        names: list[tuple[str, int]] = []
        for h in sorted(hashes & data):  # committed: the data file is there beside its sidecar
            try:
                meta = _read_sidecar(f"{bucket}/{sidecar}{h}")
                size = os.stat(f"{bucket}/{asset}.{h}").st_size
            except FileNotFoundError:
                continue  # deleted meanwhile
            except (OSError, ValueError) as exc:
                raise StorageUnavailable(f"cannot list {prefix}: {exc}") from exc
            names.append((str(meta["name"]), size))
        return sorted(names)[:limit]

    def inventory(self) -> Iterator[StoredObject]:
        """Each bucket's data files that have their sidecar, under the key the sidecar names."""
        try:
            orgs = sorted(e.name for e in os.scandir(self._objects) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageUnavailable(f"cannot list {self._objects}: {exc}") from exc
        for org in orgs:
            org_dir = f"{self._objects}/{org}"
            try:
                buckets = sorted(e.name for e in os.scandir(org_dir) if e.name.startswith(_RESERVED))
            except (FileNotFoundError, NotADirectoryError):
                continue  # removed meanwhile
            except OSError as exc:
                raise StorageUnavailable(f"cannot list {org_dir}: {exc}") from exc
            for bucket in buckets:
                yield from self._bucket_inventory(org, f"{org_dir}/{bucket}")

    def _bucket_inventory(self, org: str, bucket: str) -> Iterator[StoredObject]:
        try:
            with os.scandir(bucket) as entries:
                names = {e.name for e in entries}
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise StorageUnavailable(f"cannot list {bucket}: {exc}") from exc
        for name in sorted(names):
            asset, dot, h = name.partition(".")
            # A data file is "<asset>.<h>" (asset ids have no "." or "%"); the rest are the
            # driver's own files (sidecars, temp files, resumable uploads' parts).
            if not dot or _RESERVED in asset or f"{asset}{_RESERVED}meta.{h}" not in names:
                continue
            try:
                st = os.stat(f"{bucket}/{name}")
            except FileNotFoundError:
                continue  # deleted meanwhile
            except OSError as exc:
                raise StorageUnavailable(f"cannot read {bucket}/{name}: {exc}") from exc
            sidecar, key, damage = f"{bucket}/{asset}{_RESERVED}meta.{h}", f"{org}/{asset}/", ""
            try:
                key += _read_sidecar(sidecar)["name"]
            except FileNotFoundError:
                continue
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # One damaged object is a finding (the scrub's), not the end of the walk.
                damage = f"{sidecar} is unreadable: {exc!r}"
            yield StoredObject(
                key=key,
                size=st.st_size,
                last_modified=datetime.fromtimestamp(int(st.st_mtime), UTC),
                damage=damage,
            )

    def check(self) -> None:
        try:
            self.objects.mkdir(parents=True, exist_ok=True)
            probe = self.root / f"{_RESERVED}ready.{secrets.token_hex(8)}"
            with probe.open("xb") as fh:
                fh.write(b"ok")
                _write_durably(fh)
            probe.unlink()
        except OSError as exc:
            raise StorageUnavailable(f"blob dir {self.root} is not writable: {exc}") from exc

    def close(self) -> None:
        pass

    # -- helpers -------------------------------------------------------------------------

    def _info(self, key: str, place: _Place, st: os.stat_result) -> ObjectInfo | None:
        """The object whose data file has ``st``, if its sidecar says it is committed."""
        if not stat_mod.S_ISREG(st.st_mode):
            return None
        try:
            meta = _read_sidecar(place.sidecar)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StorageUnavailable(f"cannot stat {key}: {exc}") from exc
        if meta.get("name") != place.filename:
            return None  # a sidecar that belongs to another name: not a committed object
        return ObjectInfo(
            key=key,
            size=st.st_size,
            sha256=meta["sha256"],
            content_type=meta["contentType"],
            last_modified=datetime.fromtimestamp(int(st.st_mtime), UTC),
            private=meta.get("private") is True,
            held=meta.get("held") is True,
            trashed=meta.get("trashed") is True,
            flags_at=_flags_at(meta.get(FLAGS_AT)),
        )

    def set_private(self, key: str, private: bool) -> bool:
        return self._set_flag(key, "private", private)

    def set_held(self, key: str, held: bool, reason: HoldReason = "scan") -> bool:
        return self._set_flag(key, "held" if reason == "scan" else "trashed", held)

    def _set_flag(self, key: str, flag: str, on: bool) -> bool:
        """Set or clear ``flag`` in the committed object's sidecar (replaced whole, durably).
        Changes of one object's flags take turns (a lock on its data file, which they never
        replace, across processes): each reads the sidecar the last one wrote, so two at once
        (a scan's release as the object goes to the trash) cannot undo each other."""
        place = self._place(key)
        if (data := _open_data(place, key, "change the flags of")) is None:
            return False
        try:
            fcntl.flock(data, fcntl.LOCK_EX)
            return self._set_flag_locked(key, place, flag, on)
        finally:
            os.close(data)

    def _set_flag_locked(self, key: str, place: _Place, flag: str, on: bool) -> bool:
        temp = place.temp_prefix + secrets.token_hex(12)
        try:
            try:
                meta = _read_sidecar(place.sidecar)
            except (FileNotFoundError, NotADirectoryError):
                return False
            if meta.get("name") != place.filename or not os.path.exists(place.data):
                return False
            if (meta.get(flag) is True) == on and flags_at_fresh(_flags_at(meta.get(FLAGS_AT))):
                return True
            meta.pop(flag, None)
            if on:
                meta[flag] = True
            meta[FLAGS_AT] = int(time.time())
            with open(temp, "xb") as fh:
                fh.write(json.dumps(meta).encode())
                _write_durably(fh)
            os.replace(temp, place.sidecar)
            _fsync_dir(place.directory)
            if not os.path.exists(place.data):
                # Deleted meanwhile (data first, then the sidecar): leave no sidecar behind.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(place.sidecar)
                return False
            return True
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise StorageUnavailable(f"cannot change the flags of {key}: {exc}") from exc

    def _delete_in_bucket(self, org: str, asset: str) -> None:
        bucket = self._bucket(org, asset)
        try:
            with os.scandir(bucket) as entries:
                names = [e.name for e in entries if e.name.startswith((f"{asset}.", f"{asset}{_RESERVED}"))]
        except (FileNotFoundError, NotADirectoryError):
            return
        # Data files before sidecars and temp files, as in delete().
        for name in sorted(names, key=lambda n: n[len(asset)] == _RESERVED):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{bucket}/{name}")
        with contextlib.suppress(FileNotFoundError):
            _fsync_dir(bucket)  # even when nothing was left, as in delete()
            self._remove_if_empty(bucket)

    def _remove_if_empty(self, directory: str) -> None:
        try:
            os.rmdir(directory)
        except OSError:
            return  # not empty (or already gone): fine either way
        _fsync_dir(os.path.dirname(directory))


class _Stages:
    """Page-aligned buffers for direct writes, a few kept for the uploads that follow (their
    pages stay this process's, rather than fresh ones each time)."""

    def __init__(self, keep: int = 4) -> None:
        self._free: list[mmap.mmap] = []
        self._keep = keep
        self._lock = threading.Lock()

    def take(self) -> mmap.mmap:
        with self._lock:
            if self._free:
                return self._free.pop()
        return mmap.mmap(-1, _STAGE_BYTES)

    def give(self, stage: mmap.mmap) -> None:
        with self._lock:
            if len(self._free) < self._keep:
                self._free.append(stage)
                return
        stage.close()


_STAGES = _Stages()


class _DirectWrite:
    """A file's bytes written with O_DIRECT: gathered into a page-aligned stage, written a
    stage at a time, the tail padded to a block and the file cut back to its length."""

    def __init__(self, fd: int, head: bytes = b"", size: int = 0) -> None:
        """Writes from the file's position, which is at a block boundary: ``head``, the bytes
        from there to its end (a resumable file's last partial block), is written again with
        what follows; ``size`` is the file's length so far."""
        self.fd = fd
        self.stage: mmap.mmap | None = _STAGES.take()
        self.stage[: len(head)] = head
        self.staged = len(head)
        self.size = size  # the file's length: what was written, without the padding

    def write(self, chunks: Sequence[bytes]) -> None:
        assert self.stage is not None, "write after finish"
        fill = self.staged
        with memoryview(self.stage) as stage:
            for chunk in chunks:
                piece = memoryview(chunk)
                while piece:
                    n = min(len(piece), _STAGE_BYTES - fill)
                    stage[fill : fill + n] = piece[:n]
                    fill += n
                    piece = piece[n:]
                    if fill == _STAGE_BYTES:
                        self._out(stage, _STAGE_BYTES)
                        fill = 0
                self.size += len(chunk)
        self.staged = fill

    def finish(self) -> None:
        """Write what is staged, padded to a block, and cut the file back to its length."""
        assert self.stage is not None, "finish after finish"
        if self.staged:
            padded = -(-self.staged // _DIRECT_BLOCK) * _DIRECT_BLOCK
            with memoryview(self.stage) as stage:
                stage[self.staged : padded] = bytes(padded - self.staged)
                self._out(stage, padded)
            os.ftruncate(self.fd, self.size)
        self.release()

    def release(self) -> None:
        if self.stage is not None:
            stage, self.stage = self.stage, None
            _STAGES.give(stage)

    def _out(self, stage: memoryview, length: int) -> None:
        # A regular file takes a direct write whole or fails; a short one would leave the
        # next unaligned, so it fails the upload.
        written = os.write(self.fd, stage[:length])
        if written != length:
            raise OSError(errno.EIO, f"a direct write took {written} of {length} bytes")


def _go_direct(fd: int) -> bool:
    """Turn O_DIRECT on for ``fd``; False where the file system refuses it (tmpfs, say)."""
    if not _O_DIRECT:
        return False
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | _O_DIRECT)
    except OSError:
        return False
    return True


class _FsWriter:
    """A temp file in the bucket, published by ``commit``."""

    _sync_every = SYNC_EVERY  # flushed to disk every this many bytes
    _direct_min: int | None = DIRECT_MIN_BYTES  # a first batch this large goes direct
    _direct: _DirectWrite | None = None

    def __init__(self, storage: FsStorage, place: _Place, key: str) -> None:
        self.storage = storage
        self.place = place
        self.key = key
        self._tmp = place.temp_prefix + secrets.token_hex(12)
        self._meta_tmp: str | None = None
        self._fh: IO[bytes] | None = open(self._tmp, "xb")  # noqa: SIM115 (closed at commit or abort)
        self._committed = False
        self._unsynced = 0

    def write(self, chunk: bytes) -> None:
        assert self._fh is not None, "write after commit or abort"
        if self._direct is not None:
            self.write_many([chunk])
            return
        self._direct_min = None  # begun buffered: stays so
        try:
            self._fh.write(chunk)
            self._written(self._fh, len(chunk))
        except OSError as exc:
            raise StorageUnavailable(f"cannot write {self.key}: {exc}") from exc

    def write_many(self, chunks: Sequence[bytes]) -> None:
        """The chunks in order with ``writev``: the kernel gathers them, so a batch of the
        pieces a socket delivered is never joined into one buffer first (one copy, not two).
        A first batch of ``DIRECT_MIN_BYTES`` or more turns the file direct (module docstring)."""
        fh = self._fh
        assert fh is not None, "write after commit or abort"
        try:
            if self._direct_min is not None:
                if sum(len(c) for c in chunks) >= self._direct_min:
                    self._direct = self._go_direct(fh)
                self._direct_min = None
            if self._direct is not None:
                self._direct.write(chunks)
                return
            fh.flush()  # (empty unless a small ``write`` came first)
            fd = fh.fileno()
            pending = [memoryview(c) for c in chunks if c]
            total = sum(len(c) for c in pending)
            while pending:
                done = os.writev(fd, pending[:_IOV_MAX])
                while pending and done >= len(pending[0]):  # drop what went whole
                    done -= len(pending[0])
                    pending.pop(0)
                if done:  # a short write ended inside a chunk
                    pending[0] = pending[0][done:]
            self._written(fh, total)
        except OSError as exc:
            raise StorageUnavailable(f"cannot write {self.key}: {exc}") from exc

    def _go_direct(self, fh: IO[bytes]) -> _DirectWrite | None:
        """The file's writes from now on direct, if its file system allows."""
        return _DirectWrite(fh.fileno()) if _go_direct(fh.fileno()) else None

    def _written(self, fh: IO[bytes], size: int) -> None:
        self._unsynced += size
        if self._unsynced >= self._sync_every:
            fh.flush()
            os.fdatasync(fh.fileno())
            self._unsynced = 0

    def commit(
        self, *, content_type: str, sha256: str, private: bool = False, held: bool = False
    ) -> ObjectInfo:
        assert self._fh is not None, "commit after commit or abort"
        place = self.place
        try:
            if self._direct is not None:
                self._direct.finish()
            _write_durably(self._fh)
            self._fh.close()
            self._fh = None
            meta: dict[str, Any] = {"name": place.filename, "contentType": content_type, "sha256": sha256}
            if private:
                meta["private"] = True
            if held:
                meta["held"] = True
            self._meta_tmp = place.temp_prefix + secrets.token_hex(12)
            with open(self._meta_tmp, "xb") as fh:
                fh.write(json.dumps(meta).encode())
                _write_durably(fh)
            os.replace(self._meta_tmp, place.sidecar)
            self._meta_tmp = None
            os.replace(self._tmp, place.data)  # the commit point
            self._committed = True
            self.storage._sync_dir(place.directory)  # both renames, durably
            self.storage._settle(place.directory)
            st = os.stat(place.data)
        except OSError as exc:
            if not self._committed:
                self.abort()
            raise StorageUnavailable(f"cannot commit {self.key}: {exc}") from exc
        return ObjectInfo(
            key=self.key,
            size=st.st_size,
            sha256=sha256,
            content_type=content_type,
            last_modified=datetime.fromtimestamp(int(st.st_mtime), UTC),
            private=private,
            held=held,
        )

    def abort(self) -> None:
        if self._committed:
            return
        if self._direct is not None:
            self._direct.release()
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None
        try:
            for path in (self._tmp, self._meta_tmp):
                if path is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
        except OSError as exc:
            raise StorageUnavailable(f"cannot clean up {self._tmp}: {exc}") from exc
        with contextlib.suppress(OSError):
            os.rmdir(self.place.directory)  # only if nothing else is in it


class _FsResumable(_FsWriter):
    """A resumable upload's part file: a temp file in the bucket named after the upload, cut
    back to the durable offset when opened, fsynced at each checkpoint, published by
    ``commit`` as any object is. A request whose first batch is a MiB or more writes direct,
    as a one-shot upload does, from the block boundary before its offset (the partial block
    there read back and written again); a smaller one writes buffered."""

    def __init__(self, storage: FsStorage, place: _Place, key: str, upload_id: str, offset: int) -> None:
        if not _UPLOAD_ID.fullmatch(upload_id):
            raise ValueError(f"not an upload id: {upload_id!r}")
        self.storage, self.place, self.key = storage, place, key
        self._tmp = f"{place.temp_prefix}tus.{upload_id}"
        self._meta_tmp = None
        self._committed = False
        self._unsynced = 0
        self._offset = offset
        # A new upload creates its file; a later request finds it (FileNotFoundError if not).
        flags = os.O_RDWR | (0 if offset else os.O_CREAT)
        self._fh = os.fdopen(os.open(self._tmp, flags, 0o666), "r+b")
        self._fh.truncate(offset)  # what a failed request wrote past the offset
        self._fh.seek(offset)

    def _go_direct(self, fh: IO[bytes]) -> _DirectWrite | None:
        fd, offset = fh.fileno(), self._offset
        start = offset - offset % _DIRECT_BLOCK
        head = os.pread(fd, offset - start, start)  # read before O_DIRECT, which wants blocks
        if len(head) != offset - start or not _go_direct(fd):
            return None
        os.lseek(fd, start, os.SEEK_SET)
        return _DirectWrite(fd, head, offset)

    def checkpoint(self, offset: int) -> dict[str, Any]:  # noqa: ARG002 (the file's length is the offset)
        assert self._fh is not None
        try:
            if self._direct is not None:
                self._direct.finish()
            _write_durably(self._fh)
            self._fh.close()
        except OSError as exc:
            raise StorageUnavailable(f"cannot write {self.key}: {exc}") from exc
        self._fh = None
        self._committed = True  # (nothing for abort to undo: the bytes are kept)
        return {}

    def abort(self) -> None:
        """Close the file, keeping its bytes (an unfinished upload goes with its prefix)."""
        if self._direct is not None:
            self._direct.release()
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None


class _FsReader:
    def __init__(self, fh: IO[bytes], length: int) -> None:
        self._fh = fh
        self._remaining = length

    def __iter__(self) -> Iterator[bytes]:
        while self._remaining > 0:
            data = self._fh.read(min(READ_CHUNK, self._remaining))
            if not data:
                return
            self._remaining -= len(data)
            yield data

    def close(self) -> None:
        self._fh.close()
