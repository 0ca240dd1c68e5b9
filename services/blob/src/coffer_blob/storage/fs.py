"""The filesystem driver (the embedded default): objects under ``<blob_dir>/objects/<key>``.

Layout of one asset directory ``objects/org_…/ast_…/``:

- ``<filename>``: the object's bytes;
- ``%meta.<sha256 of filename>.json``: its content type and checksum (sidecar);
- ``%tmp.…``: writes in progress.

``%`` never survives filename sanitising (``coffer_blob.keys``), so no key can name a
sidecar or a temp file. Writes go to a temp file in the target directory, are fsynced, and
published by rename, the directory fsynced after each step. The sidecar is published before
the data file, and deleted after it, so "data file exists ⇒ sidecar exists" always holds;
the data rename is the commit point.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat as stat_mod
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from coffer_blob.storage.base import READ_CHUNK, ObjectInfo, StorageUnavailable

_RESERVED = "%"  # first character of the driver's own file names
# A file being written is flushed to disk every this many bytes, so the fsync at commit
# (which the answer waits for) has at most this much left to write.
SYNC_EVERY = 16 * 1024 * 1024


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sidecar_name(filename: str) -> str:
    return f"{_RESERVED}meta.{hashlib.sha256(filename.encode()).hexdigest()}.json"


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


def _read_file(path: str) -> bytes:
    """A small file's bytes in plain syscalls (no buffered file object): sidecars."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _read_fd(fd, 1 << 20)
    finally:
        os.close(fd)


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

    # -- paths ---------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        for part in parts:
            if part in ("", ".", "..") or part.startswith(_RESERVED) or "\x00" in part:
                raise ValueError(f"not a storage key: {key!r}")
        return self.objects.joinpath(*parts)

    def _makedirs(self, directory: Path) -> None:
        """Create ``directory`` under the objects root, fsyncing each parent that gains an entry."""
        self.objects.mkdir(parents=True, exist_ok=True)
        current = self.objects
        for part in directory.relative_to(self.objects).parts:
            child = current / part
            try:
                child.mkdir()
            except FileExistsError:
                pass
            else:
                _fsync_dir(current)
            current = child

    # -- the interface -------------------------------------------------------------------

    def open_writer(self, key: str) -> _FsWriter:
        path = self._path(key)
        try:
            # A concurrent prefix delete may remove the directory between mkdir and create.
            for attempt in range(3):
                self._makedirs(path.parent)
                try:
                    return _FsWriter(path, key)
                except FileNotFoundError:
                    if attempt == 2:
                        raise
        except OSError as exc:
            raise StorageUnavailable(f"cannot write {key}: {exc}") from exc
        raise AssertionError("unreachable")

    def stat(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageUnavailable(f"cannot stat {key}: {exc}") from exc
        return self._info(key, path, st)

    def read_small(self, key: str, limit: int) -> tuple[ObjectInfo, bytes | None] | None:
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageUnavailable(f"cannot read {key}: {exc}") from exc
        try:
            # One open for the size and the bytes: a delete in between cannot split them.
            st = os.fstat(fd)
            info = self._info(key, path, st)
            if info is None:
                return None
            return info, _read_fd(fd, st.st_size) if st.st_size <= limit else None
        except OSError as exc:
            raise StorageUnavailable(f"cannot read {key}: {exc}") from exc
        finally:
            os.close(fd)

    def open_reader(self, key: str, start: int = 0, end: int | None = None) -> _FsReader | None:
        path = self._path(key)
        try:
            fh = path.open("rb")
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
        path = self._path(key)
        try:
            # Data first: from here on the object is gone; the sidecar and the directory follow.
            path.unlink(missing_ok=True)
            (path.parent / _sidecar_name(path.name)).unlink(missing_ok=True)
            _fsync_dir(path.parent)
            self._remove_if_empty(path.parent)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise StorageUnavailable(f"cannot delete {key}: {exc}") from exc

    def delete_prefix(self, prefix: str) -> None:
        if not prefix.endswith("/"):
            raise ValueError(f"a prefix ends with '/': {prefix!r}")
        top = self._path(prefix[:-1])
        try:
            for directory, dirnames, filenames in os.walk(top, topdown=False):
                here = Path(directory)
                # Data files before sidecars and temp files, as in delete().
                for name in sorted(filenames, key=lambda n: n.startswith(_RESERVED)):
                    (here / name).unlink(missing_ok=True)
                for name in dirnames:
                    with contextlib.suppress(FileNotFoundError):
                        (here / name).rmdir()
            with contextlib.suppress(FileNotFoundError):
                top.rmdir()
                _fsync_dir(top.parent)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise StorageUnavailable(f"cannot delete {prefix}: {exc}") from exc

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

    def _info(self, key: str, path: Path, st: os.stat_result) -> ObjectInfo | None:
        """The object whose data file ``path`` has ``st``, if its sidecar says it is committed."""
        if not stat_mod.S_ISREG(st.st_mode):
            return None
        try:
            meta = json.loads(_read_file(os.path.join(path.parent, _sidecar_name(path.name))))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StorageUnavailable(f"cannot stat {key}: {exc}") from exc
        if meta.get("name") != path.name:
            return None  # a sidecar that belongs to another name: not a committed object
        return ObjectInfo(
            key=key,
            size=st.st_size,
            sha256=meta["sha256"],
            content_type=meta["contentType"],
            last_modified=datetime.fromtimestamp(int(st.st_mtime), UTC),
        )

    def _remove_if_empty(self, directory: Path) -> None:
        try:
            directory.rmdir()
        except OSError:
            return  # not empty (or already gone): fine either way
        _fsync_dir(directory.parent)


class _FsWriter:
    """A temp file in the target directory, published by ``commit``."""

    def __init__(self, final: Path, key: str) -> None:
        self.key = key
        self.final = final
        self.directory = final.parent
        self._tmp = self.directory / f"{_RESERVED}tmp.{secrets.token_hex(12)}"
        self._meta_tmp: Path | None = None
        self._fh: IO[bytes] | None = self._tmp.open("xb")
        self._committed = False
        self._unsynced = 0

    def write(self, chunk: bytes) -> None:
        assert self._fh is not None, "write after commit or abort"
        try:
            self._fh.write(chunk)
            self._unsynced += len(chunk)
            if self._unsynced >= SYNC_EVERY:
                self._fh.flush()
                os.fdatasync(self._fh.fileno())
                self._unsynced = 0
        except OSError as exc:
            raise StorageUnavailable(f"cannot write {self.final.name}: {exc}") from exc

    def commit(self, *, content_type: str, sha256: str) -> ObjectInfo:
        assert self._fh is not None, "commit after commit or abort"
        try:
            _write_durably(self._fh)
            self._fh.close()
            self._fh = None
            meta: dict[str, Any] = {"name": self.final.name, "contentType": content_type, "sha256": sha256}
            self._meta_tmp = self.directory / f"{_RESERVED}tmp.{secrets.token_hex(12)}"
            with self._meta_tmp.open("xb") as fh:
                fh.write(json.dumps(meta).encode())
                _write_durably(fh)
            os.replace(self._meta_tmp, self.directory / _sidecar_name(self.final.name))
            self._meta_tmp = None
            _fsync_dir(self.directory)
            os.replace(self._tmp, self.final)  # the commit point
            self._committed = True
            _fsync_dir(self.directory)
            st = self.final.stat()
        except OSError as exc:
            if not self._committed:
                self.abort()
            raise StorageUnavailable(f"cannot commit {self.final.name}: {exc}") from exc
        return ObjectInfo(
            key=self.key,
            size=st.st_size,
            sha256=sha256,
            content_type=content_type,
            last_modified=datetime.fromtimestamp(int(st.st_mtime), UTC),
        )

    def abort(self) -> None:
        if self._committed:
            return
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None
        try:
            self._tmp.unlink(missing_ok=True)
            if self._meta_tmp is not None:
                self._meta_tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageUnavailable(f"cannot clean up {self._tmp}: {exc}") from exc
        with contextlib.suppress(OSError):
            self.directory.rmdir()  # only if nothing else is in it


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
