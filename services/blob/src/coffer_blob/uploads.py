"""``POST /internal/v1/uploads/{org}/{asset}``: a multipart stream, parsed and stored as it arrives.

edge forwards the client's raw ``multipart/form-data`` body. The ``file`` part goes to the
storage driver in batches of about 1 MiB, counted on the way; ``name``, ``folderId``,
``visibility``, ``metadata`` and ``tags`` are small fields returned to edge; other parts are
read and ignored. The
object is stored with its visibility (CONTRACT §12): the ``visibility`` field, else the
``visibility`` query parameter (edge's default for the organization); with ``fixed=true``
(an upload token that fixed it) the query parameter alone. The object is committed
only after the whole body has been parsed, so any refusal or failure leaves nothing in
storage.

Receiving and writing overlap: the request handler parses on the event loop and queues
batches (the pieces the socket delivered, never joined), and a writer task hashes them and
writes them in order (one ``writev``), each batch in a worker-thread trip, which hashlib and
the write spend outside the GIL, with at most ``QUEUE_SLOTS`` waiting (so an upload holds a
few MiB at most, and a slow disk slows the sender down). A task rather than a thread of its
own per upload: a thread held for a whole upload would take a thread-pool slot from the CDN
and readiness checks for as long as the slowest client sends. (A hasher task of its own,
beside the writer, was tried: no faster on a loaded machine, and 6-14 MiB more RSS on S3;
docs/performance.md, issue 27.) A file that fits in one batch skips the queue: opened,
hashed, written and committed in one worker-thread trip.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from coffer_blob import detect
from coffer_blob.deps import StorageDep
from coffer_blob.multipart import ParseFailed, PartRouter, Target, parse_boundary
from coffer_blob.storage import ObjectInfo, Storage, StorageUnavailable, Writer
from coffer_kit.contract import keys, media
from coffer_kit.contract.errors import CofferError, file_too_large, invalid, unsupported_media_type
from coffer_kit.contract.limits import MAX_BOUNDARY_CHARS, MAX_FILE_BYTES
from coffer_kit.contract.resources import VISIBILITIES, Visibility
from coffer_kit.contract.wire import (
    MEDIA_RANGE_PATTERN,
    UPLOAD_TOKEN_MAX_TYPE_CHARS,
    UPLOAD_TOKEN_MAX_TYPES,
    Stored,
    UploadFields,
)

log = logging.getLogger("coffer.blob.uploads")
router = APIRouter(prefix="/internal/v1")

FIELDS = ("name", "folderId", "visibility", "expiresAt", "metadata", "tags")
MAX_FIELD_BYTES = 16 * 1024
# A preamble before the first boundary is skipped, up to this much.
MAX_PREAMBLE_BYTES = 64 * 1024
# A part's head (its header lines) and the number of parts (issue 23: a 100 MiB part header
# was buffered whole by the parser, 200 MiB and 12-51 s of CPU on the loop serving the CDN).
# A head holds a Content-Disposition with a name of up to 255 characters, percent-encoded.
MAX_PART_HEAD_BYTES = 16 * 1024
MAX_PARTS = 64
# File bytes handed to the driver in one call: few thread hops, bounded memory.
WRITE_BATCH = 1024 * 1024
# Batches queued for the writer task: receiving runs at most this far ahead of writing.
QUEUE_SLOTS = 2
# After a refusal, read and drop at most this much more so the caller can read the answer
# (edge caps the whole body at MAX_FILE_BYTES + 1 MiB, so this is never reached through edge).
MAX_DRAIN_BYTES = MAX_FILE_BYTES + 2 * 1024 * 1024
_TOKEN_RANGE = re.compile(MEDIA_RANGE_PATTERN)


def malformed(reason: str) -> CofferError:
    return invalid(f"The multipart body is malformed: {reason}.", field="body")


class _PartTarget(Target):
    """Counts the parts routed to it and whether each one was closed by a boundary."""

    def __init__(self) -> None:
        super().__init__()
        self.starts = 0
        self.finishes = 0

    def on_start(self) -> None:
        self.starts += 1

    def on_data_received(self, chunk: bytes) -> None:
        pass

    def on_finish(self) -> None:
        self.finishes += 1

    @property
    def open(self) -> bool:
        return self.starts != self.finishes


class _FileTarget(_PartTarget):
    """The ``file`` part: queues its bytes for the handler, which writes them off the event loop."""

    def __init__(self) -> None:
        super().__init__()
        self.filename: str | None = None
        self.size = 0
        self.too_large = False
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.head = b""  # the first detect.HEAD_BYTES, what the media type is read from

    def on_start(self) -> None:
        super().on_start()
        if self.starts == 1:
            self.filename = self.multipart_filename

    def on_data_received(self, chunk: bytes) -> None:
        if self.starts > 1 or self.too_large:
            return
        self.size += len(chunk)
        if self.size > MAX_FILE_BYTES:
            self.too_large = True
            self.pending.clear()
            self.pending_bytes = 0
            return
        self.pending.append(chunk)
        self.pending_bytes += len(chunk)
        if len(self.head) < detect.HEAD_BYTES:
            self.head += chunk[: detect.HEAD_BYTES - len(self.head)]

    def take(self) -> list[bytes]:
        """The pieces received since the last take, as they came (joined by no one: the
        driver writes them with one ``writev``)."""
        data, self.pending = self.pending, []
        self.pending_bytes = 0
        return data


class _FieldTarget(_PartTarget):
    """A small text field, kept in memory up to ``MAX_FIELD_BYTES``."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[bytes] = []
        self.size = 0

    def on_data_received(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size <= MAX_FIELD_BYTES:
            self.chunks.append(chunk)


class _PartHeads:
    """Bounds every part's head and the number of parts, scanning the bytes before the parser
    sees them (``bytes.find``: no copy of a head is kept), so a head that never ends is
    refused after MAX_PART_HEAD_BYTES, not buffered."""

    def __init__(self, boundary: bytes) -> None:
        self.delimiter = b"\r\n--" + boundary
        self.held = b"\r\n"  # the first boundary has no line break before it
        self.base = -2  # the stream position of ``held[0]``
        self.head_start: int | None = None  # where the head being read began
        self.parts = 0
        self.done = False  # the closing delimiter went by: the rest is the epilogue

    def feed(self, chunk: bytes) -> None:
        if self.done:
            return
        if self.head_start is None and self._no_delimiter(chunk):
            # Inside a part's data with no delimiter in reach (almost every piece of a large
            # file): keep the tail, without copying the piece onto what was held.
            keep = min(len(self.delimiter) - 1, len(self.held) + len(chunk))
            self.base += len(self.held) + len(chunk) - keep
            self.held = (self.held + chunk)[-keep:] if len(chunk) < keep else chunk[-keep:]
            return
        data, pos = self.held + chunk, 0
        while True:
            if self.head_start is None:  # in a part's data: look for the next delimiter
                at = data.find(self.delimiter, pos)
                if at < 0:  # keep what could be the start of one
                    keep = min(len(self.delimiter) - 1, len(data) - pos)
                    break
                pos = at + len(self.delimiter)
                self.head_start = self.base + pos
                continue
            start = self.head_start - self.base  # negative once the head began in an earlier chunk
            if start >= 0 and data[start : start + 2] == b"--":
                self.done = True  # the closing delimiter: what follows is the epilogue
                return
            if start >= 0 and len(data) - start < 2:
                keep = len(data) - start  # not yet known whether it is the closing one
                break
            end = data.find(b"\r\n\r\n", max(pos, start))
            if (end if end >= 0 else len(data)) - start > MAX_PART_HEAD_BYTES:
                raise malformed(f"a part's header is longer than {MAX_PART_HEAD_BYTES} bytes")
            if end < 0:  # keep what could be the start of the blank line
                keep = min(3, len(data))
                break
            self.parts += 1
            if self.parts > MAX_PARTS:
                raise malformed(f"more than {MAX_PARTS} parts")
            self.head_start, pos = None, end + 4
        self.base += len(data) - keep
        self.held = data[len(data) - keep :]

    def _no_delimiter(self, chunk: bytes) -> bool:
        """Whether no delimiter starts in what is held or in ``chunk``: one spanning both is
        within the held bytes and the first ``len(delimiter) - 1`` of ``chunk``."""
        reach = len(self.delimiter) - 1
        return self.delimiter not in self.held + chunk[:reach] and self.delimiter not in chunk


class _Preamble:
    """Drops what comes before the first boundary: RFC 2046 §5.1.1 allows a preamble there,
    to be ignored, and the parser refuses one."""

    def __init__(self, boundary: bytes) -> None:
        self.first = b"--" + boundary
        self.delimiter = b"\r\n--" + boundary
        self.held = b""
        self.skipped = 0
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        """What of ``chunk`` the parser gets: nothing until the first boundary, then all."""
        if self.done:
            return chunk
        data = self.held + chunk
        if data.startswith(self.first):
            self.done, self.held = True, b""
            return data
        if len(data) < len(self.first) and self.first.startswith(data):
            self.held = data  # may still become the first boundary
            return b""
        at = data.find(self.delimiter)
        if at >= 0:
            self.done, self.held = True, b""
            return data[at + 2 :]
        keep = len(self.delimiter) - 1
        self.skipped += max(0, len(data) - keep)
        if self.skipped > MAX_PREAMBLE_BYTES:
            raise malformed(f"no boundary in the first {MAX_PREAMBLE_BYTES} bytes")
        self.held = data[-keep:]
        return b""


class _Upload:
    """One upload in progress: the parser, its targets, and the storage writer."""

    def __init__(
        self,
        storage: Storage,
        org_id: str,
        asset_id: str,
        content_type: str,
        visibility: Visibility = "public",
        fixed: bool = False,
        allow: tuple[tuple[str, ...], ...] = (),
        held: bool = False,
    ) -> None:
        self.storage = storage
        # Issue 48: stored held back from downloads until its malware scan passes (``block``).
        self.held = held
        # Lists of media ranges the detected type must match, each (an enforcing
        # organization's list, its upload token's contentTypes); checked before any byte is
        # written.
        self.allow = allow
        self.detected_type: str | None = None
        self.visibility: Visibility = visibility
        self.fixed_visibility = fixed
        self.org_id = org_id
        self.asset_id = asset_id
        self.file = _FileTarget()
        self.fields = {name: _FieldTarget() for name in FIELDS}
        self.other = _PartTarget()  # every other part: read and dropped
        try:
            boundary = parse_boundary(content_type)
            self.parser = PartRouter(boundary, {"file": self.file, **self.fields}, self.other)
        except ParseFailed:
            raise invalid(
                f"The multipart boundary is missing, or not 1 to {MAX_BOUNDARY_CHARS} characters (RFC 2046).",
                field="content-type",
            ) from None
        self.preamble = _Preamble(boundary)
        self.heads = _PartHeads(boundary)
        self.writer: Writer | None = None
        self.sha256 = hashlib.sha256()
        self.committed = False
        # The writer task and its queue, once the file outgrows one batch (a small file is
        # written and committed in one worker-thread trip, and needs neither).
        self._tasks: TaskGroup | None = None
        self._batches_in: MemoryObjectSendStream[list[bytes]] | None = None
        self._write_failure: Exception | None = None
        self._discard = False  # the upload was refused: queued batches are dropped

    @property
    def key(self) -> str:
        return keys.object_key(self.org_id, self.asset_id, self.filename)

    @property
    def filename(self) -> str:
        return unicodedata.normalize("NFC", self.file.filename or "")

    @property
    def mime_type(self) -> str:
        """The file's media type: its part's own, else guessed from its name."""
        return keys.choose_mime_type(self.file.multipart_content_type, keys.sanitize_filename(self.filename))

    async def run(self, stream: AsyncIterator[bytes]) -> Stored:
        try:
            return await self._run(stream)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._abort()
            raise

    async def _run(self, stream: AsyncIterator[bytes]) -> Stored:
        refused: Exception | None = None
        async with anyio.create_task_group() as self._tasks:
            try:
                async for chunk in stream:
                    await self._receive(chunk)
            except Exception as exc:  # noqa: BLE001 - raised below, once the writer task is done with the file
                refused = exc
                self._discard = True
            finally:
                if self._batches_in is not None:
                    self._batches_in.close()  # the writer task ends when the queue is empty
        refused = refused or self._write_failure
        if isinstance(refused, (CofferError, StorageUnavailable)):
            # Refused mid-body: drop what was written, and read the rest of the body so the
            # caller, still sending, gets to read the answer.
            await self._abort()
            await _drain(stream)
        if refused is not None:
            raise refused
        if self.file.open or self.other.open or any(t.open for t in self.fields.values()):
            raise malformed("the body ends inside a part")
        if not self.heads.done:  # a body cut short after a part is malformed too
            raise malformed("the closing boundary is missing")
        if self.file.starts == 0:
            raise invalid("The 'file' part is missing.", field="file")
        fields = UploadFields.model_validate({name: self._field_value(name) for name in FIELDS})
        if fields.visibility and not self.fixed_visibility:  # (an empty field: as if absent)
            if fields.visibility not in VISIBILITIES:
                raise invalid("'visibility' is 'public' or 'private'.", field="visibility")
            self.visibility = "private" if fields.visibility == "private" else "public"
        mime_type = self.mime_type
        info, sha256 = await run_in_threadpool(self._finish, self.file.take(), mime_type)
        self.committed = True
        assert self.detected_type is not None
        return Stored(
            key=info.key,
            size=self.file.size,
            sha256=sha256,
            mime_type=mime_type,
            # As sent (NFC), for edge's default asset name; "file" when the part named none.
            filename=self.filename or keys.FALLBACK_FILENAME,
            fields=fields,
            visibility=self.visibility,
            detected_type=self.detected_type,
        )

    async def _receive(self, chunk: bytes) -> None:
        data = self.preamble.feed(chunk)
        if data:
            self.heads.feed(data)  # before the parser, which would buffer a head whole
        try:
            if data:
                self.parser.data_received(data)
        except ParseFailed:
            raise malformed("cannot split it into parts") from None
        except UnicodeDecodeError:
            # The parser reads part headers as UTF-8 (RFC 7578 §4.2, what browsers send);
            # a Latin-1 file name or media type cannot be read back reliably: refused.
            raise malformed("a part's headers are not valid UTF-8") from None
        self._check_parts()
        if self.file.too_large:
            raise file_too_large()
        if self.file.pending_bytes >= WRITE_BATCH:
            if self._batches_in is None:
                assert self._tasks is not None
                self._batches_in, batches_out = anyio.create_memory_object_stream[list[bytes]](QUEUE_SLOTS)
                self._tasks.start_soon(self._write_batches, batches_out)
            try:
                await self._batches_in.send(self.file.take())  # waits while the queue is full
            except anyio.BrokenResourceError:  # the writer task stopped: a write failed
                assert self._write_failure is not None
                raise self._write_failure from None

    def _check_parts(self) -> None:
        if self.file.starts > 1:
            raise invalid("Only one 'file' part is allowed.", field="file")
        for name, target in self.fields.items():
            if target.starts > 1:
                raise invalid(f"The '{name}' field is repeated.", field=name)
            if target.size > MAX_FIELD_BYTES:
                raise invalid(f"The '{name}' field is longer than {MAX_FIELD_BYTES} bytes.", field=name)

    def _field_value(self, name: str) -> str | None:
        target = self.fields[name]
        if target.starts == 0:
            return None
        try:
            return b"".join(target.chunks).decode("utf-8")
        except UnicodeDecodeError:
            raise invalid(f"The '{name}' field is not valid UTF-8.", field=name) from None

    async def _write_batches(self, batches: MemoryObjectReceiveStream[list[bytes]]) -> None:
        """The writer task: queued batches, hashed and written in order in worker threads."""
        async with batches:  # closed on the way out, which wakes a waiting sender
            async for data in batches:
                if self._discard:
                    return
                try:
                    await run_in_threadpool(self._write, data)
                except Exception as exc:  # noqa: BLE001 - re-raised by the receiving side
                    self._write_failure = exc
                    return

    def _write(self, data: list[bytes]) -> None:
        # In a worker thread: hashlib leaves the GIL on pieces of 2 KiB or more, as the write does.
        if self.writer is None:
            # The first batch holds the file's first bytes (a batch is 1 MiB, or the whole
            # file): what it is is known, and refused, before anything is stored.
            self._detect()
            self.writer = self.storage.open_writer(self.key)
        update = self.sha256.update
        for piece in data:
            update(piece)
        self.writer.write_many(data)

    def _detect(self) -> None:
        """The detected media type; 415 if it is outside a list this upload must keep to."""
        self.detected_type = detected = detect.detect(self.file.head)
        for allowed in self.allow:
            if not media.admits(allowed, detected, self.mime_type):
                raise media.type_mismatch(self.mime_type, detected, allowed)

    def _finish(self, data: list[bytes], content_type: str) -> tuple[ObjectInfo, str]:
        """In a worker thread: the last batch (or the whole file) and the commit."""
        self._write(data)
        assert self.writer is not None
        sha256 = self.sha256.hexdigest()
        info = self.writer.commit(
            content_type=content_type, sha256=sha256, private=self.visibility == "private", held=self.held
        )
        return info, sha256

    async def _abort(self) -> None:
        if self.writer is None or self.committed:
            return
        writer, self.writer = self.writer, None
        try:
            await run_in_threadpool(writer.abort)
        except Exception:
            # What is left is under the asset's prefix: edge's cleanup or the sweeper removes it.
            log.exception("could not abort an upload", extra={"asset_id": self.asset_id})


async def _drain(stream: AsyncIterator[bytes]) -> None:
    drained = 0
    try:
        async for chunk in stream:
            drained += len(chunk)
            if drained > MAX_DRAIN_BYTES:
                return
    except ClientDisconnect:
        return


def allowed_lists(allow: list[str] | None) -> tuple[tuple[str, ...], ...]:
    """The ``allow`` query parameters: each a comma-separated list of media ranges, as an
    organization's allowed list or an upload token's ``contentTypes`` holds them (the token's
    are the wider: ``image/g*``, up to 100 ranges of 255 characters)."""
    lists = tuple(tuple(r.strip() for r in value.split(",") if r.strip()) for value in allow or ())
    for ranges in lists:
        if len(ranges) > max(media.MAX_ALLOWED_TYPES, UPLOAD_TOKEN_MAX_TYPES) or not all(
            media.valid_range(r)
            or (len(r) <= UPLOAD_TOKEN_MAX_TYPE_CHARS and _TOKEN_RANGE.fullmatch(r.lower()))
            for r in ranges
        ):
            raise invalid("'allow' holds media ranges.", field="allow")
    return lists


@router.post("/uploads/{org_id}/{asset_id}", status_code=201)
async def upload(
    org_id: str,
    asset_id: str,
    request: Request,
    storage: StorageDep,
    visibility: Annotated[Visibility, Query()] = "public",
    fixed: Annotated[bool, Query()] = False,
    allow: Annotated[list[str] | None, Query(max_length=4)] = None,
    held: Annotated[bool, Query()] = False,
) -> Stored:
    """Store the ``file`` part of a multipart body under ``{org_id}/{asset_id}/{filename}``."""
    if not keys.valid_ids(org_id, asset_id):
        raise invalid("Not an organization id and asset id.", field="path")
    content_type = request.headers.get("content-type", "")
    if keys.media_type(content_type) != "multipart/form-data":
        raise unsupported_media_type("The upload must be multipart/form-data.")
    upload = _Upload(storage, org_id, asset_id, content_type, visibility, fixed, allowed_lists(allow), held)
    try:
        return await upload.run(request.stream())
    except ClientDisconnect:
        # Nobody is left to read this; the writer was aborted on the way out.
        raise invalid("The upload ended before the body was complete.", field="body") from None
