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

Where clamd and this walk would read a file differently, what the walk reads there clamd may
not have, so the walk refuses the file. Each form is one clamd 1.4.6 answers OK for with EICAR
inside (``test_scan.py``): a ZIP entry in a compression method clamd does not decompress (LZMA,
which ``zipfile`` does); a local header whose method, encryption flag or sizes differ from its
central directory record's (clamd goes by the local header, ``zipfile`` by the directory); in a
file that starts as a ZIP, a local header the central directory does not list (clamd reads the
listed entries alone; behind other bytes it looks for every local header itself); anything but
zero bytes after a bzip2 stream (clamd reads the first alone), after zero bytes behind a gzip
member, or after a tar file's end.
"""

from __future__ import annotations

import bz2
import contextlib
import functools
import io
import lzma
import struct
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Generator
from typing import IO, Protocol

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
_CENTRAL_HEADER = struct.Struct("<4s4B4HL2L5H2L")  # zipfile.structCentralDir
_CENTRAL_MAGIC = b"PK\x01\x02"
# A zip64 end record's signature, and its size with its locator's (zipfile.sizeEndCentDir64,
# sizeEndCentDir64Locator): the central directory ends before them.
_ZIP64_END, _ZIP64_END_AND_LOCATOR = b"PK\x06\x06", 56 + 20
# The ZIP compression methods clamd decompresses (APPNOTE 4.4.5): stored, implode (libclamav's
# explode.c), deflate, Deflate64 and bzip2, EICAR found in each measured (not implode: nothing
# here writes it). An entry in any other it passes unread, LZMA (14) among them, which zipfile
# reads. (zipfile lacks implode and Deflate64: refused in _member, as a form blob cannot read.)
CLAMD_ZIP_METHODS = frozenset({0, 6, 8, 9, 12})
# General purpose flags: encrypted, sizes in a data descriptor after the data.
_ENCRYPTED, _DESCRIPTOR = 0x1, 0x8


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


class _Decompressor(Protocol):
    """bz2's and lzma's decompressor objects (and ``_Inflate``), as ``_decompressed`` uses them."""

    @property
    def eof(self) -> bool: ...
    @property
    def needs_input(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...
    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


class _Inflate:
    """One gzip member's zlib decompressor with the interface of bz2's and lzma's: the input
    past ``max_length`` held inside."""

    def __init__(self) -> None:
        self.zlib = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    @property
    def eof(self) -> bool:
        return self.zlib.eof

    @property
    def needs_input(self) -> bool:
        return not self.zlib.unconsumed_tail

    @property
    def unused_data(self) -> bytes:
        return self.zlib.unused_data

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        return self.zlib.decompress(self.zlib.unconsumed_tail + data, max(0, max_length))


_DECOMPRESSORS: dict[str, Callable[[], _Decompressor]] = {
    "gzip": _Inflate,
    "bzip2": bz2.BZ2Decompressor,
    "xz": functools.partial(lzma.LZMADecompressor, lzma.FORMAT_XZ),
}


def _decompressed(kind: str, file: IO[bytes]) -> Generator[bytes, None, None]:
    """A compressed stream's content as clamd reads it, a block at a time: gzip members back to
    back, xz streams with zero bytes (their padding) between them, one bzip2 stream; zero bytes
    after the last. Anything else after a stream clamd does not read: Unreadable."""
    pending = b""
    while True:
        decompressor = _DECOMPRESSORS[kind]()
        while not decompressor.eof:
            data = pending or (file.read(BLOCK) if decompressor.needs_input else b"")
            pending = b""
            out = decompressor.decompress(data, BLOCK)
            if not (data or out or decompressor.eof):
                raise EOFError("the file ends inside it")
            yield out
        after, padded = decompressor.unused_data, False
        while not (pending := after.lstrip(b"\0")):
            padded = padded or bool(after)
            if not (after := file.read(BLOCK)):
                return  # nothing but zero bytes to the end
        padded = padded or len(pending) < len(after)
        if kind == "bzip2" or (kind == "gzip" and padded):
            raise Unreadable(f"data after a {kind} stream, which clamd does not read")


def _read(file: IO[bytes] | None) -> Generator[bytes, None, None]:
    """A member's bytes (a ZIP entry's, a tar member's), a block at a time."""
    assert file is not None  # (a regular file's)
    with file:
        while chunk := file.read(BLOCK):
            yield chunk


def _local_header(file: IO[bytes], info: zipfile.ZipInfo) -> int:
    """Check the entry's local header against its central directory record, as clamd reads the
    first and zipfile the second; answer where the entry's data ends."""
    file.seek(info.header_offset)
    head = file.read(_LOCAL_HEADER.size)
    if len(head) < _LOCAL_HEADER.size:
        raise Unreadable("a ZIP entry past the end of the file")
    fields = _LOCAL_HEADER.unpack(head)
    flags, method, compressed, uncompressed = fields[3], fields[4], fields[8], fields[9]
    # The form clamd passes unread: the sizes say "see the zip64 extra field" with no data
    # descriptor after the data. A streamed entry (bit 3, as ``zip - -`` writes) clamd reads by
    # its central directory record, and finds EICAR in.
    if not flags & _DESCRIPTOR and ZIP64_SIZE in (compressed, uncompressed):
        raise Unreadable("a zip64 archive")
    if (
        method != info.compress_type
        or (flags ^ info.flag_bits) & _ENCRYPTED
        or (not flags & _DESCRIPTOR and (compressed, uncompressed) != (info.compress_size, info.file_size))
    ):
        raise Unreadable("a ZIP entry whose local header and central directory disagree")
    name_length, extra_length = fields[10], fields[11]
    return int(info.header_offset + _LOCAL_HEADER.size + name_length + extra_length + info.compress_size)


def _holds_local_header(file: IO[bytes], start: int, end: int) -> bool:
    """Whether the bytes from ``start`` to ``end`` hold a ZIP local header's signature."""
    file.seek(start)
    tail = b""
    while start < end and (block := file.read(min(BLOCK, end - start))):
        if ZIP_MAGIC in tail + block:
            return True
        start += len(block)
        tail = block[-(len(ZIP_MAGIC) - 1) :]
    return False


def _count_directory(file: IO[bytes], budget: _Budget) -> None:
    """Count the central directory's records into ``budget``, a header at a time, where zipfile
    will find them and before it reads them: it reads the whole directory and makes an object
    of every record, however many (a 45 MiB file of bare records: 270 MiB and 7 s, before the
    bound on entries was checked). Its own end record's count is not trusted: zipfile does not."""
    try:
        end = zipfile._EndRecData(file)  # type: ignore[attr-defined]  # (how ZipFile finds it)
    except OSError:
        return  # (ZipFile refuses it)
    if not end:
        return
    size = end[5]  # _ECD_SIZE; at _ECD_LOCATION (9), the end record's own offset
    start = end[9] - size - (_ZIP64_END_AND_LOCATOR if end[0] == _ZIP64_END else 0)
    at = start
    while at < start + size:
        file.seek(at)
        head = file.read(_CENTRAL_HEADER.size)
        if len(head) < _CENTRAL_HEADER.size or not head.startswith(_CENTRAL_MAGIC):
            return  # (ZipFile refuses it)
        budget.count(1)
        name_length, extra_length, comment_length = _CENTRAL_HEADER.unpack(head)[12:15]
        at += _CENTRAL_HEADER.size + name_length + extra_length + comment_length
    file.seek(0)


def _walk(file: IO[bytes], budget: _Budget, *, depth: int) -> None:
    _count_directory(file, budget)
    try:
        archive = zipfile.ZipFile(file)
    except Exception as exc:  # whatever zipfile cannot read is not read whole
        raise Unreadable(f"a ZIP that cannot be read ({exc})") from exc
    with archive:
        entries = archive.infolist()
        # A file that starts as a ZIP clamd reads by its central directory alone: a local header
        # it does not list (before the directory, between or before the entries it lists, as a
        # ZIP before another has) is read by no one. Behind other bytes, clamd finds each itself.
        file.seek(0)
        unlisted_at = 0 if file.read(len(ZIP_MAGIC)) == ZIP_MAGIC else None
        # In the order they lie in the file: one read of the store per block, not per entry.
        for info in sorted(entries, key=lambda i: i.header_offset):
            end = _local_header(file, info)
            if unlisted_at is not None:
                if _holds_local_header(file, unlisted_at, info.header_offset):
                    raise Unreadable("a ZIP entry its central directory does not list")
                unlisted_at = max(unlisted_at, end)
            if info.flag_bits & _ENCRYPTED:  # read by no one here
                continue
            if info.compress_type not in CLAMD_ZIP_METHODS:
                raise Unreadable(
                    f"a ZIP entry compressed with method {info.compress_type}, which clamd does not read"
                )
            if info.is_dir():
                continue
            _member(functools.partial(_read_entry, archive, info), "a ZIP entry", budget, depth=depth)
        if unlisted_at is not None and _holds_local_header(file, unlisted_at, archive.start_dir):
            raise Unreadable("a ZIP entry its central directory does not list")


def _read_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Generator[bytes, None, None]:
    return _read(archive.open(info))


def _walk_tar(file: IO[bytes], budget: _Budget, *, depth: int) -> None:
    try:
        with tarfile.open(fileobj=file, mode="r:") as archive:
            for member in archive:  # one header at a time, in file order
                budget.count(1)
                if member.isfile():
                    read = functools.partial(_read_member, archive, member)
                    _member(read, "a tar member", budget, depth=depth)
            end = archive.offset  # of the last member read: its end-of-archive blocks, if any
    except Unreadable:
        raise
    except Exception as exc:  # a tar cut short, a header that is not one
        raise Unreadable(f"a tar file that cannot be read ({exc})") from exc
    # Neither tarfile nor clamd reads past the end (two zero blocks, or a header that is not
    # one): a tar after it (``cat a.tar b.tar``) is read by no one.
    file.seek(end)
    while block := file.read(BLOCK):
        if block.strip(b"\0"):
            raise Unreadable("data after a tar file's end, which clamd does not read")


def _read_member(archive: tarfile.TarFile, member: tarfile.TarInfo) -> Generator[bytes, None, None]:
    return _read(archive.extractfile(member))


def _member(
    chunks: Callable[[], Generator[bytes, None, None]], what: str, budget: _Budget, *, depth: int
) -> None:
    """Read a member (a ZIP entry, a tar member, a stream's content) whole, within the budget,
    and walk it when it is itself an archive."""
    try:
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            with contextlib.closing(chunks()) as read:
                for chunk in read:
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
