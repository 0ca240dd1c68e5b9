"""Helpers for blob's tests: multipart bodies, uploads, looking at the blob dir."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import httpx

TOKEN = "test-internal-token"
SECRET = "test-signing-secret"
CDN_URL = "https://cdn.example.test"
ORG = "org_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"
BOUNDARY = "testboundaryX7MA4YWxkTrZu0gW"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


def new_asset_id() -> str:
    from coffer_kit.contract.ids import new_id

    return new_id("ast")


def field(name: str, value: str | bytes) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + data + b"\r\n"


def file_head(
    filename: str | None = "data.bin",
    content_type: str | None = "application/octet-stream",
    name: str = "file",
) -> bytes:
    disposition = f'form-data; name="{name}"'
    if filename is not None:
        disposition += f'; filename="{filename}"'
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
    if content_type is not None:
        head += f"Content-Type: {content_type}\r\n"
    return (head + "\r\n").encode()


def file_part(data: bytes, **kwargs: Any) -> bytes:
    return file_head(**kwargs) + data + b"\r\n"


END = f"--{BOUNDARY}--\r\n".encode()


def form(*parts: bytes) -> bytes:
    return b"".join(parts) + END


async def agen(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def upload(
    api: httpx.AsyncClient,
    data: bytes = b"hello, coffer",
    *,
    filename: str | None = "data.bin",
    content_type: str | None = "application/octet-stream",
    asset_id: str | None = None,
) -> httpx.Response:
    body = form(file_part(data, filename=filename, content_type=content_type))
    return await api.post(
        f"/internal/v1/uploads/{ORG}/{asset_id or new_asset_id()}",
        content=body,
        headers={"content-type": MULTIPART},
    )


def files_under(root: Path) -> list[str]:
    """Every file (not directory) below ``root``, relative, sorted."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# The fs driver's on-disk format, spelled out here so tests pin it (coffer_blob.storage.fs).


def bucket_dir(blob_dir: Path, org_id: str, asset_id: str) -> Path:
    """The directory an asset's files go to: its organization's bucket of similar ids."""
    return blob_dir / "objects" / org_id / ("%" + asset_id.split("_", 1)[-1][:7])


def object_path(blob_dir: Path, key: str) -> Path:
    """Where the fs driver keeps the bytes of ``key``."""
    org_id, asset_id, filename = key.split("/")
    digest = hashlib.sha256(filename.encode()).hexdigest()[:32]
    return bucket_dir(blob_dir, org_id, asset_id) / f"{asset_id}.{digest}"


def trash_as_the_scan_passes(
    storage: Any, key: str, hold_after_read: Callable[[Callable[[], None]], None]
) -> None:
    """An object goes to the trash as its scan passes: the trash's change has read the
    object's flags, and the scan's comes before it writes them. ``hold_after_read`` installs
    the given pause where a driver's change has read them (it waits only in the trash's
    thread). Then both changes must have landed: trashed, no longer held for the scan."""
    assert storage.set_held(key, True)  # held for its scan, which is about to pass
    trash_has_read, scan_done = threading.Event(), threading.Event()

    def pause() -> None:
        if threading.current_thread().name == "trash":
            trash_has_read.set()
            scan_done.wait(timeout=0.5)  # unlocked, the scan's change would land here

    hold_after_read(pause)
    trash = threading.Thread(target=storage.set_held, args=(key, True, "trash"), name="trash")
    trash.start()
    assert trash_has_read.wait(timeout=10)
    assert storage.set_held(key, False)  # the scan passes
    scan_done.set()
    trash.join(timeout=10)
    info = storage.stat(key)
    assert info is not None and (info.trashed, info.held) == (True, False)
