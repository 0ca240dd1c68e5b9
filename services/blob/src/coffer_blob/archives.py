"""ZIP archives clamd passes without reading them (issue 48).

ClamAV (1.4.6, Debian's) answers OK for a ZIP whose entries use the zip64 extensions, whatever
they hold: the EICAR file inside a zip64 entry, at the top or nested in an ordinary ZIP, and
a zip64 bomb, all pass (``tests/e2e/test_scan.py`` and ``services/blob/tests/test_scan.py``
show it with a real clamd). A file under Coffer's 100 MiB limit never needs zip64, so blob
calls such a file not scanned whole, as it does a file clamd stopped reading
(``Heuristics.Limits.Exceeded``): ``unscanned``, held under ``block``.

``zip64`` walks what clamd called clean when it is a ZIP (by its end record, as ``zipfile``
finds one, or a file that starts as one): every entry's central and local header, and each
entry that is itself a ZIP, extracted (bounded) and walked the same way. The walk is bounded
as clamd's own reading is: ``MAX_DEPTH`` nested archives, ``MAX_ENTRIES`` entries in all,
``MAX_EXTRACTED`` bytes of nested archives extracted; past a bound, or a ZIP ``zipfile``
cannot read, it answers a reason too (never a pass blob cannot vouch for). Encrypted entries
and compression methods ``zipfile`` lacks are left to clamd, as they are read by no one here.
"""

from __future__ import annotations

import io
import struct
import tempfile
import zipfile
import zlib
from typing import IO

from coffer_blob.storage import Storage
from coffer_blob.storage.base import read_range

ZIP_MAGIC = b"PK\x03\x04"
# The zip64 extended information extra field's id (APPNOTE 4.5.3), and the sizes that send a
# reader to it.
ZIP64_EXTRA = 0x0001
ZIP64_SIZE = 0xFFFFFFFF
# clamd's MaxRecursion is 17 and MaxFiles 10,000 by default; its MaxScanSize is the chart's
# 101 MiB (charts/coffer/values.yaml, clamav.streamMaxLength).
MAX_DEPTH = 16
MAX_ENTRIES = 10_000
MAX_EXTRACTED = 101 * 1024 * 1024
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


def _zip64_extra(extra: bytes) -> bool:
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        if kind == ZIP64_EXTRA:
            return True
        at += 4 + length
    return False


def _local_zip64(file: IO[bytes], info: zipfile.ZipInfo) -> bool:
    file.seek(info.header_offset)
    head = file.read(_LOCAL_HEADER.size)
    if len(head) < _LOCAL_HEADER.size:
        raise Unreadable("a ZIP entry past the end of the file")
    fields = _LOCAL_HEADER.unpack(head)
    compressed, uncompressed, name_length, extra_length = fields[8], fields[9], fields[10], fields[11]
    file.seek(name_length, io.SEEK_CUR)
    extra = file.read(extra_length)
    return ZIP64_SIZE in (compressed, uncompressed) or _zip64_extra(extra)


def _walk(file: IO[bytes], budget: _Budget, *, depth: int) -> None:
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise Unreadable(f"a ZIP that cannot be read ({exc})") from exc
    with archive:
        entries = archive.infolist()
        budget.count(len(entries))
        for info in entries:
            if ZIP64_SIZE in (info.compress_size, info.file_size) or _zip64_extra(info.extra):
                raise Unreadable("a zip64 archive")
            if _local_zip64(file, info):
                raise Unreadable("a zip64 archive")
            if info.flag_bits & 0x1 or info.is_dir():  # encrypted: read by no one here
                continue
            _nested(archive, info, budget, depth=depth)


def _nested(archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: _Budget, *, depth: int) -> None:
    """Walk the entry if it is itself a ZIP."""
    try:
        with archive.open(info) as member:
            head = member.read(len(ZIP_MAGIC))
            if head != ZIP_MAGIC:
                return
            if depth + 1 > MAX_DEPTH:
                raise Unreadable(f"archives nested more than {MAX_DEPTH} deep")
            with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
                spool.write(head)
                budget.extract(len(head))
                while chunk := member.read(BLOCK):
                    budget.extract(len(chunk))
                    spool.write(chunk)
                spool.seek(0)
                _walk(spool, budget, depth=depth + 1)
    except NotImplementedError:  # a compression method zipfile lacks: left to clamd
        return
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        raise Unreadable(f"a ZIP entry that cannot be read ({exc})") from exc
