"""The filesystem driver on a real directory: atomic publish, reads, deletes, readiness."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from coffer_blob.storage import StorageUnavailable
from coffer_blob.storage import fs as fs_module
from coffer_blob.storage.base import READ_CHUNK
from coffer_blob.storage.fs import FsStorage
from coffer_kit.contract.ids import TUS_UPLOAD, new_id

from .support import files_under, object_path, trash_as_the_scan_passes

KEY = "org_1/ast_1/photo.jpg"


@pytest.fixture
def storage(tmp_path: Path) -> FsStorage:
    return FsStorage(tmp_path / "blobs")


def put(storage: FsStorage, key: str = KEY, data: bytes = b"bytes", content_type: str = "image/jpeg") -> None:
    writer = storage.open_writer(key)
    writer.write(data)
    writer.commit(content_type=content_type, sha256=hashlib.sha256(data).hexdigest())


def read_all(storage: FsStorage, key: str, start: int = 0, end: int | None = None) -> bytes:
    reader = storage.open_reader(key, start, end)
    assert reader is not None
    try:
        return b"".join(reader)
    finally:
        reader.close()


def test_write_many_writes_every_piece_in_order(storage: FsStorage) -> None:
    """One writev per call, more pieces than one writev takes, empty ones, after a small write."""
    pieces = [os.urandom(n % 7) for n in range(2 * fs_module._IOV_MAX + 3)]
    pieces += [os.urandom(3 * READ_CHUNK)]
    writer = storage.open_writer(KEY)
    writer.write(b"head")  # buffered by the file object: must land before the pieces
    writer.write_many(pieces)
    writer.write_many([])
    writer.write(b"tail")
    data = b"head" + b"".join(pieces) + b"tail"
    writer.commit(content_type="image/jpeg", sha256=hashlib.sha256(data).hexdigest())
    assert read_all(storage, KEY) == data


def test_write_many_flushes_to_disk_every_sync_every_bytes(
    storage: FsStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(fs_module.os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    monkeypatch.setattr(fs_module._FsWriter, "_sync_every", 1000)
    writer = storage.open_writer(KEY)
    writer.write_many([b"x" * 600, b"y" * 300])
    assert synced == []
    writer.write_many([b"z" * 200])
    assert len(synced) == 1
    writer.abort()


MIB = 1024 * 1024


def _direct(writer: object) -> bool:
    """Whether the writer's file is open with O_DIRECT, as the kernel reports it."""
    fd = writer._fh.fileno()  # type: ignore[attr-defined]
    flags = Path(f"/proc/self/fdinfo/{fd}").read_text().split("flags:")[1].split()[0]
    return bool(int(flags, 8) & os.O_DIRECT)


@pytest.mark.parametrize(
    "batches",
    [
        [[MIB]],  # exactly one stage: no tail
        [[MIB], [1]],  # a one-byte tail, padded to a block and cut back
        [[MIB + 4095]],
        [[600_000, 600_000], [7], [3 * MIB + 5000, 100_000], []],  # pieces across stages
    ],
    ids=["one-stage", "one-byte-tail", "block-less-one", "odd-pieces"],
)
def test_a_large_file_goes_direct_and_reads_back_whole(storage: FsStorage, batches: list[list[int]]) -> None:
    """A first batch of a MiB or more is written with O_DIRECT (the page cache bypassed),
    whatever the length: on disk, exactly the bytes written."""
    pieces = [[os.urandom(n) for n in batch] for batch in batches]
    data = b"".join(b"".join(batch) for batch in pieces)
    writer = storage.open_writer(KEY)
    for batch in pieces:
        writer.write_many(batch)
        assert _direct(writer)
    info = writer.commit(content_type="image/jpeg", sha256=hashlib.sha256(data).hexdigest())
    assert info.size == len(data) == object_path(storage.root, KEY).stat().st_size
    assert read_all(storage, KEY) == data
    assert read_all(storage, KEY, len(data) - 10) == data[-10:]
    assert len(files_under(storage.objects)) == 2  # the data file and its sidecar, no temp file


def test_a_small_first_batch_stays_buffered(storage: FsStorage) -> None:
    """A file begun small (the one-batch upload, most uploads) is written through the cache,
    even if more follows."""
    head, rest = os.urandom(1000), os.urandom(2 * MIB)
    writer = storage.open_writer(KEY)
    writer.write_many([head])
    writer.write_many([rest])
    assert not _direct(writer)
    writer.commit(content_type="image/jpeg", sha256="0" * 64)
    assert read_all(storage, KEY) == head + rest


def test_an_aborted_direct_write_leaves_nothing(storage: FsStorage) -> None:
    writer = storage.open_writer(KEY)
    writer.write_many([os.urandom(MIB + 10)])
    assert _direct(writer)
    writer.abort()
    writer.abort()
    assert files_under(storage.objects) == []
    data = os.urandom(MIB + 5)  # the stage went back, and serves the next file whole
    writer = storage.open_writer(KEY)
    writer.write_many([data])
    assert _direct(writer)
    writer.commit(content_type="image/jpeg", sha256=hashlib.sha256(data).hexdigest())
    assert read_all(storage, KEY) == data


def test_where_o_direct_is_missing_a_large_file_is_written_buffered(
    storage: FsStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fs_module, "_O_DIRECT", 0)
    data = os.urandom(2 * MIB + 3)
    writer = storage.open_writer(KEY)
    writer.write_many([data[:MIB], data[MIB:]])
    assert not _direct(writer)
    writer.commit(content_type="image/jpeg", sha256=hashlib.sha256(data).hexdigest())
    assert read_all(storage, KEY) == data


def test_write_commit_stat_read(storage: FsStorage) -> None:
    data = os.urandom(3 * READ_CHUNK + 5)
    writer = storage.open_writer(KEY)
    for i in range(0, len(data), 100_000):
        writer.write(data[i : i + 100_000])
    assert storage.stat(KEY) is None  # nothing visible before commit
    info = writer.commit(content_type="image/jpeg", sha256=hashlib.sha256(data).hexdigest())
    assert info == storage.stat(KEY)
    assert (info.key, info.size, info.content_type) == (KEY, len(data), "image/jpeg")
    assert info.sha256 == hashlib.sha256(data).hexdigest()
    assert info.last_modified.tzinfo is not None
    reader = storage.open_reader(KEY)
    assert reader is not None
    chunks = list(reader)
    reader.close()
    assert b"".join(chunks) == data
    assert max(len(c) for c in chunks) <= READ_CHUNK
    assert read_all(storage, KEY, 10, 20) == data[10:20]
    assert read_all(storage, KEY, len(data) - 3) == data[-3:]
    assert read_all(storage, KEY, 5, 10**12) == data[5:]
    # Layout: the data file and its sidecar in the organization's bucket, no temp files.
    digest = hashlib.sha256(b"photo.jpg").hexdigest()[:32]
    assert files_under(storage.objects) == [f"org_1/%1/ast_1%meta.{digest}", f"org_1/%1/ast_1.{digest}"]
    assert object_path(storage.root, KEY).read_bytes() == data
    meta = json.loads((storage.objects / f"org_1/%1/ast_1%meta.{digest}").read_text())
    assert meta == {"name": "photo.jpg", "contentType": "image/jpeg", "sha256": info.sha256}


def test_large_writes_are_flushed_as_they_go(storage: FsStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """fdatasync every SYNC_EVERY bytes, so the fsync at commit has little left to do."""
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real_fdatasync(fd)

    monkeypatch.setattr(fs_module.os, "fdatasync", fdatasync)
    writer = storage.open_writer(KEY)
    chunk = b"x" * READ_CHUNK
    for _ in range(2 * fs_module.SYNC_EVERY // len(chunk) + 3):
        writer.write(chunk)
    writer.commit(content_type="image/jpeg", sha256="0" * 64)
    assert synced == [fs_module.SYNC_EVERY, 2 * fs_module.SYNC_EVERY]


def test_read_small(storage: FsStorage) -> None:
    put(storage, data=b"0123456789")
    assert storage.read_small(KEY, 10) == (storage.stat(KEY), b"0123456789")
    found = storage.read_small(KEY, 9)
    assert found is not None and found[0].size == 10 and found[1] is None
    assert storage.read_small("org_1/ast_1/missing.bin", 10) is None
    assert storage.read_small("org_1/ast_2/photo.jpg", 10) is None
    put(storage, data=b"")
    assert storage.read_small(KEY, 0) == (storage.stat(KEY), b"")


def test_empty_object(storage: FsStorage) -> None:
    put(storage, data=b"")
    info = storage.stat(KEY)
    assert info is not None and info.size == 0
    assert read_all(storage, KEY) == b""


def test_writes_go_to_a_temp_file_in_the_target_directory(storage: FsStorage) -> None:
    writer = storage.open_writer(KEY)
    writer.write(b"partial")
    [temp] = files_under(storage.objects)
    assert temp.startswith("org_1/%1/ast_1%tmp.")
    assert storage.open_reader(KEY) is None
    writer.abort()
    writer.abort()  # idempotent
    assert files_under(storage.objects) == []
    assert not (storage.objects / "org_1/%1").exists()


def test_sidecar_is_published_before_the_data(storage: FsStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The data rename is the commit point; if it fails, nothing remains and nothing is visible."""
    renames: list[str] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        renames.append(Path(dst).name)
        if dst == str(object_path(storage.root, KEY)):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(fs_module.os, "replace", replace)
    writer = storage.open_writer(KEY)
    writer.write(b"data")
    with pytest.raises(StorageUnavailable):
        writer.commit(content_type="image/jpeg", sha256="0" * 64)
    assert renames[0].startswith("ast_1%meta.") and renames[1] == object_path(storage.root, KEY).name
    assert storage.stat(KEY) is None
    assert [p for p in files_under(storage.objects) if "%tmp." in p] == []


def test_commit_replaces(storage: FsStorage) -> None:
    put(storage, data=b"one")
    put(storage, data=b"two!", content_type="image/png")
    info = storage.stat(KEY)
    assert info is not None and (info.size, info.content_type) == (4, "image/png")
    assert read_all(storage, KEY) == b"two!"


def test_delete_is_idempotent_and_removes_the_directory(storage: FsStorage) -> None:
    put(storage)
    storage.delete(KEY)
    assert storage.stat(KEY) is None and storage.open_reader(KEY) is None
    assert files_under(storage.objects) == []
    assert not (storage.objects / "org_1/%1").exists()  # an emptied bucket goes too
    storage.delete(KEY)
    storage.delete("org_9/ast_9/never.txt")


def test_a_data_file_without_its_sidecar_is_not_an_object(storage: FsStorage) -> None:
    put(storage)
    for path in (storage.objects / "org_1/%1").glob("ast_1%meta.*"):
        path.unlink()
    assert storage.stat(KEY) is None
    assert storage.read_small(KEY, 100) is None


def test_delete_prefix_removes_objects_and_unfinished_writes(storage: FsStorage) -> None:
    put(storage)
    put(storage, "org_1/ast_2/keep.txt")
    writer = storage.open_writer("org_1/ast_1/other.bin")
    writer.write(b"in flight")
    storage.delete_prefix("org_1/ast_1/")
    digest = hashlib.sha256(b"keep.txt").hexdigest()[:32]
    assert files_under(storage.objects) == [f"org_1/%2/ast_2%meta.{digest}", f"org_1/%2/ast_2.{digest}"]
    assert storage.stat(KEY) is None
    storage.delete_prefix("org_1/ast_1/")  # idempotent
    storage.delete_prefix("org_7/ast_7/")
    with pytest.raises(ValueError, match="a prefix ends with '/'"):
        storage.delete_prefix("org_1/ast_1")


def test_assets_share_a_bucket_and_deletes_keep_to_their_asset(storage: FsStorage) -> None:
    """Ids that start alike share a bucket; one asset's id may even prefix another's."""
    first, second = "org_1/ast_01JD4Z3X/a.txt", "org_1/ast_01JD4Z3XY/b.txt"
    put(storage, first, b"first")
    put(storage, second, b"second")
    assert {Path(p).parent for p in files_under(storage.objects)} == {Path("org_1/%01JD4Z3")}
    storage.delete_prefix("org_1/ast_01JD4Z3X/")
    assert storage.stat(first) is None
    assert read_all(storage, second) == b"second"
    storage.delete(second)
    assert files_under(storage.objects) == []


def test_a_commit_costs_three_fsyncs_once_the_bucket_exists(
    storage: FsStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data, the sidecar and the bucket: no directory of its own per upload."""
    put(storage, "org_1/ast_0000000A/a.txt")
    fsyncs = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(fs_module.os, "fsync", fsync)
    put(storage, "org_1/ast_0000000B/b.txt")
    assert len(fsyncs) == 3


def test_a_commit_in_a_directory_still_being_made_durable_fsyncs_its_parent(
    storage: FsStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer made the bucket and is fsyncing the organization's directory: a commit
    in that bucket does not answer before the bucket's own entry is durable."""
    put(storage)
    bucket = str(storage.objects / "org_1/%1")
    synced: list[str] = []
    real_fsync_dir = fs_module._fsync_dir

    def fsync_dir(path: str) -> None:
        synced.append(path)
        real_fsync_dir(path)

    monkeypatch.setattr(fs_module, "_fsync_dir", fsync_dir)
    storage._unsettled.add(bucket)
    put(storage, "org_1/ast_1/other.bin")
    assert synced == [bucket, str(storage.objects / "org_1")]


def test_concurrent_commits_in_a_bucket_share_its_fsync(
    storage: FsStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits that arrive while the bucket's fsync runs wait for one more, which starts after
    all their renames and answers them all; none answers before an fsync that began after it
    published."""
    put(storage, "org_1/ast_0000000A/a.txt")
    bucket = str(storage.objects / "org_1/%0000000")
    writers = 6
    first_running = threading.Event()
    release_first = threading.Event()
    synced: list[tuple[str, set[str]]] = []  # each fsync, and the data files it saw published
    real_fsync_dir = fs_module._fsync_dir

    def fsync_dir(path: str) -> None:
        visible = {name for name in os.listdir(path) if "%" not in name}
        if path == bucket and not first_running.is_set():
            first_running.set()
            assert release_first.wait(30)
        synced.append((path, visible))
        real_fsync_dir(path)

    monkeypatch.setattr(fs_module, "_fsync_dir", fsync_dir)
    keys = [f"org_1/ast_0000000{n}/f.bin" for n in range(writers)]
    with ThreadPoolExecutor(writers) as pool:
        first = pool.submit(put, storage, keys[0])
        assert first_running.wait(30)
        rest = [pool.submit(put, storage, key) for key in keys[1:]]
        deadline = time.monotonic() + 30
        while storage._dir_syncs[bucket].users < writers:  # every commit waits for its fsync
            assert time.monotonic() < deadline
            time.sleep(0.001)
        release_first.set()
        for done in [first, *rest]:
            done.result(timeout=30)
    assert [path for path, _ in synced] == [bucket, bucket]
    published = {name.split(".")[0] for name in synced[1][1]}
    assert {key.split("/")[1] for key in keys} <= published
    assert storage._dir_syncs == {}


@pytest.mark.parametrize(
    "key",
    [
        "../x/y",
        "org_1/%meta.json/x",
        "org_1//x",
        "org_1/ast_1/%tmp.1",
        "a/./b",
        "org_1/ast.1/x",
        "org_1/ast_1",
    ],
)
def test_keys_that_could_escape_or_collide_are_refused(storage: FsStorage, key: str) -> None:
    with pytest.raises(ValueError, match="not a storage key"):
        storage.open_writer(key)
    with pytest.raises(ValueError, match="not a storage key"):
        storage.stat(key)


def test_check(storage: FsStorage, tmp_path: Path) -> None:
    storage.check()
    assert (storage.root / "objects").is_dir()
    assert list(storage.root.glob("%ready.*")) == []
    broken = tmp_path / "not-a-dir"
    broken.write_text("x")
    with pytest.raises(StorageUnavailable):
        FsStorage(broken).check()
    with pytest.raises(StorageUnavailable):
        FsStorage(broken).open_writer(KEY)


def test_a_resumable_chunk_is_durable_at_its_checkpoint_in_one_flush(
    storage: FsStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5 MiB chunk is flushed once, at its checkpoint (fsync, before its offset is answered),
    not every batch as it arrives: each flush of a growing file commits the journal too."""
    flushed: list[tuple[str, int]] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):  # (not the directories the first one makes)
            flushed.append(("fsync", os.fstat(fd).st_size))
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):  # (not the directories the first one makes)
            flushed.append(("fdatasync", os.fstat(fd).st_size))
        real_fdatasync(fd)

    monkeypatch.setattr(fs_module.os, "fsync", fsync)
    monkeypatch.setattr(fs_module.os, "fdatasync", fdatasync)
    upload_id = new_id(TUS_UPLOAD)
    batch = b"x" * (512 * 1024)
    for offset in (0, 10 * len(batch)):
        writer = storage.open_resumable(KEY, upload_id, offset, {})
        for _ in range(10):
            writer.write(batch)
        writer.checkpoint(offset + 10 * len(batch))
    assert flushed == [("fsync", 10 * len(batch)), ("fsync", 20 * len(batch))]


@pytest.mark.parametrize(
    "requests",
    [
        [MIB + 7, 3, 2 * MIB + 4093, MIB],  # direct, buffered, direct from odd offsets
        [4096, MIB, 5 * MIB],  # block-aligned offsets: nothing to read back
        [10, 20, MIB - 30 + 4096],  # buffered, then direct from inside the first block
    ],
    ids=["odd-offsets", "aligned", "from-the-first-block"],
)
def test_a_resumable_request_of_a_mib_or_more_goes_direct_from_any_offset(
    storage: FsStorage, requests: list[int]
) -> None:
    """A request whose first batch is a MiB or more writes with O_DIRECT from the block before
    its offset (the partial block there written again); a smaller one writes buffered. A direct
    request that fails before its checkpoint counts for nothing, and the file is exactly its
    bytes at every checkpoint and at the end."""
    upload_id = new_id(TUS_UPLOAD)
    data = os.urandom(sum(requests))
    offset = 0
    for n in requests:
        failed = storage.open_resumable(KEY, upload_id, offset, {})  # junk, never checkpointed
        failed.write_many([os.urandom(MIB + 1)])
        assert _direct(failed)
        failed.abort()
        writer = storage.open_resumable(KEY, upload_id, offset, {})
        piece = data[offset : offset + n]
        writer.write_many([piece[: n // 2], piece[n // 2 :]])
        assert _direct(writer) == (n >= MIB)
        offset += n
        if offset < len(data):
            writer.checkpoint(offset)
            part = [p for p in files_under(storage.objects) if "tus." in str(p)]
            assert len(part) == 1 and (storage.objects / part[0]).read_bytes() == data[:offset]
        else:
            writer.commit(content_type="image/jpeg", sha256=hashlib.sha256(data).hexdigest())
    assert read_all(storage, KEY) == data
    assert len(files_under(storage.objects)) == 2  # the data file and its sidecar, no part file


def test_filenames_lists_the_committed_objects_of_one_asset(storage: FsStorage) -> None:
    put(storage, "org_1/ast_1/b.txt")
    put(storage, "org_1/ast_1/a.txt")
    put(storage, "org_1/ast_12/other.txt")  # same bucket, another asset
    writer = storage.open_writer("org_1/ast_1/in-flight.bin")
    writer.write(b"not yet")
    assert storage.filenames("org_1/ast_1/", 10) == ["a.txt", "b.txt"]
    assert storage.sizes("org_1/ast_1/", 10) == [("a.txt", 5), ("b.txt", 5)]  # (a variant's eviction)
    assert storage.filenames("org_1/ast_1/", 1) == ["a.txt"]
    assert storage.filenames("org_9/ast_9/", 10) == []
    writer.commit(content_type="text/plain", sha256=hashlib.sha256(b"not yet").hexdigest())
    assert storage.filenames("org_1/ast_1/", 10) == ["a.txt", "b.txt", "in-flight.bin"]
    with pytest.raises(ValueError, match="a prefix ends with '/'"):
        storage.filenames("org_1/ast_1", 10)


def test_two_flag_changes_at_once_both_land(storage: FsStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trash's change reads the sidecar, and the scan's comes before it writes. Each waits
    for the other's turn (a lock on the data file, across processes), so neither undoes the
    other."""
    put(storage)
    read = fs_module._read_sidecar

    def hold_after_read(pause: Callable[[], None]) -> None:
        def read_then_pause(path: Any) -> Any:
            meta = read(path)
            pause()
            return meta

        monkeypatch.setattr(fs_module, "_read_sidecar", read_then_pause)

    trash_as_the_scan_passes(storage, KEY, hold_after_read)
