"""POST /internal/v1/uploads/{org}/{asset}: multipart streams stored through the fs driver."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from coffer_blob import uploads
from coffer_blob.multipart import ParseFailed, PartRouter, Target, parse_boundary
from coffer_blob.storage import StorageUnavailable
from coffer_blob.storage import fs as fs_module
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.urls import MAX_FILE_BYTES
from coffer_testkit.testing import assert_error, pattern_chunks, rss_bytes

from .support import (
    BOUNDARY,
    END,
    MULTIPART,
    ORG,
    agen,
    field,
    file_head,
    file_part,
    files_under,
    form,
    new_asset_id,
    object_path,
    upload,
)

pytestmark = pytest.mark.anyio
MIB = 1024 * 1024


def objects(blob_dir: Path) -> list[str]:
    return files_under(blob_dir / "objects")


async def post(
    api: httpx.AsyncClient, body: Any, asset_id: str | None = None, **headers: str
) -> httpx.Response:
    return await api.post(
        f"/internal/v1/uploads/{ORG}/{asset_id or new_asset_id()}",
        content=body,
        headers={"content-type": MULTIPART, **headers},
    )


async def test_upload_with_fields_before_and_after(api: httpx.AsyncClient, blob_dir: Path) -> None:
    asset_id = new_asset_id()
    data = b"\x00\r\n--not-the-boundary\r\n" * 1000
    body = form(
        field("name", "Quarterly report"),
        field("ignored", "anything"),
        file_part(data, filename="report.pdf", content_type="application/pdf"),
        field("folderId", "fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"),
    )
    response = await post(api, body, asset_id)
    assert response.status_code == 201, response.text
    key = f"{ORG}/{asset_id}/report.pdf"
    assert response.json() == {
        "key": key,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "mimeType": "application/pdf",
        "filename": "report.pdf",
        "fields": {
            "name": "Quarterly report",
            "folderId": "fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9",
            "visibility": None,
            "expiresAt": None,
            "metadata": None,
            "tags": None,
        },
        "visibility": "public",
        # Not a PDF, whatever it declares: what its bytes are is recorded beside.
        "detectedType": "application/octet-stream",
    }
    assert object_path(blob_dir, key).read_bytes() == data
    assert not [p for p in objects(blob_dir) if "%tmp." in p]


async def test_fields_are_optional_and_unknown_parts_ignored(api: httpx.AsyncClient) -> None:
    body = form(
        field("other", "x" * 100_000),
        file_part(b"abc", filename="a.txt", content_type=None),
        file_part(b"not a file field", filename="b.txt", name="attachment"),
        field("name", ""),
    )
    response = await post(api, body)
    assert response.status_code == 201, response.text
    result = response.json()
    assert result["fields"] == {
        **{"name": "", "folderId": None, "visibility": None},
        **{"expiresAt": None, "metadata": None, "tags": None},
    }
    assert (result["size"], result["mimeType"]) == (3, "text/plain")


async def test_small_chunks(api: httpx.AsyncClient, blob_dir: Path) -> None:
    data = bytes(range(256)) * 40
    body = form(field("name", "n"), file_part(data, filename="x.bin"))
    response = await post(api, agen(body[i : i + 7] for i in range(0, len(body), 7)))
    assert response.status_code == 201, response.text
    assert object_path(blob_dir, response.json()["key"]).read_bytes() == data


@pytest.mark.parametrize(
    ("filename", "stored"),
    [
        ("../../etc/passwd", "..-..-etc-passwd"),
        # A Windows path (old browsers sent one): its last part, as Starlette reads it.
        ("C:\\\\fakepath\\\\photo.png", "photo.png"),
        ("dir\\\\photo.png", "dir-photo.png"),
        ("100% ok?#.txt", "100- ok--.txt"),
        ("", "file"),
        (None, "file"),
        ("e\u0301te\u0301.txt", "été.txt"),
    ],
)
async def test_filenames_are_sanitised(api: httpx.AsyncClient, filename: str | None, stored: str) -> None:
    asset_id = new_asset_id()
    response = await upload(api, filename=filename, asset_id=asset_id)
    assert response.status_code == 201, response.text
    assert response.json()["key"] == f"{ORG}/{asset_id}/{stored}"


async def test_filename_is_reported_as_sent(api: httpx.AsyncClient) -> None:
    response = await upload(api, filename="a/b\\\\c.txt")
    assert response.json()["filename"] == "a/b\\c.txt"
    assert response.json()["key"].endswith("/a-b-c.txt")
    for missing in ("", None):
        response = await upload(api, filename=missing)
        assert response.json()["filename"] == "file"
        assert response.json()["key"].endswith("/file")


@pytest.mark.parametrize(
    ("declared", "filename", "expected"),
    [
        ("text/plain; charset=utf-8", "a.txt", "text/plain"),
        ("application/octet-stream", "photo.png", "image/png"),
        (None, "photo.png", "image/png"),
        (None, "blob", "application/octet-stream"),
        ("image/svg+xml", "x.bin", "image/svg+xml"),
    ],
)
async def test_mime_type(api: httpx.AsyncClient, declared: str | None, filename: str, expected: str) -> None:
    response = await upload(api, filename=filename, content_type=declared)
    assert response.json()["mimeType"] == expected


async def test_empty_file(api: httpx.AsyncClient, blob_dir: Path) -> None:
    response = await upload(api, b"")
    assert response.status_code == 201
    assert response.json()["size"] == 0
    assert response.json()["sha256"] == hashlib.sha256(b"").hexdigest()
    assert object_path(blob_dir, response.json()["key"]).read_bytes() == b""


async def test_missing_file_is_400(api: httpx.AsyncClient, blob_dir: Path) -> None:
    error = assert_error(await post(api, form(field("name", "x"))), 400, "invalid_request")
    assert error["details"] == {"field": "file"}
    assert objects(blob_dir) == []


async def test_two_files_are_400_and_store_nothing(api: httpx.AsyncClient, blob_dir: Path) -> None:
    body = form(file_part(b"one" * 1000, filename="a.txt"), file_part(b"two", filename="b.txt"))
    error = assert_error(await post(api, body), 400, "invalid_request")
    assert error["details"] == {"field": "file"}
    assert objects(blob_dir) == []


async def test_repeated_or_oversized_fields_are_400(api: httpx.AsyncClient, blob_dir: Path) -> None:
    body = form(field("name", "a"), field("name", "b"), file_part(b"x"))
    assert assert_error(await post(api, body), 400, "invalid_request")["details"] == {"field": "name"}
    body = form(file_part(b"x"), field("folderId", "f" * 20_000))
    assert assert_error(await post(api, body), 400, "invalid_request")["details"] == {"field": "folderId"}
    body = form(file_part(b"x"), field("name", b"\xff\xfe"))
    assert assert_error(await post(api, body), 400, "invalid_request")["details"] == {"field": "name"}
    assert objects(blob_dir) == []


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"garbage",
        END,
        file_head() + b"cut short inside the file",
        file_part(b"complete part, but no closing boundary"),
        file_part(b"data") + f"--{BOUNDARY}\r\n".encode(),
        form(file_part(b"x"))[:-4],  # "--boundary" without the final "--"
        file_part(b"data") + f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n'.encode(),
    ],
)
async def test_malformed_bodies_are_400_and_store_nothing(
    api: httpx.AsyncClient, blob_dir: Path, body: bytes
) -> None:
    assert_error(await post(api, body), 400, "invalid_request")
    assert objects(blob_dir) == []


@pytest.mark.parametrize(
    "content_type", ["application/json", "text/plain", "application/x-www-form-urlencoded", ""]
)
async def test_not_multipart_is_415(api: httpx.AsyncClient, content_type: str) -> None:
    response = await api.post(
        f"/internal/v1/uploads/{ORG}/{new_asset_id()}", content=b"{}", headers={"content-type": content_type}
    )
    assert_error(response, 415, "unsupported_media_type")


async def test_missing_boundary_is_400(api: httpx.AsyncClient) -> None:
    response = await post(api, form(file_part(b"x")), **{"content-type": "multipart/form-data"})
    assert assert_error(response, 400, "invalid_request")["details"] == {"field": "content-type"}


def _form_with(boundary: str) -> bytes:
    return form(file_part(b"x", filename="b.txt")).replace(BOUNDARY.encode(), boundary.encode())


@pytest.mark.parametrize("length", [71, 257])
async def test_a_boundary_longer_than_70_is_400(api: httpx.AsyncClient, blob_dir: Path, length: int) -> None:
    """RFC 2046 §5.1.1 bounds a boundary at 70 characters; 257 passed python-multipart's own
    bound (256), whose FormParserError was a 500."""
    boundary = "b" * length
    response = await post(
        api, _form_with(boundary), **{"content-type": f"multipart/form-data; boundary={boundary}"}
    )
    assert assert_error(response, 400, "invalid_request")["details"] == {"field": "content-type"}
    assert objects(blob_dir) == []
    at_the_bound = "b" * 70
    content_type = f"multipart/form-data; boundary={at_the_bound}"
    assert (await post(api, _form_with(at_the_bound), **{"content-type": content_type})).status_code == 201


def test_the_part_router_refuses_what_its_parser_cannot_take() -> None:
    with pytest.raises(ParseFailed):
        PartRouter(b"b" * 257, {}, Target())


@pytest.mark.parametrize("path", [f"{ORG}/fld_1", "usr_1/ast_1", f"{ORG}/ast_..", f"{ORG}/ast_a-b"])
async def test_bad_ids_are_400(api: httpx.AsyncClient, path: str) -> None:
    response = await api.post(
        f"/internal/v1/uploads/{path}", content=form(file_part(b"x")), headers={"content-type": MULTIPART}
    )
    assert_error(response, 400, "invalid_request")


async def test_internal_token_is_required(api: httpx.AsyncClient) -> None:
    for token in (None, "wrong"):
        headers = {"content-type": MULTIPART, "x-coffer-internal-token": token or ""}
        if token is None:
            api.headers.pop("x-coffer-internal-token")
        response = await api.post(
            f"/internal/v1/uploads/{ORG}/{new_asset_id()}", content=form(file_part(b"x")), headers=headers
        )
        assert_error(response, 401, "unauthorized")


def big_body(size: int, *, after: bytes = b"") -> Any:
    """A multipart body with a ``size``-byte file, generated 1 MiB at a time."""

    async def body() -> Any:
        yield field("name", "big")
        yield file_head(filename="big.bin")
        for chunk in pattern_chunks(size):
            yield chunk
        yield b"\r\n" + after + END

    return body()


async def test_exactly_max_file_bytes_is_accepted(api: httpx.AsyncClient, blob_dir: Path) -> None:
    expected = hashlib.sha256()
    for chunk in pattern_chunks(MAX_FILE_BYTES):
        expected.update(chunk)
    rss_before = rss_bytes(_pid())
    started = time.perf_counter()
    response = await post(api, big_body(MAX_FILE_BYTES))
    elapsed = time.perf_counter() - started
    assert response.status_code == 201, response.text
    assert response.json()["size"] == MAX_FILE_BYTES
    assert response.json()["sha256"] == expected.hexdigest()
    stored = object_path(blob_dir, response.json()["key"])
    assert stored.stat().st_size == MAX_FILE_BYTES
    with stored.open("rb") as fh:  # the bytes on disk, not only what blob hashed on the way
        assert hashlib.file_digest(fh, "sha256").hexdigest() == expected.hexdigest()
    # Streamed: the process did not grow by anything like the file's size.
    assert rss_bytes(_pid()) - rss_before < 32 * 1024 * 1024
    assert elapsed < 20


async def test_one_byte_more_is_413_and_stores_nothing(api: httpx.AsyncClient, blob_dir: Path) -> None:
    response = await post(api, big_body(MAX_FILE_BYTES + 1, after=field("folderId", "fld_1")))
    assert_error(response, 413, "file_too_large")
    assert objects(blob_dir) == []


async def test_writing_overlaps_receiving_within_a_bounded_queue(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the disk is slow the body keeps arriving, but at most a few batches ahead."""
    received = 0
    leads: list[int] = []
    real_write = fs_module._FsWriter.write_many

    def slow_write(self: Any, chunks: list[bytes]) -> None:
        leads.append(received - os.lseek(self._fh.fileno(), 0, os.SEEK_CUR) - sum(map(len, chunks)))
        time.sleep(0.02)
        real_write(self, chunks)

    async def body() -> Any:
        nonlocal received
        yield file_head(filename="big.bin")
        for chunk in pattern_chunks(12 * MIB):
            received += len(chunk)
            yield chunk
        yield b"\r\n" + END

    monkeypatch.setattr(fs_module._FsWriter, "write_many", slow_write)
    response = await post(api, body())
    assert response.status_code == 201, response.text
    assert response.json()["size"] == 12 * MIB
    # Bytes received but not yet written: more than the batch being written (receiving went
    # on meanwhile), never more than the queue, the batch being filled and the one written.
    assert max(leads) > uploads.WRITE_BATCH
    assert max(leads) <= (uploads.QUEUE_SLOTS + 2) * uploads.WRITE_BATCH


async def test_a_write_failure_mid_body_is_503_and_stores_nothing(
    api: httpx.AsyncClient, blob_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = fs_module._FsWriter.write_many

    def failing_write(self: Any, chunks: list[bytes]) -> None:
        if os.lseek(self._fh.fileno(), 0, os.SEEK_CUR) >= 3 * MIB:
            raise StorageUnavailable("disk full")
        real_write(self, chunks)

    monkeypatch.setattr(fs_module._FsWriter, "write_many", failing_write)
    response = await post(api, big_body(20 * MIB))
    assert_error(response, 503, "unavailable")
    assert objects(blob_dir) == []


async def test_storage_failure_is_503(api: httpx.AsyncClient, blob_dir: Path) -> None:
    blob_dir.mkdir(parents=True, exist_ok=True)
    (blob_dir / "objects").write_text("not a directory")
    response = await upload(api)
    assert_error(response, 503, "unavailable")
    assert response.headers["retry-after"]


async def test_client_disconnect_aborts_and_cleans_up(api: httpx.AsyncClient, blob_dir: Path) -> None:
    """The client goes away mid-file: the writer is aborted, nothing stays."""
    app = api.app  # type: ignore[attr-defined]
    asset_id = new_asset_id()
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": file_head(filename="cut.bin"), "more_body": True},
        *({"type": "http.request", "body": chunk, "more_body": True} for chunk in pattern_chunks(3 << 20)),
        {"type": "http.disconnect"},
    ]
    seen_temp = []

    async def receive() -> dict[str, Any]:
        if messages[0]["type"] == "http.disconnect":
            # The client goes away once bytes have reached storage (written by the writer task).
            for _ in range(500):
                if [p for p in objects(blob_dir) if "%tmp." in p]:
                    break
                await anyio.sleep(0.01)
        seen_temp.append(bool([p for p in objects(blob_dir) if "%tmp." in p]))
        return messages.pop(0)

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/internal/v1/uploads/{ORG}/{asset_id}",
        "raw_path": f"/internal/v1/uploads/{ORG}/{asset_id}".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", MULTIPART.encode()),
            (b"x-coffer-internal-token", api.headers["x-coffer-internal-token"].encode()),
        ],
        "client": ("127.0.0.1", 1234),
        "server": ("127.0.0.1", 8083),
        "state": {},
    }
    await app(scope, receive, send)
    assert sent[0]["status"] == 400
    assert any(seen_temp)  # bytes were on their way to storage...
    assert objects(blob_dir) == []  # ...and nothing is left


def _pid() -> int:
    import os

    return os.getpid()


# Issue 11: hostile multipart bodies get a 4xx (never a 5xx) and store nothing.
@pytest.mark.parametrize(
    "head",
    [
        b'Content-Disposition: form-data; name="file"; filename="caf\xe9.txt"\r\n',  # Latin-1 name
        b'Content-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/\xe9\r\n',
    ],
)
async def test_part_headers_that_are_not_utf8_are_400(
    api: httpx.AsyncClient, blob_dir: Path, head: bytes
) -> None:
    body = b"--" + BOUNDARY.encode() + b"\r\n" + head + b"\r\nx\r\n" + END
    error = assert_error(await post(api, body), 400, "invalid_request")
    assert "UTF-8" in error["message"]
    assert objects(blob_dir) == []


@pytest.mark.parametrize("chunk", [1, 7, 65536])
async def test_a_preamble_before_the_first_boundary_is_ignored(
    api: httpx.AsyncClient, blob_dir: Path, chunk: int
) -> None:
    # RFC 2046 §5.1.1: text before the first boundary is a preamble, to be ignored.
    body = b"This is a preamble.\r\n--not-the-boundary\r\n" + file_part(b"hello", filename="a.txt") + END
    asset_id = new_asset_id()
    chunks = (body[i : i + chunk] for i in range(0, len(body), chunk))
    response = await post(api, agen(chunks), asset_id)
    assert response.status_code == 201, response.text
    assert response.json()["size"] == 5
    assert object_path(blob_dir, f"{ORG}/{asset_id}/a.txt").read_bytes() == b"hello"


async def test_an_endless_preamble_is_400(api: httpx.AsyncClient, blob_dir: Path) -> None:
    body = b"x" * (uploads.MAX_PREAMBLE_BYTES + 1024) + file_part(b"hello", filename="a.txt") + END
    assert_error(await post(api, body), 400, "invalid_request")
    assert objects(blob_dir) == []


@pytest.mark.parametrize(
    ("content_type", "boundary"),
    [
        (MULTIPART, BOUNDARY),
        (f'multipart/form-data; boundary="{BOUNDARY}"', BOUNDARY),
        (f"Multipart/Form-Data;boundary={BOUNDARY};charset=utf-8", BOUNDARY),
        ('multipart/form-data; charset="utf-8"; boundary="a b:c"', "a b:c"),
        ("multipart/form-data; boundary=x ", "x"),
    ],
)
def test_the_boundary_is_read_as_rfc_2046_writes_it(content_type: str, boundary: str) -> None:
    assert parse_boundary(content_type) == boundary.encode()


@pytest.mark.parametrize(
    "content_type",
    [
        "multipart/form-data",
        "multipart/form-data; boundary=",
        "multipart/mixed; boundary=x",
        "",
        # RFC 2046 §5.1.1: 1 to 70 characters.
        "multipart/form-data; boundary=" + "b" * 71,
        'multipart/form-data; boundary="' + "b" * 257 + '"',
    ],
)
def test_no_boundary_no_parse(content_type: str) -> None:
    with pytest.raises(ParseFailed):
        parse_boundary(content_type)


def _heads_of(body: bytes, size: int) -> int:
    """The parts _PartHeads counts in ``body`` fed in pieces of ``size`` bytes."""
    heads = uploads._PartHeads(BOUNDARY.encode())
    # The parser gets the body from its first boundary on, as _Preamble hands it over.
    for at in range(0, len(body), size):
        heads.feed(body[at : at + size])
    return heads.parts


@pytest.mark.parametrize("size", [1, 2, 3, 7, 31, 4096])
def test_part_heads_are_found_whatever_the_pieces(size: int) -> None:
    tricky = file_part(b"\r\n\r\n--not-the-boundary\r\n")
    body = form(field("name", "n"), tricky, field("x", "")) + b"epilogue"
    assert _heads_of(body, size) == 3


@pytest.mark.parametrize("size", [1, 1000, 1 << 20])
def test_a_part_head_longer_than_the_bound_is_refused_as_it_arrives(size: int) -> None:
    at_bound = file_head(filename="a" * (uploads.MAX_PART_HEAD_BYTES - len(file_head(filename=""))))
    assert len(at_bound) - len(f"--{BOUNDARY}\r\n") - 4 <= uploads.MAX_PART_HEAD_BYTES
    assert _heads_of(form(at_bound + b"x\r\n"), size) == 1
    endless = file_head(filename="a" * (4 * uploads.MAX_PART_HEAD_BYTES))
    with pytest.raises(CofferError, match="header is longer than 16384 bytes"):
        _heads_of(endless, size)


def test_more_parts_than_the_bound_are_refused() -> None:
    assert _heads_of(form(*[field(f"f{i}", "") for i in range(uploads.MAX_PARTS)]), 100) == uploads.MAX_PARTS
    with pytest.raises(CofferError, match="more than 64 parts"):
        _heads_of(form(*[field(f"f{i}", "") for i in range(uploads.MAX_PARTS + 1)]), 100)


async def test_a_100_mib_part_header_is_refused_early_in_bounded_memory(
    api: httpx.AsyncClient, blob_dir: Path
) -> None:
    """Issue 23: the parser buffered a 100 MiB header whole (200 MiB, 12-51 s of CPU)."""
    sent = 0

    async def bomb() -> AsyncIterator[bytes]:
        nonlocal sent
        yield f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="'.encode()
        for _ in range(100):
            sent += MIB
            yield b"a" * MIB
        yield b'"\r\n\r\nx\r\n' + END

    started = time.monotonic()
    error = assert_error(await post(api, bomb()), 400, "invalid_request")
    assert "header is longer than 16384 bytes" in error["message"]
    assert time.monotonic() - started < 10
    assert objects(blob_dir) == []


GIF = (  # a 1x1 GIF
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,"
    b"\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)


async def test_the_detected_type_is_read_from_the_first_bytes(api: httpx.AsyncClient) -> None:
    response = await post(api, form(file_part(GIF, filename="photo.jpg", content_type="image/jpeg")))
    assert response.status_code == 201, response.text
    assert (response.json()["mimeType"], response.json()["detectedType"]) == ("image/jpeg", "image/gif")
    html = b"\n  <!doctype html><html><script>alert(1)</script></html>"
    response = await post(api, form(file_part(html, filename="a.png", content_type="image/png")))
    assert (response.json()["mimeType"], response.json()["detectedType"]) == ("image/png", "text/html")


async def test_a_type_outside_the_allowed_lists_is_refused_before_a_byte_is_stored(
    api: httpx.AsyncClient, blob_dir: Path
) -> None:
    # A small file (written in one trip) and one of several batches (the writer task's first).
    for data in (GIF, GIF + b"\x00" * (3 * 1024 * 1024)):
        response = await api.post(
            f"/internal/v1/uploads/{ORG}/{new_asset_id()}",
            params=[("allow", "image/*"), ("allow", "image/jpeg,image/png")],
            content=form(file_part(data, filename="photo.jpg", content_type="image/jpeg")),
            headers={"content-type": MULTIPART},
        )
        assert_error(response, 415, "unsupported_media_type")
        assert response.json()["error"]["details"] == {"declared": "image/jpeg", "detected": "image/gif"}
        assert objects(blob_dir) == []
    allowed = await api.post(
        f"/internal/v1/uploads/{ORG}/{new_asset_id()}",
        params=[("allow", "image/*"), ("allow", "image/gif")],
        content=form(file_part(GIF, filename="photo.jpg", content_type="image/jpeg")),
        headers={"content-type": MULTIPART},
    )
    assert allowed.status_code == 201, allowed.text
    bad = await api.post(
        f"/internal/v1/uploads/{ORG}/{new_asset_id()}",
        params={"allow": "image/<script>"},
        content=form(file_part(GIF, filename="photo.jpg")),
        headers={"content-type": MULTIPART},
    )
    assert_error(bad, 400, "invalid_request")


async def test_a_wildcard_never_lets_active_content_in(api: httpx.AsyncClient, blob_dir: Path) -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'

    async def post_with(allow: str) -> httpx.Response:
        return await api.post(
            f"/internal/v1/uploads/{ORG}/{new_asset_id()}",
            params={"allow": allow},
            content=form(file_part(svg, filename="logo.svg", content_type="image/svg+xml")),
            headers={"content-type": MULTIPART},
        )

    for wildcard in ("image/*", "*", "*/*"):
        error = assert_error(await post_with(wildcard), 415, "unsupported_media_type")
        assert error["details"] == {"declared": "image/svg+xml", "detected": "image/svg+xml"}
    assert objects(blob_dir) == []
    named = await post_with("image/png,image/svg+xml")
    assert named.status_code == 201 and named.json()["detectedType"] == "image/svg+xml"
