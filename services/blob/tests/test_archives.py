"""The archives blob does not pass when clamd calls them clean (coffer_blob.archives, issue 48):
any ZIP entry in zip64 form, at the top or nested, compressed or stored, appended to another
file, or inside a gzip, bzip2 or xz stream or a tar file; an archive that cannot be read; past
the walk's bounds; the forms clamd reads otherwise than zipfile, tarfile and the decompressors
(UNREAD). Ordinary archives, nested or not, and files that are none pass (CLAMD_READS among
them). The answers of a real clamd to the same files: test_scan.py."""

from __future__ import annotations

import bz2
import functools
import gzip
import io
import lzma
import struct
import tarfile
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from coffer_blob import archives
from coffer_blob.storage.fs import FsStorage

from .support import ORG, new_asset_id


def zipped(*entries: tuple[str, bytes], zip64: bool = False, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as archive:
        for name, data in entries:
            with archive.open(name, "w", force_zip64=zip64) as entry:
                entry.write(data)
    return out.getvalue()


def tarred(*members: tuple[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def check(tmp_path: Path):  # type: ignore[no-untyped-def]
    storage = FsStorage(tmp_path / "blobs")

    def stored(data: bytes) -> str | None:
        key = f"{ORG}/{new_asset_id()}/file"
        writer = storage.open_writer(key)
        writer.write(data)
        writer.commit(content_type="application/octet-stream", sha256="0" * 64)
        return archives.unread(storage, key, len(data))

    return stored


TEXT = b"nothing to see here\n" * 50


def test_files_and_archives_clamd_reads_pass(check) -> None:  # type: ignore[no-untyped-def]
    assert check(b"") is None
    assert check(TEXT) is None
    assert check(b"PK") is None  # too short to be a ZIP: clamd's to judge
    assert check(zipped(("a.txt", TEXT), ("b/c.txt", TEXT))) is None
    assert check(zipped(("[Content_Types].xml", b"<Types/>"), ("word/document.xml", TEXT))) is None
    inner = zipped(("a.txt", TEXT))
    assert check(zipped(("inner.zip", inner), ("x.txt", TEXT))) is None
    assert check(zipped(("inner.zip", zipped(("deeper.zip", inner))), method=zipfile.ZIP_STORED)) is None


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
def test_a_zip64_entry_anywhere_is_not_passed(check, method: int) -> None:  # type: ignore[no-untyped-def]
    top = zipped(("a.txt", TEXT), zip64=True, method=method)
    assert check(top) == "a zip64 archive"
    assert check(zipped(("ok.txt", TEXT), ("inner.zip", top), method=method)) == "a zip64 archive"
    assert check(zipped(("l1.zip", zipped(("l2.zip", top))))) == "a zip64 archive"
    assert check(b"\x89PNG not really\n" + top) == "a zip64 archive"  # appended to another file


def test_a_zip64_local_header_behind_an_ordinary_central_directory(check) -> None:  # type: ignore[no-untyped-def]
    """clamd reads the entries' local headers: one in zip64 form is caught even when the
    central directory says nothing of it."""
    data = bytearray(zipped(("a.txt", TEXT)))
    # The local header's sizes to 0xFFFFFFFF (compressed at 18, uncompressed at 22).
    data[18:26] = b"\xff" * 8
    assert check(bytes(data)) == "a zip64 archive"


def test_a_zip_that_cannot_be_read_is_not_passed(check) -> None:  # type: ignore[no-untyped-def]
    whole = zipped(("a.txt", TEXT))
    assert (why := check(whole[: len(whole) // 2])) is not None and why.startswith(
        "a ZIP that cannot be read"
    )
    inner = bytearray(zipped(("a.txt", TEXT), method=zipfile.ZIP_STORED))
    inner[40] ^= 0xFF  # a byte of the stored entry: its CRC no longer matches
    why = check(zipped(("inner.zip", bytes(inner))))
    assert why is not None and why.startswith("a ZIP")


def test_the_walk_is_bounded(check, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    data = zipped(("a.txt", TEXT))
    for depth in range(archives.MAX_DEPTH + 1):
        data = zipped((f"l{depth}.zip", data))
    assert check(data) == f"archives nested more than {archives.MAX_DEPTH} deep"

    many = zipped(*((f"{n}.txt", b"") for n in range(archives.MAX_ENTRIES + 1)), method=zipfile.ZIP_STORED)
    assert check(many) == f"an archive of more than {archives.MAX_ENTRIES} entries"

    monkeypatch.setattr(archives, "MAX_EXTRACTED", 10_000)
    big_inner = zipped(("noise.bin", bytes(range(256)) * 100), method=zipfile.ZIP_STORED)
    assert check(zipped(("inner.zip", big_inner))) == "nested archives of more than 10000 bytes"


def _bare_directory(records: int, *, says: int) -> bytes:
    """A ZIP that is nothing but central directory records (47 bytes each, naming no entry
    anywhere), its end record saying it holds ``says``."""
    record = struct.pack(
        "<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0
    )
    directory = (record + b"a") * records
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, says, says, len(directory), 0, 0)
    return directory + end


@pytest.mark.parametrize("says", [50_000, 1])
def test_a_directory_past_the_entry_bound_is_refused_before_it_is_read(check, says: int) -> None:  # type: ignore[no-untyped-def]
    """zipfile reads a ZIP's whole central directory into an object per record before the walk
    could count them: 100,000 bare records (4.7 MB) took hundreds of MiB. They are counted a
    header at a time first, whatever the end record says they are."""
    data = _bare_directory(100_000, says=says)
    tracemalloc.start()
    try:
        why = check(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert why == f"an archive of more than {archives.MAX_ENTRIES} entries"
    assert peak < 4 * 1024 * 1024, peak


def test_a_zip64_zip_behind_other_bytes_or_in_a_form_zipfile_cannot_read_is_not_passed(check) -> None:  # type: ignore[no-untyped-def]
    """clamd finds EICAR in an ordinary ZIP behind other bytes in an entry, and in an entry
    labelled Deflate64: a zip64 ZIP there passed it unread, and passed this walk too."""
    top = zipped(("a.txt", TEXT), zip64=True)
    assert check(zipped(("setup.exe", b"MZjunk" * 100 + top))) == "a zip64 archive"
    deflate64 = bytearray(zipped(("inner.zip", zipped(("a.txt", TEXT))), method=zipfile.ZIP_STORED))
    deflate64[8:10] = (9).to_bytes(2, "little")  # the local header's method: Deflate64
    central = deflate64.rindex(b"PK\x01\x02")
    deflate64[central + 10 : central + 12] = (9).to_bytes(2, "little")
    why = check(bytes(deflate64))
    assert why is not None and why.startswith("a ZIP entry in a form blob cannot read")


def test_a_streamed_entry_clamd_reads_by_its_descriptor_passes(check) -> None:  # type: ignore[no-untyped-def]
    """An entry written to a stream (flag bit 3, sizes in the data descriptor, as ``zip - -``
    writes): zipfile's own streaming writer makes that form, and clamd reads it."""
    out = io.BytesIO()

    class Unseekable(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, data) -> int:  # type: ignore[no-untyped-def,override]
            return out.write(data)

    with (
        zipfile.ZipFile(Unseekable(), "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("a.txt", "w") as entry,
    ):
        entry.write(TEXT)
    assert check(out.getvalue()) is None


def test_a_zip64_zip_inside_a_compressed_stream_or_a_tar_is_not_passed(check) -> None:  # type: ignore[no-untyped-def]
    """clamd (1.4.6) answers OK for EICAR in a zip64 ZIP inside gzip, bzip2, xz or tar, as
    test_scan.py shows: this walk reads into them."""
    top = zipped(("a.txt", TEXT), zip64=True)
    wrapped = [
        gzip.compress(top),
        bz2.compress(top),
        lzma.compress(top),
        tarred(("readme.txt", TEXT), ("a.zip", top)),
        gzip.compress(tarred(("a.zip", top))),
        zipped(("a.tgz", gzip.compress(tarred(("a.zip", top))))),
        gzip.compress(top) + gzip.compress(TEXT),  # two gzip members: both read
        gzip.compress(TEXT) + gzip.compress(top),
    ]
    for data in wrapped:
        assert check(data) == "a zip64 archive"


def test_ordinary_streams_and_tars_pass_and_broken_ones_do_not(check) -> None:  # type: ignore[no-untyped-def]
    inner = zipped(("a.txt", TEXT))
    for data in (gzip.compress(TEXT), bz2.compress(TEXT), lzma.compress(TEXT), tarred(("a.txt", TEXT))):
        assert check(data) is None
    assert check(gzip.compress(tarred(("a.zip", inner), ("b.txt", TEXT)))) is None
    assert check(tarred()) is None  # an empty tar
    cut = gzip.compress(tarred(("a.zip", inner)))
    why = check(cut[: len(cut) // 2])
    assert why is not None and why.startswith("a gzip stream that cannot be read"), why
    tar = tarred(("a.txt", TEXT))
    why = check(tar[:700])  # a member's data cut short
    assert why is not None and why.startswith("a tar"), why


def test_a_stream_past_the_bound_is_not_passed(check, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A gzip bomb is read no further than clamd's MaxScanSize, which clamd too alerts past."""
    data = TEXT
    for _ in range(archives.MAX_DEPTH // 2 + 1):  # a gzip and a tar: two levels each time
        data = gzip.compress(tarred(("next", data)))
    assert check(data) == f"archives nested more than {archives.MAX_DEPTH} deep"
    monkeypatch.setattr(archives, "MAX_EXTRACTED", 100_000)
    assert check(gzip.compress(bytes(100_001))) == "nested archives of more than 100000 bytes"
    assert check(gzip.compress(bytes(99_999))) is None


# Forms that ClamAV (1.4.6) answers OK for with EICAR inside, as test_scan.py shows with a real
# clamd: clamd does not read what they hold, so blob must not pass them either. Each takes the
# content to hide (EICAR there, TEXT here) and gives the file, with the reason blob answers.
def lzma_entry(data: bytes) -> bytes:
    """LZMA (method 14): zipfile reads it, clamd does not."""
    return zipped(("eicar.com", data), method=zipfile.ZIP_LZMA)


def _local_header_changed(data: bytes, at: int, value: bytes) -> bytes:
    """A deflated entry whose local header (not its central directory record) says ``value`` at ``at``."""
    changed = bytearray(zipped(("eicar.com", data)))
    changed[at : at + len(value)] = value
    return bytes(changed)


def local_sizes_zero(data: bytes) -> bytes:
    """Sizes 0 in the local header (flag bit 3 clear), the real ones in the central directory."""
    return _local_header_changed(data, 18, bytes(8))


def local_method_stored(data: bytes) -> bytes:
    """The local header says stored (0), the central directory deflate (8)."""
    return _local_header_changed(data, 8, bytes(2))


def local_flag_encrypted(data: bytes) -> bytes:
    """The local header says encrypted, the central directory does not."""
    return _local_header_changed(data, 6, b"\x01")


def unlisted_local_entry(data: bytes) -> bytes:
    """A second entry whose local header the central directory does not list."""
    whole = zipped(("a.txt", TEXT), ("eicar.com", data))
    first = whole.index(b"PK\x01\x02")
    second = whole.index(b"PK\x01\x02", first + 4)
    end = bytearray(whole[whole.index(b"PK\x05\x06") :])
    end[8:16] = struct.pack("<2HL", 1, 1, second - first)  # one entry, one record's size
    return whole[:second] + bytes(end)


def zip_after_a_zip(data: bytes) -> bytes:
    """Two ZIPs one after the other: zipfile reads the last, clamd neither's entries."""
    return zipped(("a.txt", TEXT)) + zipped(("eicar.com", data))


def two_bzip2_streams(data: bytes) -> bytes:
    """clamd reads a bzip2 file's first stream only."""
    return bz2.compress(b"") + bz2.compress(data)


def gzip_member_after_zero_bytes(data: bytes) -> bytes:
    """clamd stops reading gzip at zero bytes after a member; Python's gzip goes on past them."""
    return gzip.compress(b"") + bytes(8) + gzip.compress(data)


def tar_after_a_tars_end(data: bytes) -> bytes:
    """Two tar files one after the other (``cat a.tar b.tar``): no one reads past the first's end."""
    return tarred(("a.txt", TEXT)) + tarred(("eicar.com", data))


ZIP_DISAGREES = "a ZIP entry whose local header and central directory disagree"
UNREAD: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "lzma-entry": (lzma_entry, "a ZIP entry compressed with method 14, which clamd does not read"),
    "lzma-entry-nested": (
        lambda data: zipped(("inner.zip", lzma_entry(data))),
        "a ZIP entry compressed with method 14, which clamd does not read",
    ),
    "local-sizes-zero": (local_sizes_zero, ZIP_DISAGREES),
    "local-method-differs": (local_method_stored, ZIP_DISAGREES),
    "local-flag-encrypted": (local_flag_encrypted, ZIP_DISAGREES),
    "unlisted-local-entry": (unlisted_local_entry, "a ZIP entry its central directory does not list"),
    "zip-after-a-zip": (zip_after_a_zip, "a ZIP entry its central directory does not list"),
    "two-bzip2-streams": (two_bzip2_streams, "data after a bzip2 stream, which clamd does not read"),
    "two-bzip2-streams-in-a-tar": (
        lambda data: tarred(("a.bz2", two_bzip2_streams(data))),
        "data after a bzip2 stream, which clamd does not read",
    ),
    "gzip-member-after-zero-bytes": (
        gzip_member_after_zero_bytes,
        "data after a gzip stream, which clamd does not read",
    ),
    "tar-after-a-tars-end": (tar_after_a_tars_end, "data after a tar file's end, which clamd does not read"),
}


@pytest.mark.parametrize("form", sorted(UNREAD))
def test_a_form_clamd_does_not_read_is_not_passed(check, form: str) -> None:  # type: ignore[no-untyped-def]
    build, why = UNREAD[form]
    assert check(build(TEXT)) == why


def _streamed_with_sizes(data: bytes) -> bytes:
    """An entry streamed (flag bit 3) whose local header has sizes all the same: clamd reads the
    central directory's then."""
    streamed = bytearray(zipped(("eicar.com", data)))
    streamed[6] |= 0x8
    streamed[streamed.rindex(b"PK\x01\x02") + 8] |= 0x8
    return bytes(streamed)


def _nested_zip(data: bytes, *, method: int) -> bytes:
    return zipped(("inner.zip", zipped(("eicar.com", data), method=method)), method=method)


# Their neighbours, which clamd (1.4.6) reads whole (EICAR found in each): not refused.
CLAMD_READS: dict[str, Callable[[bytes], bytes]] = {
    **{
        f"nested-zip-{method}": functools.partial(_nested_zip, method=method)
        for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2)
    },
    # gzip members and xz streams back to back (xz with its zero padding), zero bytes at the end.
    "gzip-members": lambda data: gzip.compress(b"") + gzip.compress(data) + bytes(8),
    "xz-streams": lambda data: lzma.compress(b"") + bytes(4) + lzma.compress(data) + bytes(4),
    "bzip2-zero-bytes-after": lambda data: bz2.compress(data) + bytes(8),
    "tar-zero-bytes-after": lambda data: tarred(("eicar.com", data)) + bytes(10240),
    "streamed-entry-with-sizes": _streamed_with_sizes,
    # A ZIP behind other bytes that hold a local header: clamd looks for every local header
    # itself then, whatever the central directory lists (an installer's own code may hold one).
    "zip-behind-a-local-header": lambda data: (
        b"MZ" + b"PK\x03\x04" + bytes(100) + zipped(("eicar.com", data))
    ),
}


@pytest.mark.parametrize("form", sorted(CLAMD_READS))
def test_a_form_clamd_reads_passes(check, form: str) -> None:  # type: ignore[no-untyped-def]
    assert check(CLAMD_READS[form](TEXT)) is None


def test_a_decompression_bomb_is_read_no_further_than_the_bound(
    check, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(archives, "MAX_EXTRACTED", 100_000)
    for compress in (bz2.compress, lzma.compress, gzip.compress):
        assert check(compress(bytes(10_000_000))) == "nested archives of more than 100000 bytes"
        assert check(compress(bytes(99_999))) is None
