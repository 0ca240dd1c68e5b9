"""The S3 driver against a real S3 API server on loopback (moto's, or COFFER_TEST_S3_ENDPOINT_URL)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from coffer_blob.config import Settings
from coffer_blob.storage import StorageUnavailable
from coffer_blob.storage import s3 as s3_module
from coffer_blob.storage.base import READ_CHUNK
from coffer_blob.storage.s3 import PART_SIZE, S3Storage
from coffer_testkit.pytest_plugin import S3Server
from coffer_testkit.testing import pattern_chunks, rss_bytes

from .support import trash_as_the_scan_passes

KEY = "org_1/ast_1/photo.jpg"


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return s3_server.new_bucket()


@pytest.fixture
def storage(s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Storage]:
    """The driver as blob builds it from settings (credentials from the AWS environment variables)."""
    for name, value in s3_server.env(bucket).items():
        monkeypatch.setenv(name, value)
    storage = S3Storage.from_settings(Settings(data_dir="/nonexistent"))  # type: ignore[arg-type]
    yield storage
    storage.close()


def leftovers(s3_server: S3Server, bucket: str) -> tuple[list[str], list[str]]:
    """(object keys, keys with an unfinished multipart upload) in the bucket."""
    client = s3_server.client()
    objects = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    uploads = [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    return sorted(objects), sorted(uploads)


def put(storage: S3Storage, key: str, data: bytes, content_type: str = "image/jpeg") -> None:
    """Write ``data`` under ``key``; what the commit answers is what S3 then shows."""
    writer = storage.open_writer(key)
    for i in range(0, len(data), 1 << 20):
        writer.write(data[i : i + (1 << 20)])
    committed = writer.commit(content_type=content_type, sha256=hashlib.sha256(data).hexdigest())
    shown = storage.stat(key)
    assert shown is not None and replace(committed, last_modified=shown.last_modified) == shown
    assert abs((committed.last_modified - shown.last_modified).total_seconds()) <= 2


def read_all(storage: S3Storage, key: str, start: int = 0, end: int | None = None) -> bytes:
    reader = storage.open_reader(key, start, end)
    assert reader is not None
    try:
        return b"".join(reader)
    finally:
        reader.close()


def test_settings_require_a_bucket() -> None:
    with pytest.raises(ValueError, match="COFFER_S3_BUCKET"):
        Settings(storage="s3", s3_bucket="", data_dir="/nonexistent")  # type: ignore[arg-type]


def test_small_object_is_one_put(storage: S3Storage, s3_server: S3Server, bucket: str) -> None:
    data = b"small object"
    assert storage.stat(KEY) is None
    put(storage, KEY, data)
    info = storage.stat(KEY)
    assert info is not None
    assert (info.size, info.content_type, info.sha256) == (
        len(data),
        "image/jpeg",
        hashlib.sha256(data).hexdigest(),
    )
    assert info.last_modified.tzinfo is not None and info.last_modified.microsecond == 0
    head = s3_server.client().head_object(Bucket=bucket, Key=KEY)
    assert head["Metadata"] == {"sha256": info.sha256}
    assert read_all(storage, KEY) == data
    assert read_all(storage, KEY, 6) == data[6:]
    assert read_all(storage, KEY, 0, 5) == data[:5]
    assert leftovers(s3_server, bucket) == ([KEY], [])


def test_read_small(storage: S3Storage) -> None:
    put(storage, KEY, b"0123456789")
    found = storage.read_small(KEY, 10)
    assert found is not None and found == (storage.stat(KEY), b"0123456789")
    found = storage.read_small(KEY, 9)
    assert found is not None and found[0].size == 10 and found[1] is None
    assert storage.read_small("org_1/ast_1/missing.bin", 10) is None


def test_empty_object(storage: S3Storage) -> None:
    put(storage, KEY, b"")
    info = storage.stat(KEY)
    assert info is not None and info.size == 0
    assert read_all(storage, KEY, 0, 0) == b""
    assert read_all(storage, KEY) == b""


def test_multipart_object_and_range_reads(storage: S3Storage, s3_server: S3Server, bucket: str) -> None:
    data = os.urandom(2 * PART_SIZE + 12345)
    put(storage, KEY, data, "video/mp4")
    info = storage.stat(KEY)
    assert info is not None
    assert (info.size, info.content_type, info.sha256) == (
        len(data),
        "video/mp4",
        hashlib.sha256(data).hexdigest(),
    )
    # Only the object itself remains: no temp object, no unfinished upload.
    assert leftovers(s3_server, bucket) == ([KEY], [])
    for start, end in [(0, 1), (PART_SIZE - 10, PART_SIZE + 10), (len(data) - 7, None), (5, len(data))]:
        assert read_all(storage, KEY, start, end) == data[start:end]
    reader = storage.open_reader(KEY, 0, 3 * READ_CHUNK + 1)
    assert reader is not None
    chunks = list(reader)
    reader.close()
    assert max(len(c) for c in chunks) <= READ_CHUNK
    assert b"".join(chunks) == data[: 3 * READ_CHUNK + 1]
    assert storage.open_reader("org_1/ast_1/missing.bin") is None


def test_write_many_writes_the_pieces_in_order_across_parts(storage: S3Storage) -> None:
    """What blob's upload pipeline calls: batches of pieces, spanning part boundaries."""
    pieces = [os.urandom(n) for n in (1, 0, 65536, PART_SIZE - 3, 7, PART_SIZE + 5, 100)]
    writer = storage.open_writer(KEY)
    writer.write_many(pieces[:3])
    writer.write_many(pieces[3:])
    data = b"".join(pieces)
    writer.commit(content_type="video/mp4", sha256=hashlib.sha256(data).hexdigest())
    assert read_all(storage, KEY) == data


def test_100_mib_streams_with_bounded_memory(storage: S3Storage, s3_server: S3Server, bucket: str) -> None:
    size = 100 * 1024 * 1024
    expected = hashlib.sha256()
    before = rss_bytes(os.getpid())
    peak = before
    started = time.perf_counter()
    writer = storage.open_writer(KEY)
    for chunk in pattern_chunks(size):
        expected.update(chunk)
        writer.write(chunk)
        peak = max(peak, rss_bytes(os.getpid()))
    info = writer.commit(content_type="application/octet-stream", sha256=expected.hexdigest())
    peak = max(peak, rss_bytes(os.getpid()))
    elapsed = time.perf_counter() - started
    assert info.size == size and info.sha256 == expected.hexdigest()
    assert peak - before < 32 * 1024 * 1024, f"RSS grew by {(peak - before) >> 20} MiB"
    assert leftovers(s3_server, bucket) == ([KEY], [])
    # Reading it back is streamed too.
    got = hashlib.sha256()
    reader = storage.open_reader(KEY)
    assert reader is not None
    for chunk in reader:
        got.update(chunk)
        peak = max(peak, rss_bytes(os.getpid()))
    reader.close()
    assert got.hexdigest() == expected.hexdigest()
    assert peak - before < 32 * 1024 * 1024, f"RSS grew by {(peak - before) >> 20} MiB"
    assert elapsed < 60
    print(f"100 MiB through S3 in {elapsed:.2f}s, RSS growth {(peak - before) / 2**20:.1f} MiB")


def test_abort_leaves_no_object_and_no_upload(storage: S3Storage, s3_server: S3Server, bucket: str) -> None:
    writer = storage.open_writer(KEY)
    for chunk in pattern_chunks(2 * PART_SIZE + 1):
        writer.write(chunk)
    assert leftovers(s3_server, bucket)[1] != []  # parts went out already
    writer.abort()
    writer.abort()
    assert leftovers(s3_server, bucket) == ([], [])
    assert storage.stat(KEY) is None


def test_a_failed_upload_cleans_up(storage: S3Storage, s3_server: S3Server, bucket: str) -> None:
    """The multipart upload disappears under the writer: commit fails, and nothing remains."""
    writer = storage.open_writer(KEY)
    for chunk in pattern_chunks(PART_SIZE + 1):
        writer.write(chunk)
    client = s3_server.client()
    [upload] = client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    with pytest.raises(StorageUnavailable):
        writer.write(b"x" * PART_SIZE)
    writer.abort()
    assert leftovers(s3_server, bucket) == ([], [])


def test_a_failed_commit_cleans_up(storage: S3Storage, s3_server: S3Server, bucket: str) -> None:
    writer = storage.open_writer(KEY)
    for chunk in pattern_chunks(PART_SIZE + 1):
        writer.write(chunk)
    client = s3_server.client()
    [upload] = client.list_multipart_uploads(Bucket=bucket)["Uploads"]
    client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    with pytest.raises(StorageUnavailable):
        writer.commit(content_type="image/jpeg", sha256="0" * 64)
    assert leftovers(s3_server, bucket) == ([], [])
    assert storage.stat(KEY) is None


def test_a_temp_object_that_will_not_go_does_not_undo_the_commit(
    storage: S3Storage, s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The object is published (copied to its key) when deleting the temp object fails once:
    the commit stands, rather than delete what it just stored and answer 503 (a resumable
    upload's retry of its last chunk then found its multipart upload completed: never done)."""
    writer = storage.open_writer(KEY)
    for chunk in pattern_chunks(PART_SIZE + 1):
        writer.write(chunk)
    real = storage._call

    def temp_delete_fails(what: str, method: str, **kwargs: Any) -> Any:
        if method == "delete_object" and "%tmp." in kwargs.get("Key", ""):
            raise StorageUnavailable("S3 delete_object failed: SlowDown (once)")
        return real(what, method, **kwargs)

    monkeypatch.setattr(storage, "_call", temp_delete_fails)
    info = writer.commit(content_type="image/jpeg", sha256="0" * 64)
    monkeypatch.undo()
    assert storage.stat(KEY) == info and info.size == PART_SIZE + 1
    storage.delete_prefix(KEY.rsplit("/", 1)[0] + "/")  # the temp object goes with the asset
    assert leftovers(s3_server, bucket) == ([], [])


def test_delete_and_delete_prefix(storage: S3Storage, s3_server: S3Server, bucket: str) -> None:
    put(storage, KEY, b"one")
    put(storage, "org_1/ast_2/keep.txt", b"two")
    in_flight = storage.open_writer("org_1/ast_1/big.bin")
    for chunk in pattern_chunks(PART_SIZE):
        in_flight.write(chunk)
    storage.delete("org_1/ast_2/missing.txt")  # idempotent
    storage.delete_prefix("org_1/ast_1/")
    assert leftovers(s3_server, bucket) == (["org_1/ast_2/keep.txt"], [])
    storage.delete_prefix("org_1/ast_1/")
    storage.delete("org_1/ast_2/keep.txt")
    storage.delete("org_1/ast_2/keep.txt")
    assert leftovers(s3_server, bucket) == ([], [])
    with pytest.raises(ValueError, match="a prefix ends with '/'"):
        storage.delete_prefix("org_1/ast_1")


def test_delete_prefix_pages(storage: S3Storage, s3_server: S3Server, bucket: str) -> None:
    client = s3_server.client()
    for i in range(25):
        client.put_object(Bucket=bucket, Key=f"org_1/ast_{i % 3}/f{i}", Body=b"")
        client.create_multipart_upload(Bucket=bucket, Key=f"org_1/ast_{i % 3}/%tmp.{i}")
    S3Storage(storage.client, bucket, page_size=10).delete_prefix("org_1/")
    assert leftovers(s3_server, bucket) == ([], [])


def test_objects_without_blob_metadata_are_not_served(
    storage: S3Storage, s3_server: S3Server, bucket: str
) -> None:
    s3_server.client().put_object(Bucket=bucket, Key=KEY, Body=b"foreign")
    assert storage.stat(KEY) is None


def test_check(storage: S3Storage) -> None:
    storage.check()
    missing = S3Storage(storage.client, "no-such-bucket-" + os.urandom(4).hex())
    with pytest.raises(StorageUnavailable):
        missing.check()
    with pytest.raises(StorageUnavailable):
        missing.open_writer(KEY).commit(content_type="text/plain", sha256="0" * 64)


def test_unreachable_endpoint_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    from coffer_testkit.testing import free_port

    settings: Any = Settings(
        data_dir="/nonexistent",  # type: ignore[arg-type]
        storage="s3",
        s3_bucket="b",
        s3_endpoint_url=f"http://127.0.0.1:{free_port()}",
        s3_region="us-east-1",
        s3_force_path_style=True,
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    storage = S3Storage.from_settings(settings)
    for call in (storage.check, lambda: storage.stat(KEY), lambda: storage.delete_prefix("org_1/ast_1/")):
        with pytest.raises(StorageUnavailable):
            call()


def test_filenames_lists_the_committed_objects_of_one_asset(
    storage: S3Storage, s3_server: S3Server, bucket: str
) -> None:
    for key in ("org_1/ast_1/b.txt", "org_1/ast_1/a.txt", "org_1/ast_12/other.txt"):
        put(storage, key, b"bytes")
    # A write in progress (a temp object before its copy) is not listed.
    s3_server.client().put_object(Bucket=bucket, Key="org_1/ast_1/%tmp.0123", Body=b"")
    assert storage.filenames("org_1/ast_1/", 10) == ["a.txt", "b.txt"]
    assert storage.sizes("org_1/ast_1/", 10) == [("a.txt", 5), ("b.txt", 5)]  # (a variant's eviction)
    assert S3Storage(storage.client, bucket, page_size=1).filenames("org_1/ast_1/", 1) == ["a.txt"]
    assert storage.filenames("org_9/ast_9/", 10) == []


def test_two_flag_changes_at_once_both_land(
    storage: S3Storage, s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trash's change reads the object's metadata, and the scan's comes before it copies.
    A metadata copy keeps the ETag, so only the flags lock makes the scan's change wait for the
    trash's turn; then neither undoes the other, and no lock is left behind."""
    put(storage, KEY, b"bytes")
    call = storage._call

    def hold_after_read(pause: Callable[[], None]) -> None:
        def call_then_pause(what: str, method: str, **kwargs: Any) -> Any:
            answer = call(what, method, **kwargs)
            if method == "head_object":
                pause()
            return answer

        monkeypatch.setattr(storage, "_call", call_then_pause)

    trash_as_the_scan_passes(storage, KEY, hold_after_read)
    assert leftovers(s3_server, bucket) == ([KEY], [])


def lock_heads_aged(storage: S3Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flags locks look twice FLAGS_LOCK_STALE old to ``storage``: left by a crashed change."""
    head = storage.client.head_object

    def head_object(**kwargs: Any) -> Any:
        found = head(**kwargs)
        if kwargs["Key"].rpartition("/")[2].startswith("%flags."):
            found["LastModified"] -= timedelta(seconds=2 * s3_module.FLAGS_LOCK_STALE)
        return found

    monkeypatch.setattr(storage.client, "head_object", head_object)


def test_a_flags_lock_held_too_long_is_503_and_a_stale_one_is_taken_over(
    storage: S3Storage, s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(storage, KEY, b"bytes")
    # A lock's create whose answer was lost, sent again by boto3, finds its own lock: held.
    mine, theirs = os.urandom(16), os.urandom(16)
    s3_server.client().put_object(Bucket=bucket, Key=s3_module.flags_lock(KEY), Body=mine)
    assert storage._create_if_absent(KEY, s3_module.flags_lock(KEY), mine)
    assert not storage._create_if_absent(KEY, s3_module.flags_lock(KEY), theirs)
    s3_server.client().delete_object(Bucket=bucket, Key=s3_module.flags_lock(KEY))
    with storage._flags_locked(KEY):  # another request's change, in progress
        monkeypatch.setattr(s3_module, "FLAGS_LOCK_WAIT", 0.2)
        with pytest.raises(StorageUnavailable, match="Another request is changing the flags"):
            storage.set_private(KEY, True)
        # A change that died holding the lock: taken over once it is older than the bound.
        lock_heads_aged(storage, monkeypatch)
        assert storage.set_private(KEY, True)
    info = storage.stat(KEY)
    assert info is not None and info.private
    assert leftovers(s3_server, bucket) == ([KEY], [])


def test_of_two_changes_that_find_a_lock_stale_at_once_one_takes_it(
    storage: S3Storage, s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read a crashed change's lock before either acts on it, and the later one acts once
    the earlier holds the lock: the turn in which a takeover by delete, then create, deleted
    the new holder's lock and let both changes hold it at once."""
    put(storage, KEY, b"bytes")
    lock = s3_module.flags_lock(KEY)
    s3_server.client().put_object(Bucket=bucket, Key=lock, Body=os.urandom(16))  # a crashed change's
    both_read, first_holds = threading.Barrier(2, timeout=10), threading.Event()
    guard, later_tried = threading.Lock(), threading.Semaphore(0)
    reads: list[threading.Thread] = []  # the changes, in the order they read the crashed lock
    holding: list[int] = []
    most = 0
    head, attempt = storage.client.head_object, storage._create_if_absent

    def head_object(**kwargs: Any) -> Any:
        found = head(**kwargs)
        with guard:
            order = len(reads)
            if kwargs["Key"] == lock and order < 2:
                reads.append(threading.current_thread())
        if kwargs["Key"] == lock and order < 2:
            found["LastModified"] -= timedelta(seconds=2 * s3_module.FLAGS_LOCK_STALE)
            both_read.wait()
            if order == 1:
                assert first_holds.wait(timeout=10)
        return found

    def create_if_absent(key: str, lock: str, mine: bytes) -> bool:
        taken = attempt(key, lock, mine)
        if threading.current_thread() in reads[1:]:
            later_tried.release()
        return taken

    def change() -> None:
        nonlocal most
        with storage._flags_locked(KEY):
            with guard:
                holding.append(1)
                most = max(most, len(holding))
            if not first_holds.is_set():
                first_holds.set()
                # Held until the other change has tried twice: on its stale reading, and again.
                for _ in range(2):
                    assert later_tried.acquire(timeout=10)
            with guard:
                holding.pop()

    monkeypatch.setattr(storage.client, "head_object", head_object)
    monkeypatch.setattr(storage, "_create_if_absent", create_if_absent)
    with ThreadPoolExecutor(2) as pool:
        for done in [pool.submit(change) for _ in range(2)]:
            done.result()
    assert most == 1
    assert leftovers(s3_server, bucket) == ([KEY], [])


def test_a_change_whose_lock_was_taken_over_leaves_the_next_holders_alone(
    storage: S3Storage, s3_server: S3Server, bucket: str
) -> None:
    put(storage, KEY, b"bytes")
    lock, theirs = s3_module.flags_lock(KEY), os.urandom(16)
    with storage._flags_locked(KEY):
        # This change stalled past FLAGS_LOCK_STALE, and another took its lock over.
        s3_server.client().put_object(Bucket=bucket, Key=lock, Body=theirs)
    assert s3_server.client().get_object(Bucket=bucket, Key=lock)["Body"].read() == theirs


def test_a_change_that_stalls_holding_its_lock_copies_nothing(
    storage: S3Storage, s3_server: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past half the stale bound since its lock's create, a change's lock may be taken over
    before its copy lands: it copies nothing (503, to be tried again)."""
    put(storage, KEY, b"bytes")
    monkeypatch.setattr(s3_module, "FLAGS_LOCK_STALE", 0.0)  # every change has stalled by its copy
    with pytest.raises(StorageUnavailable, match="stalled holding its lock"):
        storage.set_private(KEY, True)
    info = storage.stat(KEY)
    assert info is not None and not info.private
    assert leftovers(s3_server, bucket) == ([KEY], [])
