"""Resumable uploads (tus 1.0.0, CONTRACT §9): what the sync and async clients share.

The protocol is three requests (POST to create, HEAD to ask the offset, PATCH to append), so
the client speaks it over its own httpx connection rather than through tuspy, which would
bring requests, aiohttp and tinydb into the client, add 200 ms to every ``coffer`` start that
imports it (measured: 205 ms for ``import tusclient.client``, against 100 ms for the whole
CLI), hold each chunk in memory, and report progress once per chunk. Here a chunk streams
from disk in 1 MiB reads with the progress callback after each, and a failed PATCH is
followed by a HEAD and goes on from the offset the server holds (tus-js-client and tuspy
check the server side of this in the service's own tests).

``Resumes`` remembers, in the user's cache directory, the upload URL of each file being
uploaded (keyed by its path, size and modification time, and the service and organization), so
``coffer upload`` run again after an interruption continues where the service stopped. That
key holds for a file rewritten in place with its size and modification time kept, so a resumed
upload's asset is checked against the file's sha256 (``sha256_of``) once it completes.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from coffer_client import errors
from coffer_client._base import CHUNK, Source
from coffer_client._options import RetryPolicy

TUS = {"Tus-Resumable": "1.0.0"}
ENDPOINT = "/api/uploads/tus"
# Files above this go through tus in ``coffer upload`` (as in the dashboard).
RESUMABLE_ABOVE = 8 * 1024 * 1024
# Bytes per PATCH: the most a failed request can cost (the service keeps what a broken request
# delivered anyway, unless a proxy drops it).
TUS_CHUNK = 32 * 1024 * 1024


def creation_headers(
    source: Source,
    *,
    name: str | None,
    folder_id: str | None,
    content_type: str | None,
    visibility: str | None,
) -> dict[str, str]:
    """The creation request's headers: the length, and ``Upload-Metadata``."""
    assert source.size is not None
    metadata = {"filename": name or source.name, "folderId": folder_id, "filetype": content_type}
    metadata["visibility"] = visibility
    encoded = ",".join(
        f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in metadata.items() if value
    )
    return {**TUS, "Upload-Length": str(source.size), "Upload-Metadata": encoded}


def patch_headers(offset: int, length: int) -> dict[str, str]:
    return {
        **TUS,
        "Upload-Offset": str(offset),
        "Content-Type": "application/offset+octet-stream",
        "Content-Length": str(length),
    }


def chunk_body(
    source: Source, offset: int, length: int, total: int, progress: Callable[[int, int], None] | None
) -> Iterator[bytes]:
    """``length`` bytes of the file from ``offset``, read 1 MiB at a time, progress after each."""
    reader = source.open()
    try:
        reader.seek(offset, os.SEEK_CUR)  # (a fresh reader is at the start of the data)
        sent = 0
        while sent < length:
            data = reader.read(min(CHUNK, length - sent))
            if not data:
                raise errors.CofferError(f"{source.name} shrank while it was being uploaded.")
            sent += len(data)
            yield data
            if progress is not None:
                progress(offset + sent, total)
    finally:
        if source.close_after:
            reader.close()


def sha256_of(source: Source, total: int) -> str:
    """The hex sha256 of the file's ``total`` bytes, read 1 MiB at a time."""
    reader = source.open()
    try:
        digest, left = hashlib.sha256(), total
        while left > 0:
            data = reader.read(min(CHUNK, left))
            if not data:
                raise errors.CofferError(f"{source.name} shrank while it was being uploaded.")
            digest.update(data)
            left -= len(data)
        return digest.hexdigest()
    finally:
        if source.close_after:
            reader.close()


# A PATCH that failed this way may be retried from the offset HEAD then answers.
RETRYABLE = (httpx.TransportError, errors.Unavailable, errors.RateLimited, errors.Locked, errors.Conflict)


def backoff(policy: RetryPolicy, failures: int, exc: BaseException) -> float:
    """Seconds to wait after the ``failures``-th failure in a row (at least ``Retry-After``)."""
    asked = getattr(exc, "retry_after", None) or 0.0
    return float(max(asked, min(policy.max_wait, policy.initial_wait * 2 ** (failures - 1))))


def offset_of(response: httpx.Response) -> int:
    value = response.headers.get("upload-offset", "")
    if not value.isdigit():
        raise errors.CofferError(f"The service answered no Upload-Offset ({response.status_code}).")
    return int(value)


def asset_id_of(response: httpx.Response) -> str | None:
    """The asset a completed upload made."""
    value: str | None = response.headers.get("coffer-asset-id")
    return value


def absolute(base_url: str, location: str) -> str:
    """The upload's URL from the creation's ``Location`` (or a kept upload URL), always on the
    origin this client talks to: every later request carries the key, and a ``Location``
    naming another host (a hostile or intercepted answer) would have had it sent there. The
    location is resolved against ``base_url`` as a browser would (so ``@host/…``,
    ``.host/…`` and ``//host/…`` are paths or pinned, never a host of their own); its path and
    query are kept (the service's own ``COFFER_BASE_URL`` may name the host otherwise)."""
    named, ours = urlsplit(urljoin(base_url + "/", location)), urlsplit(base_url)
    return urlunsplit((ours.scheme, ours.netloc, named.path, named.query, ""))


# One lock per state file in this process, whatever Resumes reads it: ``coffer upload -j 8``
# makes one per file, and with a lock each their read-modify-write lost each other's URLs.
_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LOCKS.setdefault(path.absolute(), threading.Lock())


class Resumes:
    """Upload URLs of unfinished uploads, in ``<user cache dir>/coffer/uploads.json`` (0600).

    Safe from threads and processes at once: each change is made under this process's lock for
    the file and an ``flock`` on ``uploads.json.lock`` beside it (other processes), and written
    to a temporary file of its own, renamed over the last (8 threads of 50 changes kept 5 URLs,
    and raised 190 times, with one lock per instance and one temporary name per process)."""

    def __init__(self, path: Path | None = None) -> None:
        if path is None:
            import platformdirs

            path = platformdirs.user_cache_path("coffer") / "uploads.json"
        self.path = path
        self._lock = _lock_for(path)

    @staticmethod
    def key(base_url: str, organization_id: str | None, file: Path, target: object = None) -> str:
        """The file (path, size, modification time) uploaded to one service and organization,
        and to one ``target`` (its name, folder and visibility: JSON): the same command with
        another ``--to`` starts anew rather than continue the upload to the first folder."""
        st = file.stat()
        identity = [base_url, organization_id or "", str(file.resolve()), st.st_size, st.st_mtime_ns]
        if target is not None:
            identity.append(target)
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}

    def get(self, key: str) -> str | None:
        with self._lock:  # (the file is only ever replaced whole: a read needs no flock)
            return self._load().get(key)

    def put(self, key: str, url: str | None) -> None:
        """Remember ``url`` for ``key`` (None: forget it)."""
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with self._across_processes():
                data = self._load()
                if url is None:
                    if data.pop(key, None) is None:
                        return
                else:
                    data[key] = url
                self._write(data)

    @contextlib.contextmanager
    def _across_processes(self) -> Iterator[None]:
        try:
            import fcntl
        except ImportError:  # (Windows: one process at a time, as before)
            yield
            return
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # (and the lock with it)

    def _write(self, data: dict[str, str]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:  # (mkstemp's file is 0600, and its name this change's alone)
            with os.fdopen(fd, "w") as out:
                json.dump(data, out)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def check_resumable(source: Source) -> int:
    """A resumable upload needs the file's size and to read it from any offset: its size."""
    if source.size is None or not source.replayable:
        raise errors.CofferError(
            f"{source.name}: a resumable upload needs a file of known size that can be re-read."
        )
    return source.size
