"""ZIP archives clamd passes without reading them (issue 48).

ClamAV (1.4.6, Debian's) answers OK for a ZIP whose entries use the zip64 extensions, whatever
they hold: the EICAR file inside a zip64 entry, at the top or nested in an ordinary ZIP, and
a zip64 bomb, all pass (``tests/e2e/test_scan.py`` and ``services/blob/tests/test_scan.py``
show it with a real clamd). A file under Coffer's 100 MiB limit never needs zip64, so blob
calls such a file not scanned whole, as it does a file clamd stopped reading
(``Heuristics.Limits.Exceeded``): ``unscanned``, held under ``block``.

``zip64`` walks what clamd called clean when it is a ZIP (by its end record, as ``zipfile``
finds one, or a file that starts as one): every entry's local header, and every entry read
whole and walked the same way when it is itself a ZIP (at its start, or behind other bytes).
The walk is bounded as clamd's own reading is: ``MAX_DEPTH`` nested archives, ``MAX_ENTRIES``
entries in all, ``MAX_EXTRACTED`` bytes decompressed (clamd's MaxScanSize); past a bound, or
an entry ``zipfile`` cannot read (a compression method it lacks, such as Deflate64, which
clamd reads), it answers a reason too (never a pass blob cannot vouch for). Encrypted entries
are read by no one here. Other containers (gzip, tar) are left to clamd: a zip64 ZIP inside
one still passes (docs/security.md).
"""

from __future__ import annotations

import io
import struct
import tempfile
import zipfile
from typing import IO

from coffer_blob.storage import Storage
from coffer_blob.storage.base import read_range

ZIP_MAGIC = b"PK\x03\x04"
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


def zip64(storage: Storage, key: str, size: int) -> str | None:
    """Why the stored object, a ZIP clamd called clean, was not read whole by clamd; None when
    it is no ZIP, or one clamd reads."""
    with io.BufferedReader(_StoredObject(storage, key, size), buffer_size=BLOCK) as file:
        starts_as_zip = file.peek(len(ZIP_MAGIC))[: len(ZIP_MAGIC)] == ZIP_MAGIC
        if not starts_as_zip and not zipfile.is_zipfile(file):
            return None
        try:
            _walk(file, _Budget(), depth=0)
        except Unreadable as exc:
            return str(exc)
    return None


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
            _nested(archive, info, budget, depth=depth)


def _nested(archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget, *, depth: int) -> None:
    """Read the entry whole (within the budget) and walk it if it is itself a ZIP: one that
    starts as one, or one behind other bytes (``zipfile`` finds its end record)."""
    try:
        with archive.open(info) as member, tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            while chunk := member.read(BLOCK):
                budget.extract(len(chunk))
                spool.write(chunk)
            spool.seek(0)
            if not zipfile.is_zipfile(spool):
                return
            if depth + 1 > MAX_DEPTH:
                raise Unreadable(f"archives nested more than {MAX_DEPTH} deep")
            spool.seek(0)
            _walk(spool, budget, depth=depth + 1)
    except Unreadable:
        raise
    except NotImplementedError as exc:  # a compression method zipfile lacks (Deflate64): clamd reads it
        raise Unreadable(f"a ZIP entry in a form blob cannot read ({exc})") from exc
    except Exception as exc:  # a broken entry (zlib, lzma, CRC) is not read whole
        raise Unreadable(f"a ZIP entry that cannot be read ({exc})") from exc
