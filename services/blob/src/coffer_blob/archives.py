"""Archives clamd passes without reading them (issue 48).

ClamAV (1.4.6, Debian's) answers OK for a ZIP whose entries use the zip64 extensions, whatever
they hold: the EICAR file inside a zip64 entry, at the top or nested in an ordinary ZIP, and
a zip64 bomb, all pass (``tests/e2e/test_scan.py`` and ``services/blob/tests/test_scan.py``
show it with a real clamd). So does such a ZIP inside a gzip, bzip2 or xz stream, or a tar
file, however they nest. A file under Coffer's 100 MiB limit never needs zip64, so blob calls
such a file not scanned whole, as it does a file clamd stopped reading
(``Heuristics.Limits.Exceeded``): ``unscanned``, held under ``block``.

``unread`` walks what clamd called clean when it is an archive: a ZIP (by its end record, as
``zipfile`` finds one, or a file that starts as one), a tar file (``ustar`` at 257), or a
gzip, bzip2 or xz stream. It reads every ZIP entry's local header, and every member (a ZIP's
entry, a tar's file, a stream's content) whole, walking it the same way when it is itself an
archive (a ZIP at its start, or behind other bytes). The walk is bounded as clamd's own
reading is: ``MAX_DEPTH`` nested archives, ``MAX_ENTRIES`` members in all, ``MAX_EXTRACTED``
bytes decompressed (clamd's MaxScanSize, past which clamd too alerts); past a bound, or a
member it cannot read (a ZIP compression method ``zipfile`` lacks, such as Deflate64, which
clamd reads; a broken stream), it answers a reason (never a pass blob cannot vouch for).
Encrypted ZIP entries are read by no one here. Other formats (7z, RAR, CAB) are clamd's alone.
"""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import struct
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from typing import IO

from coffer_blob.storage import Storage
from coffer_blob.storage.base import read_range

ZIP_MAGIC = b"PK\x03\x04"
# Compressed streams, by their first bytes: their names.
_STREAMS = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
# A POSIX tar header's magic ("ustar", then NUL or a space), at 257.
TAR_MAGIC_AT = 257
TAR_MAGIC = b"ustar"
# The sizes that send a reader to the zip64 extra field (APPNOTE 4.5.3).
ZIP64_SIZE = 0xFFFFFFFF
# clamd's MaxRecursion is 17 and MaxFiles 10,000 by default; its MaxScanSize is the chart's
# 101 MiB (charts/coffer/values.yaml, clamav.streamMaxLength).
MAX_DEPTH = 16
MAX_ENTRIES = 10_000
MAX_EXTRACTED = 101 * 1024 * 1024  # every entry's bytes, decompressed
# Reads of the stored object: a block at a time (one ranged GET on S3).
BLOCK = 256 * 1024
# A nested archive is extracted into memory up to this, then into a temporary file.
SPOOL_BYTES = 8 * 1024 * 1024
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zipfile.structFileHeader


class Unreadable(Exception):
    """Why the archive was not read whole."""


class _Budget:
    def __init__(self) -> None:
        self.entries = 0
        self.extracted = 0

    def count(self, entries: int) -> None:
        self.entries += entries
        if self.entries > MAX_ENTRIES:
            raise Unreadable(f"an archive of more than {MAX_ENTRIES} entries")

    def extract(self, size: int) -> None:
        self.extracted += size
        if self.extracted > MAX_EXTRACTED:
            raise Unreadable(f"nested archives of more than {MAX_EXTRACTED} bytes")


class _StoredObject(io.RawIOBase):
    """The stored object as a seekable file, read in ranges."""

    def __init__(self, storage: Storage, key: str, size: int) -> None:
        self.storage, self.key, self.size, self.at = storage, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.at, io.SEEK_END: self.size}[whence]
        self.at = max(0, base + offset)
        return self.at

    def tell(self) -> int:
        return self.at

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        end = min(self.size, self.at + len(buffer))
        if end <= self.at:
            return 0
        data = read_range(self.storage, self.key, self.at, end) or b""
        buffer[: len(data)] = data
        self.at += len(data)
        return len(data)


def unread(storage: Storage, key: str, size: int) -> str | None:
    """Why the stored object, which clamd called clean, was not read whole by clamd; None when
    it is no archive, or one clamd reads."""
    with io.BufferedReader(_StoredObject(storage, key, size), buffer_size=BLOCK) as file:
        try:
            _inspect(file, _Budget(), depth=0)
        except Unreadable as exc:
            return str(exc)
    return None


def _kind(file: IO[bytes]) -> str | None:
    """What ``file`` (at its start) is, of what the walk reads: ``zip``, ``tar``, a stream's
    name, or None. Leaves the file at its start."""
    head = file.read(TAR_MAGIC_AT + len(TAR_MAGIC))
    file.seek(0)
    if head.startswith(ZIP_MAGIC):
        return "zip"
    for magic, name in _STREAMS.items():
        if head.startswith(magic):
            return name
    if head[TAR_MAGIC_AT:] == TAR_MAGIC:
        return "tar"
    found = zipfile.is_zipfile(file)  # an end record: a ZIP behind other bytes
    file.seek(0)
    return "zip" if found else None


def _inspect(file: IO[bytes], budget: _Budget, *, depth: int) -> None:
    kind = _kind(file)
    if kind is None:
        return
    if depth > MAX_DEPTH:
        raise Unreadable(f"archives nested more than {MAX_DEPTH} deep")
    if kind == "zip":
        _walk(file, budget, depth=depth)
    elif kind == "tar":
        _walk_tar(file, budget, depth=depth)
    else:
        _member(functools.partial(_decompressed, kind, file), f"a {kind} stream", budget, depth=depth)


def _decompressed(kind: str, file: IO[bytes]) -> io.BufferedIOBase:
    """A compressed stream's content, as a file (closed by ``_member``)."""
    if kind == "gzip":
        return gzip.GzipFile(fileobj=file, mode="rb")
    return bz2.BZ2File(file) if kind == "bzip2" else lzma.LZMAFile(file)


def _local_zip64(file: IO[bytes], info: zipfile.ZipInfo) -> bool:
    """The form clamd passes unread: the local header's sizes say "see the zip64 extra field"
    with no data descriptor after the data (flag bit 3 clear). A streamed entry (bit 3, as
    ``zip - -`` writes) clamd reads by its descriptor, and finds EICAR in."""
    file.seek(info.header_offset)
    head = file.read(_LOCAL_HEADER.size)
    if len(head) < _LOCAL_HEADER.size:
        raise Unreadable("a ZIP entry past the end of the file")
    fields = _LOCAL_HEADER.unpack(head)
    flags, compressed, uncompressed = fields[3], fields[8], fields[9]
    return not flags & 0x8 and ZIP64_SIZE in (compressed, uncompressed)


def _walk(file: IO[bytes], budget: _Budget, *, depth: int) -> None:
    try:
        archive = zipfile.ZipFile(file)
    except Exception as exc:  # whatever zipfile cannot read is not read whole
        raise Unreadable(f"a ZIP that cannot be read ({exc})") from exc
    with archive:
        entries = archive.infolist()
        budget.count(len(entries))
        # In the order they lie in the file: one read of the store per block, not per entry.
        for info in sorted(entries, key=lambda i: i.header_offset):
            if _local_zip64(file, info):
                raise Unreadable("a zip64 archive")
            if info.flag_bits & 0x1 or info.is_dir():  # encrypted: read by no one here
                continue
            _member(functools.partial(archive.open, info), "a ZIP entry", budget, depth=depth)


def _walk_tar(file: IO[bytes], budget: _Budget, *, depth: int) -> None:
    try:
        with tarfile.open(fileobj=file, mode="r:") as archive:
            for member in archive:  # one header at a time, in file order
                budget.count(1)
                if member.isfile():
                    read = functools.partial(archive.extractfile, member)
                    _member(read, "a tar member", budget, depth=depth)
    except Unreadable:
        raise
    except Exception as exc:  # a tar cut short, a header that is not one
        raise Unreadable(f"a tar file that cannot be read ({exc})") from exc


def _member(
    open_: Callable[[], IO[bytes] | io.BufferedIOBase | None], what: str, budget: _Budget, *, depth: int
) -> None:
    """Read a member (a ZIP entry, a tar member, a stream's content) whole, within the budget,
    and walk it when it is itself an archive."""
    try:
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            member = open_()
            assert member is not None  # (a regular file's)
            with member:
                while chunk := member.read(BLOCK):
                    budget.extract(len(chunk))
                    spool.write(chunk)
            spool.seek(0)
            _inspect(spool, budget, depth=depth + 1)
    except Unreadable:
        raise
    except NotImplementedError as exc:  # a compression method zipfile lacks (Deflate64): clamd reads it
        raise Unreadable(f"{what} in a form blob cannot read ({exc})") from exc
    except Exception as exc:  # a broken member (zlib, lzma, bz2, CRC, a stream cut short)
        raise Unreadable(f"{what} that cannot be read ({exc})") from exc
