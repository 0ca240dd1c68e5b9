"""The S3 driver: any S3-compatible store (AWS S3, MinIO, Ceph RGW, R2) through boto3.

Writes mirror the filesystem driver's temp-then-publish:

- a file that fits in one part (8 MiB) is buffered and stored with one ``PutObject`` at
  commit, content type and SHA-256 (``x-amz-meta-sha256``) included;
- a larger one streams as a multipart upload, one part buffered at a time, to a temp key
  ``<asset prefix>/%tmp.<random>``; commit completes it and publishes it under the real key
  with a server-side ``CopyObject`` that sets the content type and the SHA-256 (known only
  once the last byte is in), then deletes the temp object.

A private object (CONTRACT §12) carries ``x-amz-meta-visibility: private``; changing the
visibility copies the object onto itself with the new metadata (``CopyObject``,
``MetadataDirective=REPLACE``: atomic, and S3 reads are strongly consistent), conditional
on the ETag it read, so a concurrent rewrite is never undone. The scan's hold and the trash
are flags alike. A copy of metadata keeps the ETag, so the condition cannot tell two flag
changes apart: each takes a lock object first (``<asset prefix>/%flags.<hash of the name>``,
created only if absent, ``If-None-Match: *``), so changes of one object's flags, from any
blob process, take turns and none undoes another's (a store that ignores the condition runs
them as before, unlocked). A stale lock is taken over by overwriting it on condition of its
ETag (``If-Match``), and a holder deletes its lock on condition of its own: of two changes
that find a lock stale at once one takes it, and a holder that lost its lock leaves the next
holder's alone. A change that has held its lock for half the stale bound when it comes to copy
copies nothing (StorageUnavailable), before its lock can be taken over.

So the real key only ever holds a complete object with its metadata, and a failure at any
step aborts the multipart upload and deletes the temp object: no object, no dangling
upload. What a crash leaves is under the asset's prefix, which ``delete_prefix`` (edge's
cleanup, the sweeper) clears, in-flight multipart uploads included.

Credentials come from boto3's default chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, a profile, an IAM role, IRSA, ...).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from coffer_blob.storage.base import (
    READ_CHUNK,
    ObjectInfo,
    StorageUnavailable,
    StoredObject,
    flags_at_fresh,
    read_range,
)
from coffer_kit.contract.wire import HoldReason

if TYPE_CHECKING:
    from coffer_blob.config import Settings

log = logging.getLogger("coffer.blob.s3")

PART_SIZE = 8 * 1024 * 1024  # S3's minimum is 5 MiB (except the last part)
_RESERVED = "%"
# User metadata of a private object (CONTRACT §12): x-amz-meta-visibility: private.
VISIBILITY, PRIVATE = "visibility", "private"
# Issue 48: an object held back from every download (its scan): x-amz-meta-scan: held.
SCAN, HELD = "scan", "held"
# Issue 47: an object in the trash, likewise held back: x-amz-meta-trash: trashed.
TRASH, TRASHED = "trash", "trashed"
# When a flag above last changed, in Unix seconds (ObjectInfo.flags_at): x-amz-meta-flags-at.
FLAGS_AT = "flags-at"
_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchUpload"}
# A flag change's lock (see the module docstring): a change waits this long for another's turn
# before it gives up (StorageUnavailable: 503, to be tried again); a lock older than
# FLAGS_LOCK_STALE (by the store's clock) was left by a change that died holding it, and is
# taken over. A change holds it for one HeadObject and one CopyObject.
FLAGS_LOCK_WAIT = 10.0
FLAGS_LOCK_STALE = 60.0
_TAKEN = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
# One boto3 session per process: it caches the service model, so each client is cheap to make.
_SESSION: boto3.session.Session | None = None
_SESSION_LOCK = threading.Lock()


def _missing(exc: ClientError) -> bool:
    return _code(exc) in _NOT_FOUND


class S3Storage:
    """Objects in one bucket, under their keys; see the module docstring for the write path."""

    name = "s3"
    inline_read_bytes = 0  # every read is a network call: never on the event loop

    def __init__(
        self, client: Any, bucket: str, *, part_size: int = PART_SIZE, page_size: int = 1000
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.part_size = part_size
        self.page_size = page_size  # keys per listing page (and per DeleteObjects call, at most 1000)

    @classmethod
    def from_settings(cls, settings: Settings) -> S3Storage:
        config = Config(
            s3={"addressing_style": "path" if settings.s3_force_path_style else "auto"},
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            max_pool_connections=64,
            # Checksums only where S3 requires them: boto3's newer defaults break several
            # S3-compatible stores, and blob checks SHA-256 itself.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        with _SESSION_LOCK:  # sessions are not thread-safe; clients are
            global _SESSION
            if _SESSION is None:
                _SESSION = boto3.session.Session()
            client = _SESSION.client(
                "s3",
                endpoint_url=settings.s3_endpoint_url or None,
                region_name=settings.s3_region or None,
                config=config,
            )
        return cls(client, settings.s3_bucket)

    def _call(self, what: str, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            if _missing(exc):
                raise
            raise StorageUnavailable(f"S3 {method} for {what} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"S3 {method} for {what} failed: {exc}") from exc

    # -- the interface -------------------------------------------------------------------

    def open_writer(self, key: str) -> _S3Writer:
        _check_key(key)
        return _S3Writer(self, key)

    def open_resumable(self, key: str, upload_id: str, offset: int, state: dict[str, Any]) -> _S3Resumable:
        return _S3Resumable(self, key, upload_id, offset, state)

    def stat(self, key: str) -> ObjectInfo | None:
        _check_key(key)
        try:
            head = self._call(key, "head_object", Key=key)
        except ClientError:
            return None
        sha256 = head.get("Metadata", {}).get("sha256")
        if not sha256:
            return None  # not written by blob (or not finished): not a committed object
        return ObjectInfo(
            key=key,
            size=int(head["ContentLength"]),
            sha256=sha256,
            content_type=head.get("ContentType") or "application/octet-stream",
            last_modified=head["LastModified"].astimezone(UTC).replace(microsecond=0),
            private=head.get("Metadata", {}).get(VISIBILITY) == PRIVATE,
            held=head.get("Metadata", {}).get(SCAN) == HELD,
            trashed=head.get("Metadata", {}).get(TRASH) == TRASHED,
            flags_at=_flags_at(head.get("Metadata", {}).get(FLAGS_AT)),
        )

    def set_private(self, key: str, private: bool) -> bool:
        return self._set_flag(key, VISIBILITY, PRIVATE, private)

    def set_held(self, key: str, held: bool, reason: HoldReason = "scan") -> bool:
        name, value = (SCAN, HELD) if reason == "scan" else (TRASH, TRASHED)
        return self._set_flag(key, name, value, held)

    def _set_flag(self, key: str, name: str, value: str, on: bool) -> bool:
        """Set or clear the user metadata ``name: value`` by copying the object onto itself,
        conditional on its ETag, under the object's flags lock."""
        _check_key(key)
        with self._flags_locked(key) as held_until:
            return self._copy_with_flag(key, name, value, on, held_until)

    @contextlib.contextmanager
    def _flags_locked(self, key: str) -> Iterator[float]:
        """Hold ``key``'s flags lock; yields the monotonic time until which it is surely this
        change's: half FLAGS_LOCK_STALE from the create, well before another may take it over."""
        lock = flags_lock(key)
        deadline, pause = time.monotonic() + FLAGS_LOCK_WAIT, 0.005
        mine = secrets.token_bytes(16)  # whose lock it is, by its ETag (the body's MD5)
        while True:
            tried_at = time.monotonic()
            if self._create_if_absent(key, lock, mine):
                break
            if time.monotonic() > deadline:
                raise StorageUnavailable(f"Another request is changing the flags of {key}; try again.")
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
        try:
            yield tried_at + FLAGS_LOCK_STALE / 2
        finally:
            self._release(key, lock, mine)

    def _release(self, key: str, lock: str, mine: bytes) -> None:
        """Delete ``lock`` if it is still this change's: conditional on its ETag, so that a change
        that stalled past FLAGS_LOCK_STALE and lost its lock leaves the next holder's alone."""
        try:
            self.client.delete_object(Bucket=self.bucket, Key=lock, IfMatch=_etag_of(mine))
        except ClientError as exc:
            if _code(exc) in _TAKEN:
                log.warning("the flags lock of %s was taken over while held", key)
            elif not _missing(exc):  # (missing: taken over and gone, or never made: no conditions)
                # A store without conditional deletes: deleted as before.
                with contextlib.suppress(ClientError, BotoCoreError):
                    self.client.delete_object(Bucket=self.bucket, Key=lock)
        except BotoCoreError:
            pass  # left behind: stale, and taken over, after FLAGS_LOCK_STALE

    def _create_if_absent(self, key: str, lock: str, mine: bytes) -> bool:
        """Create ``lock`` with the body ``mine`` unless it exists: then True only if it is this
        one (a create that boto3 retried after its answer was lost), or a stale one this change
        took over; False otherwise."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=lock, Body=mine, IfNoneMatch="*")
            return True
        except ClientError as exc:
            code = _code(exc)
            if code == "NotImplemented":  # a store without conditional writes: unlocked, as before
                log.warning("the store has no conditional PutObject: flag changes of %s are unlocked", key)
                return True
            if code not in _TAKEN:
                raise StorageUnavailable(f"S3 put_object for the flags lock of {key} failed: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"S3 put_object for the flags lock of {key} failed: {exc}") from exc
        with contextlib.suppress(ClientError, BotoCoreError):
            head = self.client.head_object(Bucket=self.bucket, Key=lock)
            if head["ETag"].strip('"') == _etag_of(mine):
                return True
            if (_answered_at(head) - head["LastModified"]).total_seconds() > FLAGS_LOCK_STALE:
                log.warning("taking over the flags lock of %s, left %s", key, head["LastModified"])
                return self._take_over(lock, head["ETag"], mine)
        return False

    def _take_over(self, lock: str, etag: str, mine: bytes) -> bool:
        """Overwrite the stale ``lock`` on condition of the ETag read: of two changes that find
        it stale at once, one takes it (the other's condition fails, 412)."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=lock, Body=mine, IfMatch=etag)
            return True
        except ClientError as exc:
            if _code(exc) == "NotImplemented":  # no If-Match here: deleted, to be created again
                self.client.delete_object(Bucket=self.bucket, Key=lock)
            return False

    def _copy_with_flag(self, key: str, name: str, value: str, on: bool, held_until: float) -> bool:
        try:
            head = self._call(key, "head_object", Key=key)
        except ClientError:
            return False
        metadata = dict(head.get("Metadata", {}))
        if not metadata.get("sha256"):
            return False
        if (metadata.get(name) == value) == on and flags_at_fresh(_flags_at(metadata.get(FLAGS_AT))):
            return True
        metadata.pop(name, None)
        if on:
            metadata[name] = value
        metadata[FLAGS_AT] = str(int(time.time()))
        if time.monotonic() > held_until:
            # Stalled this long, the lock may be another's by the time the copy lands, and the
            # metadata read may be stale: copy nothing, and let the caller try again.
            raise StorageUnavailable(f"The flags change of {key} stalled holding its lock; try again.")
        try:
            self._call(
                key,
                "copy_object",
                Key=key,
                CopySource={"Bucket": self.bucket, "Key": key},
                CopySourceIfMatch=head["ETag"],
                MetadataDirective="REPLACE",
                ContentType=head.get("ContentType") or "application/octet-stream",
                Metadata=metadata,
            )
        except ClientError:
            return False  # deleted meanwhile
        return True

    def open_reader(self, key: str, start: int = 0, end: int | None = None) -> _S3Reader | None:
        _check_key(key)
        if end is not None and end <= start:
            # Nothing to read (S3 refuses empty ranges), but the object must exist.
            return _S3Reader(None) if self.stat(key) is not None else None
        kwargs: dict[str, Any] = {"Key": key}
        if start or end is not None:
            kwargs["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
        try:
            response = self._call(key, "get_object", **kwargs)
        except ClientError:
            return None
        return _S3Reader(response["Body"])

    def read_small(self, key: str, limit: int) -> tuple[ObjectInfo, bytes | None] | None:
        info = self.stat(key)
        if info is None:
            return None
        if info.size > limit:
            return info, None
        data = read_range(self, key, 0, info.size)
        return None if data is None else (info, data)  # (None: deleted since the stat)

    def delete(self, key: str) -> None:
        _check_key(key)
        try:
            self._call(key, "delete_object", Key=key)  # S3 deletes are idempotent
        except ClientError:
            return

    def delete_prefix(self, prefix: str) -> None:
        if not prefix.endswith("/"):
            raise ValueError(f"a prefix ends with '/': {prefix!r}")
        _check_key(prefix[:-1])
        # Unfinished multipart uploads first: they hold bytes (and cost) but list as no object.
        for page in self._pages("list_multipart_uploads", "Uploads", prefix):
            for upload in page:
                with contextlib.suppress(ClientError):  # finished or aborted meanwhile
                    self._call(
                        prefix, "abort_multipart_upload", Key=upload["Key"], UploadId=upload["UploadId"]
                    )
        for page in self._pages("list_objects_v2", "Contents", prefix):
            if not page:
                continue
            # Data objects before temp objects, as the filesystem driver does.
            keys = sorted((item["Key"] for item in page), key=lambda k: k.rsplit("/", 1)[-1].startswith("%"))
            result = self._call(
                prefix, "delete_objects", Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
            if result.get("Errors"):
                raise StorageUnavailable(f"S3 could not delete under {prefix}: {result['Errors'][:3]}")

    def filenames(self, prefix: str, limit: int) -> list[str]:
        return [name for name, _ in self.sizes(prefix, limit)]

    def sizes(self, prefix: str, limit: int) -> list[tuple[str, int]]:
        if not prefix.endswith("/"):
            raise ValueError(f"a prefix ends with '/': {prefix!r}")
        _check_key(prefix[:-1])
        names: list[tuple[str, int]] = []
        for page in self._pages("list_objects_v2", "Contents", prefix):
            for item in page:
                name = item["Key"][len(prefix) :]
                if "/" not in name and not name.startswith(_RESERVED):  # not a write in progress
                    names.append((name, int(item["Size"])))
        return sorted(names)[:limit]

    def inventory(self) -> Iterator[StoredObject]:
        """The bucket's listing, without temp objects, resumable uploads' parts and tails (a
        ``%`` segment); unfinished multipart uploads list as no object."""
        for page in self._pages("list_objects_v2", "Contents", ""):
            for item in page:
                key = str(item["Key"])
                if any(part.startswith(_RESERVED) for part in key.split("/")):
                    continue
                yield StoredObject(
                    key=key,
                    size=int(item["Size"]),
                    last_modified=item["LastModified"].astimezone(UTC).replace(microsecond=0),
                )

    def check(self) -> None:
        try:
            self._call("readiness", "head_bucket")
        except ClientError as exc:
            raise StorageUnavailable(f"bucket {self.bucket} is not reachable: {exc}") from exc

    def close(self) -> None:
        self.client.close()

    def _pages(self, operation: str, field: str, prefix: str) -> Iterator[list[dict[str, Any]]]:
        try:
            pages = self.client.get_paginator(operation).paginate(
                Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": self.page_size}
            )
            for page in pages:
                yield page.get(field) or []
        except (BotoCoreError, ClientError) as exc:
            raise StorageUnavailable(f"S3 {operation} under {prefix} failed: {exc}") from exc


def _answered_at(response: dict[str, Any]) -> datetime:
    """When S3 answered a write (its Date header; PutObject answers no Last-Modified)."""
    date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    with contextlib.suppress(TypeError, ValueError):
        return parsedate_to_datetime(date)
    return datetime.now(UTC)


def _etag_of(body: bytes) -> str:
    """The ETag S3 gives an object of ``body`` put in one piece (its MD5), unquoted."""
    return hashlib.md5(body, usedforsecurity=False).hexdigest()


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code"))


def _flags_at(value: str | None) -> datetime | None:
    """An object's ``flags-at`` metadata (Unix seconds), or None (absent, or not a time: never
    a reason to refuse the object)."""
    if not value or not value.isascii() or not value.isdigit() or len(value) > 12:
        return None
    try:
        return datetime.fromtimestamp(int(value), UTC)
    except (ValueError, OverflowError, OSError):
        return None


def flags_lock(key: str) -> str:
    """The key of the lock object of ``key``'s flag changes: beside it, fixed in length."""
    prefix, slash, filename = key.rpartition("/")
    return f"{prefix}{slash}{_RESERVED}flags.{hashlib.sha256(filename.encode()).hexdigest()[:32]}"


def _check_key(key: str) -> None:
    parts = key.split("/")
    for part in parts:
        if part in ("", ".", "..") or part.startswith(_RESERVED) or "\x00" in part:
            raise ValueError(f"not a storage key: {key!r}")


class _S3Writer:
    """Buffers up to one part; beyond that, a multipart upload to a temp key."""

    def __init__(self, storage: S3Storage, key: str) -> None:
        self.storage = storage
        self.key = key
        self.temp_key = f"{key.rsplit('/', 1)[0]}/{_RESERVED}tmp.{secrets.token_hex(12)}"
        # One growing buffer, handed to boto3 as it is: joining a list of chunks held two
        # copies of a part at once.
        self._buffer = bytearray()
        self._size = 0  # the object's bytes so far
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._temp_exists = False
        self._published = False
        self._done = False

    def write(self, chunk: bytes) -> None:
        assert not self._done, "write after commit or abort"
        self._buffer += chunk
        self._size += len(chunk)
        if len(self._buffer) >= self.storage.part_size:
            # Parts need not be equal: send what is buffered (a little over PART_SIZE).
            self._upload_part(self._take())

    def write_many(self, chunks: Sequence[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def commit(
        self, *, content_type: str, sha256: str, private: bool = False, held: bool = False
    ) -> ObjectInfo:
        assert not self._done, "commit after commit or abort"
        s3 = self.storage
        metadata = {"sha256": sha256}
        if private:
            metadata[VISIBILITY] = PRIVATE
        if held:
            metadata[SCAN] = HELD
        try:
            if self._upload_id is None:
                body = self._take()
                self._published = True
                put = s3._call(
                    self.key,
                    "put_object",
                    Key=self.key,
                    Body=body,
                    ContentType=content_type,
                    Metadata=metadata,
                )
                stored_at = _answered_at(put)
            else:
                self._assemble()
                self._upload_id = None
                self._published = True  # from here on, a failure must delete the real key too
                copied = s3._call(
                    self.key,
                    "copy_object",
                    Key=self.key,
                    CopySource={"Bucket": s3.bucket, "Key": self.temp_key},
                    MetadataDirective="REPLACE",
                    ContentType=content_type,
                    Metadata=metadata,
                )
                self._temp_exists = False
                try:
                    s3._call(self.key, "delete_object", Key=self.temp_key)
                except StorageUnavailable as exc:
                    # Published already: failing now would delete the object just stored (and
                    # a resumable upload's retry could never finish). The temp object is under
                    # the asset's prefix, which delete_prefix clears with the asset.
                    log.warning("temp object left behind", extra={"key": self.temp_key, "error": str(exc)})
                stored_at = copied.get("CopyObjectResult", {}).get("LastModified") or _answered_at(copied)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, ClientError):
                raise StorageUnavailable(f"S3 upload of {self.key} failed: {exc}") from exc
            raise
        self._done = True
        # What S3 acknowledged is what it holds (its writes are read-after-write consistent):
        # no HeadObject to read it back, one request less per upload.
        return ObjectInfo(
            key=self.key,
            size=self._size,
            sha256=sha256,
            content_type=content_type,
            last_modified=stored_at.astimezone(UTC).replace(microsecond=0),
            private=private,
            held=held,
        )

    def _assemble(self) -> None:
        """The last part sent, and the multipart upload completed into the temp key."""
        if self._buffer:
            self._upload_part(self._take())
        self.storage._call(
            self.key,
            "complete_multipart_upload",
            Key=self.temp_key,
            UploadId=self._upload_id,
            MultipartUpload={"Parts": self._parts},
        )

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._buffer = bytearray()
        steps: list[tuple[str, dict[str, Any]]] = []
        if self._upload_id is not None:
            steps.append(("abort_multipart_upload", {"Key": self.temp_key, "UploadId": self._upload_id}))
        if self._temp_exists:
            steps.append(("delete_object", {"Key": self.temp_key}))
        if self._published:
            steps.append(("delete_object", {"Key": self.key}))
        failure: StorageUnavailable | None = None
        for method, kwargs in steps:  # every step is tried, whatever the others did
            try:
                self.storage._call(self.key, method, **kwargs)
            except ClientError:
                pass  # already gone
            except StorageUnavailable as exc:
                failure = exc
        if failure is not None:
            raise failure

    def _take(self) -> bytearray:
        """Everything buffered, handed over without a copy; a new buffer starts."""
        data, self._buffer = self._buffer, bytearray()
        return data

    def _upload_part(self, body: bytearray) -> None:
        s3 = self.storage
        if self._upload_id is None:
            created = s3._call(self.key, "create_multipart_upload", Key=self.temp_key)
            self._upload_id = created["UploadId"]
            self._temp_exists = True  # (once completed; deleting it is harmless before)
        number = len(self._parts) + 1
        try:
            part = s3._call(
                self.key,
                "upload_part",
                Key=self.temp_key,
                UploadId=self._upload_id,
                PartNumber=number,
                Body=body,
            )
        except ClientError as exc:
            raise StorageUnavailable(f"S3 upload of {self.key} failed: {exc}") from exc
        self._parts.append({"PartNumber": number, "ETag": part["ETag"]})


class _S3Resumable(_S3Writer):
    """A resumable upload as one multipart upload to a temp key named after the upload.

    S3 parts but the last must be 5 MiB or more, so what a request leaves below a part (the
    tail) is stored as an object of its own, named after the upload and its offset, and read
    back by the next request. A failed request's parts are overwritten by the next one (same
    part numbers: only checkpointed parts count) and its tail object is never read. ``commit``
    completes the upload and publishes it like any object, then deletes the tails and aborts
    any other multipart upload of this one (left by a request that died). A commit whose
    publish failed leaves the upload completed into the temp key; the retry starts a new one
    from it (``_reassemble``)."""

    def __init__(
        self, storage: S3Storage, key: str, upload_id: str, offset: int, state: dict[str, Any]
    ) -> None:
        super().__init__(storage, key)
        self._prefix = key.rsplit("/", 1)[0]
        self._name = upload_id
        self.temp_key = f"{self._prefix}/{_RESERVED}tus.{upload_id}"
        self._size = offset  # (the tail read back below is part of it)
        self._upload_id = state.get("uploadId")
        self._parts = [dict(p) for p in state.get("parts", [])]
        self._temp_exists = self._upload_id is not None
        self._in_parts = offset - int(state.get("tail") or 0)  # the bytes the parts hold
        self._inherited = self._upload_id is not None  # (not yet seen to take a part)
        if state.get("tail"):
            tail = storage._call(key, "get_object", Key=self._tail_key(offset))
            self._buffer += tail["Body"].read()

    def _tail_key(self, offset: int) -> str:
        return f"{self._prefix}/{_RESERVED}tail.{self._name}.{offset}"

    def checkpoint(self, offset: int) -> dict[str, Any]:
        if self._buffer:
            self.storage._call(self.key, "put_object", Key=self._tail_key(offset), Body=bytes(self._buffer))
        self._done = True
        return {"uploadId": self._upload_id, "parts": self._parts, "tail": len(self._buffer)}

    def commit(
        self, *, content_type: str, sha256: str, private: bool = False, held: bool = False
    ) -> ObjectInfo:
        info = super().commit(content_type=content_type, sha256=sha256, private=private, held=held)
        s3 = self.storage
        for page in s3._pages("list_multipart_uploads", "Uploads", self.temp_key):
            for upload in page:
                with contextlib.suppress(ClientError):
                    ids = {"Key": upload["Key"], "UploadId": upload["UploadId"]}
                    s3._call(self.key, "abort_multipart_upload", **ids)
        for page in s3._pages("list_objects_v2", "Contents", f"{self._prefix}/{_RESERVED}tail.{self._name}."):
            if page:
                s3._call(self.key, "delete_objects", Delete={"Objects": [{"Key": o["Key"]} for o in page]})
        return info

    def _upload_part(self, body: bytearray) -> None:
        try:
            super()._upload_part(body)
        except (ClientError, StorageUnavailable):
            if not self._reassemble():
                raise
            super()._upload_part(body)
        self._inherited = False

    def _assemble(self) -> None:
        try:
            super()._assemble()
        except (ClientError, StorageUnavailable):
            if not self._reassemble():
                raise
            super()._assemble()

    def _reassemble(self) -> bool:
        """Start the multipart upload again when a commit before this one completed it (its
        parts are gone) and then failed to publish it: the temp object holds the parts' bytes,
        copied into part 1 of a new upload. False when the upload is not the one inherited or
        there is no such temp object: the failure was another."""
        if not self._inherited:
            return False
        self._inherited = False
        s3 = self.storage
        try:
            held = int(s3._call(self.key, "head_object", Key=self.temp_key)["ContentLength"])
        except (ClientError, StorageUnavailable):
            return False
        if held < self._in_parts:
            return False
        self._upload_id = s3._call(self.key, "create_multipart_upload", Key=self.temp_key)["UploadId"]
        copied = s3._call(
            self.key,
            "upload_part_copy",
            Key=self.temp_key,
            UploadId=self._upload_id,
            PartNumber=1,
            CopySource={"Bucket": s3.bucket, "Key": self.temp_key},
            CopySourceRange=f"bytes=0-{self._in_parts - 1}",
        )
        self._parts = [{"PartNumber": 1, "ETag": copied["CopyPartResult"]["ETag"]}]
        log.info("resumable upload started again from its temp object", extra={"key": self.temp_key})
        return True

    def abort(self) -> None:
        """Keep the parts and tails (an unfinished upload goes with its prefix); only a half
        published object is removed."""
        if self._done:
            return
        self._done = True
        if self._published:
            with contextlib.suppress(ClientError):
                self.storage._call(self.key, "delete_object", Key=self.key)


class _S3Reader:
    def __init__(self, body: Any) -> None:
        self._body = body

    def __iter__(self) -> Iterator[bytes]:
        if self._body is None:
            return
        try:
            yield from self._body.iter_chunks(READ_CHUNK)
        except BotoCoreError as exc:
            raise StorageUnavailable(f"S3 read failed: {exc}") from exc

    def close(self) -> None:
        if self._body is not None:
            self._body.close()
