"""The bytes of resumable uploads (tus, CONTRACT §9): each chunk appended where the last
durable one ended, by whichever blob process edge sends it to.

Nothing of an upload lives in a process: the bytes are in the store (``Storage.open_resumable``:
a part file, or S3 parts and a tail object) and everything else travels with each request
from metadata through edge, the SHA-256 of the bytes so far included (its state serialised
by ``rehashes``), so hashing needs neither the whole file in memory nor one process that saw
every chunk. A chunk is made durable before its new offset is answered; once the last byte
is in, the object is published under its key like any upload.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from starlette.concurrency import run_in_threadpool

from coffer_blob import detect
from coffer_blob.deps import StorageDep
from coffer_blob.storage import Storage, StorageUnavailable, read_range
from coffer_blob.storage.base import Resumable
from coffer_kit.contract import keys
from coffer_kit.contract.errors import checksum_mismatch, file_too_large, invalid, unavailable
from coffer_kit.contract.ids import TUS_UPLOAD_ID_PATTERN
from coffer_kit.contract.limits import MAX_FILE_BYTES
from coffer_kit.contract.wire import TusAppended, TusKey, TusTarget

router = APIRouter(prefix="/internal/v1/tus")
_UPLOAD_ID = re.compile(TUS_UPLOAD_ID_PATTERN)

# Bytes gathered on the event loop (the pieces the socket delivered, never joined) before one
# worker-thread trip hashes and writes them, as a one-shot upload's (uploads.WRITE_BATCH): a
# MiB or more goes to the file system driver's direct writes.
BATCH = 1024 * 1024
# What Upload-Checksum may name (CONTRACT §9), as hashlib names them.
CHECKSUMS = {"sha1": "sha1", "sha256": "sha256"}


@router.post("/{org_id}/key")
async def name_key(org_id: str, body: TusTarget) -> TusKey:
    """The key and media type an upload's file gets, exactly as a multipart upload's would.
    edge names them itself now (coffer_kit.contract.keys.named); this answers an edge of the
    previous release while a rolling upgrade replaces it, and can go in the release after."""
    if not keys.valid_ids(org_id, body.asset_id):
        raise invalid("Not an organization id and asset id.", field="path")
    key, mime_type = keys.named(org_id, body.asset_id, body.filename, body.filetype)
    return TusKey(key=key, mime_type=mime_type)


@dataclass(frozen=True)
class Replayed:
    """A last chunk whose file was published already: the SHA-256 the whole file would have."""

    sha256: str


class _Chunk:
    """One request's bytes on their way into a resumable object, hashed as they go."""

    def __init__(
        self,
        opener: Callable[[], Resumable],
        hash_state: str | None,
        checksum: str | None,
        *,
        replaying: bool,
    ) -> None:
        self.opener = opener
        self.writer: Resumable | None = None  # opened by the first write, in its worker thread
        # The upload's file is published already (``replaying``): its parts and tails are gone,
        # so the chunk is only hashed, for ``finish`` to tell a last chunk retried after it
        # published the file.
        self.replaying = replaying
        # Imported by the first chunk, not at start: 0.6 MiB of idle RSS in a blob that never
        # sees a resumable upload.
        import rehashes

        self.sha256 = (
            rehashes.PySha256.deserialize(base64.b64decode(hash_state)) if hash_state else rehashes.PySha256()
        )
        self.algorithm, self.expected, self.check = None, b"", None
        if checksum:
            algorithm, _, digest = checksum.strip().partition(" ")
            if algorithm not in CHECKSUMS:
                raise invalid("Upload-Checksum names sha1 or sha256.", field="Upload-Checksum")
            try:
                self.expected = base64.b64decode(digest, validate=True)
            except ValueError:
                raise invalid("Upload-Checksum's digest is not base64.", field="Upload-Checksum") from None
            self.algorithm, self.check = algorithm, hashlib.new(CHECKSUMS[algorithm])

    def write(self, pieces: list[bytes]) -> None:
        """In a worker thread: hash and write one batch (the first opens the object)."""
        if self.writer is None and not self.replaying:
            self.writer = self.opener()
        for piece in pieces:
            self.sha256.update(piece)
            if self.check is not None:
                self.check.update(piece)
        if self.writer is not None:
            self.writer.write_many(pieces)

    def finish(
        self, pieces: list[bytes], new_offset: int, final: bool, commit: Callable[[Resumable, str], object]
    ) -> str | dict[str, Any] | Replayed:
        """In a worker thread: the last batch, then the checkpoint (answers its state), or, at
        the upload's last byte, the commit (answers the SHA-256). A last chunk retried after
        its first try published the file (and metadata then failed to make the asset) finds the
        file there: it answers ``Replayed``, for the route to check against the file."""
        self.write(pieces)
        if self.replaying:
            if not final:
                raise StorageUnavailable("the bytes of this upload are gone")
            return Replayed(self.sha256.finalize())
        assert self.writer is not None
        if final:
            sha256: str = self.sha256.finalize()
            commit(self.writer, sha256)
            return sha256
        return self.writer.checkpoint(new_offset)

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()

    def matches(self, last: list[bytes]) -> bool:
        """Whether the chunk, ``last`` (its batch not yet written) included, has the checksum."""
        if self.check is None:
            return True
        check = self.check.copy()
        for piece in last:
            check.update(piece)
        return check.digest() == self.expected

    async def receive(self, stream: AsyncIterator[bytes], room: int) -> tuple[int, list[bytes]]:
        """Hash and write the body (at most ``room`` bytes); answers how many there were, and
        the last batch, not yet written (``finish`` writes it in the same thread trip as what
        follows).

        A pipeline of two: while a worker thread hashes and writes one batch (flushed to
        disk as any upload's, every ``SYNC_EVERY``; the checkpoint makes the rest durable),
        the loop receives the next; at most two batches are held."""
        received, batch, batched = 0, list[bytes](), 0
        writing: asyncio.Future[None] | None = None
        try:
            async for data in stream:
                received += len(data)
                if received > room:
                    raise file_too_large(room)  # more than Upload-Length: nothing kept
                if not data:
                    continue
                batch.append(data)
                batched += len(data)
                if batched >= BATCH:
                    if writing is not None:
                        await writing
                    writing = asyncio.ensure_future(run_in_threadpool(self.write, batch))
                    batch, batched = [], 0
        finally:
            if writing is not None:
                await writing  # (never two writers of one file at once, even on the way out)
        return received, batch


def _published(storage: Storage, key: str, length: int) -> bool:
    """Whether the upload's file is in the store whole: only its last chunk publishes it, so a
    chunk that finds it is a retry (its first try published the file, then its answer or the
    asset's row was lost), on either driver, whatever of the parts and tails is left."""
    info = storage.stat(key)
    return info is not None and info.size == length


@router.put("/{org_id}/{asset_id}/{upload_id}")
async def append(
    org_id: str,
    asset_id: str,
    upload_id: str,
    request: Request,
    storage: StorageDep,
    key: Annotated[str, Query(max_length=2048)],
    offset: Annotated[int, Query(ge=0, le=MAX_FILE_BYTES)],
    length: Annotated[int, Query(ge=0, le=MAX_FILE_BYTES)],
    media_type: Annotated[str, Query(alias="mediaType", max_length=255)],
    private: Annotated[bool, Query()] = False,
    # Issue 48: under scan=block the last byte publishes the object held, never served until
    # its scan passes (edge holds it again after, in case the organization's mode changed).
    held: Annotated[bool, Query()] = False,
    state: Annotated[str | None, Header(alias="coffer-tus-state", max_length=16384)] = None,
    checksum: Annotated[str | None, Header(alias="coffer-tus-checksum", max_length=256)] = None,
) -> TusAppended:
    """Append the body at ``offset`` of upload ``upload_id`` (whose file is ``key``, ``length``
    bytes in all). A body cut short keeps what arrived (unless it has a checksum, which it
    then cannot match); the last byte publishes the object."""
    if (
        not keys.valid_ids(org_id, asset_id)
        or not keys.is_valid_key(key)
        or not key.startswith(f"{org_id}/{asset_id}/")
    ):
        raise invalid("Not an organization id, asset id and key of that asset.", field="path")
    if not _UPLOAD_ID.fullmatch(upload_id) or offset > length:
        raise invalid("Not an upload id, or an offset past the length.", field="path")
    resume: dict[str, Any] = json.loads(state) if state else {}
    store: dict[str, Any] = resume.get("store", {})
    chunk = _Chunk(
        functools.partial(storage.open_resumable, key, upload_id, offset, store),
        resume.get("hash"),
        checksum,
        replaying=offset > 0 and await run_in_threadpool(_published, storage, key, length),
    )

    def commit(writer: Resumable, sha256: str) -> object:
        return writer.commit(content_type=media_type, sha256=sha256, private=private, held=held)

    try:
        # A ClientDisconnect is edge gone (it ends the body cleanly when its client goes):
        # nobody to answer, and nothing checkpointed.
        received, last = await chunk.receive(request.stream(), length - offset)
        if not chunk.matches(last):
            await run_in_threadpool(chunk.abort)
            raise checksum_mismatch(chunk.algorithm or "")
        new_offset = offset + received
        final = new_offset == length
        done = await run_in_threadpool(chunk.finish, last, new_offset, final, commit)
    except StorageUnavailable as exc:
        await run_in_threadpool(chunk.abort)
        raise unavailable(f"The store failed: {exc}") from exc
    except BaseException:
        await run_in_threadpool(chunk.abort)
        raise
    if isinstance(done, Replayed):
        # The retry of a last chunk whose first try published the file: the same bytes make the
        # same file, answered as then (edge then makes the asset); any other bytes, gone.
        info = await run_in_threadpool(storage.stat, key)
        if info is None or info.size != length or info.sha256 != done.sha256:
            raise unavailable(f"The store failed: the bytes of upload {upload_id} are gone.")
        done = done.sha256
    if isinstance(done, str):
        # The published file's first bytes, read back once: a resumable upload's may have come
        # in another request, to another blob.
        # (S3 refuses a range of an empty object.)
        head = await run_in_threadpool(read_range, storage, key, 0, detect.HEAD_BYTES) if length else b""
        # In a worker thread, as a one-shot upload's: libmagic's text tests took 20-28 ms of
        # 2 KiB of line breaks, the whole process's event loop stalled meanwhile.
        detected = await run_in_threadpool(detect.detect, head or b"")
        return TusAppended(offset=new_offset, sha256=done, detected_type=detected)
    hash_state = base64.b64encode(chunk.sha256.serialize()).decode()
    return TusAppended(offset=new_offset, state={"hash": hash_state, "store": done})
