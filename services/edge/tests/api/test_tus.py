"""Resumable uploads (tus 1.0.0, CONTRACT §9) through edge, in process on both databases: tuspy
(a tus client no one here wrote) uploads in odd chunks, stops, and a fresh client resumes from
HEAD; every error of §9 with the contract's envelope; the races; termination freeing the
reservation. (Real processes, the S3 driver, tus-js-client and killed servers: tests/e2e.)"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from tusclient import client as tus

from coffer_harness.api import Tenant, used_bytes
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_testkit.testing import assert_error

MIB = 1024 * 1024
TUS = {"Tus-Resumable": "1.0.0"}
DATA = os.urandom(20 * MIB + 4321)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def meta(**pairs: str) -> str:
    return ",".join(f"{k} {b64(v)}" for k, v in pairs.items())


def create(api: httpx.Client, length: int, metadata: str | None = None, **headers: str) -> httpx.Response:
    sent = {
        **TUS,
        "Upload-Length": str(length),
        "Upload-Metadata": metadata or meta(filename="f.bin"),
        **headers,
    }
    return api.post("/api/uploads/tus", headers=sent)


def path_of(location: str) -> str:
    parts = urlsplit(location)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def patch(api: httpx.Client, url: str, data: bytes, offset: int, **headers: str) -> httpx.Response:
    sent = {**TUS, "Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream", **headers}
    return api.patch(path_of(url), content=data, headers=sent)


def head(api: httpx.Client, url: str) -> httpx.Response:
    return api.head(path_of(url), headers=TUS)


def sha256_header(data: bytes) -> str:
    return "sha256 " + base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_tuspy_uploads_in_odd_chunks_stops_and_a_new_client_resumes(stack: Any, tenant: Tenant) -> None:
    source = DATA
    client = tus.TusClient(f"{stack.edge_url}/api/uploads/tus", headers={"x-api-key": tenant.key})
    uploader = client.uploader(
        file_stream=_stream(source),
        chunk_size=3 * MIB + 17,
        metadata={"filename": "journey.mp4", "filetype": "video/mp4"},
        upload_checksum=True,
    )
    uploader.upload(stop_at=9 * MIB)  # interrupted after three chunks
    assert uploader.url is not None and uploader.url.startswith(f"{stack.edge_url}/api/uploads/tus/tus_")
    stopped = int(head(tenant.api, uploader.url).headers["upload-offset"])
    assert stopped == 9 * MIB  # (tuspy cuts the third chunk short to stop there)

    fresh = tus.TusClient(f"{stack.edge_url}/api/uploads/tus", headers={"x-api-key": tenant.key})
    resumed = fresh.uploader(file_stream=_stream(source), url=uploader.url, chunk_size=5 * MIB + 3)
    assert resumed.offset == stopped  # from HEAD
    resumed.upload()

    answer = head(tenant.api, uploader.url)
    assert answer.status_code == 200
    assert int(answer.headers["upload-offset"]) == int(answer.headers["upload-length"]) == len(source)
    asset = tenant.api.get(f"/api/assets/{answer.headers['coffer-asset-id']}").json()
    assert (
        asset["name"] == "journey.mp4" and asset["mimeType"] == "video/mp4" and asset["size"] == len(source)
    )
    assert asset["sha256"] == hashlib.sha256(source).hexdigest()
    assert httpx.get(asset["publicUrl"]).content == source
    assert used_bytes(tenant.api) == len(source)


def _stream(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)


@pytest.mark.parametrize(
    ("name", "declared"),
    [
        ("ré%sumé?#1.tar.gz", None),  # unsafe characters; the type guessed from a compressed name
        ("Photo.JPG", "image/jpeg; charset=x"),  # parameters dropped
        ("notes", "application/octet-stream"),  # octet-stream counts as absent: nothing to guess
        ("page.html", "Not A Type"),  # a malformed declared type counts as absent
        ("é" * 200 + ".txt", None),  # 204 characters, 404 bytes: capped at 255, the extension kept
    ],
)
def test_a_resumable_file_is_named_and_typed_as_a_multipart_one(
    tenant: Tenant, name: str, declared: str | None
) -> None:
    """edge names a resumable upload's key and type at its creation by the rules blob names a
    multipart upload's by (coffer_kit.contract.keys): the same file gets the same both ways."""
    api = tenant.api
    part = api.post("/api/assets", files={"file": (name, b"x", declared or "application/octet-stream")})
    assert part.status_code == 201, part.text
    pairs = {"filename": name} | ({"filetype": declared} if declared else {})
    created = create(api, 1, meta(**pairs))
    assert created.status_code == 201, created.text
    done = patch(api, created.headers["location"], b"x", 0)
    assert done.status_code == 204, done.text
    resumable = api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    for asset in (part.json(), resumable):
        assert asset["key"].startswith(f"{asset['organizationId']}/{asset['id']}/")
    assert resumable["key"].rsplit("/", 1)[1] == part.json()["key"].rsplit("/", 1)[1]
    assert resumable["mimeType"] == part.json()["mimeType"]


def test_options_answers_what_the_server_speaks(anon: httpx.Client) -> None:
    for url in ("/api/uploads/tus", "/api/uploads/tus/tus_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"):
        answer = anon.options(
            url, headers={"Origin": "https://app.example", "Access-Control-Request-Method": "PATCH"}
        )
        assert answer.status_code == 204
        assert answer.headers["tus-version"] == "1.0.0"
        assert answer.headers["tus-max-size"] == "104857600"
        assert answer.headers["tus-checksum-algorithm"] == "sha1,sha256"
        assert set(answer.headers["tus-extension"].split(",")) == {
            "creation",
            "creation-with-upload",
            "termination",
            "expiration",
            "checksum",
        }
        assert "PATCH" in answer.headers["access-control-allow-methods"]
        assert "upload-offset" in answer.headers["access-control-allow-headers"]


def test_creation_answers_location_on_the_base_url_and_holds_the_length(stack: Any, new_tenant: Any) -> None:
    tenant = new_tenant(quota_bytes=10 * MIB)
    created = create(tenant.api, 6 * MIB)
    assert created.status_code == 201, created.text
    assert created.headers["tus-resumable"] == "1.0.0"
    assert created.headers["location"].startswith(f"{stack.edge_url}/api/uploads/tus/tus_")
    assert "upload-expires" in created.headers
    assert "coffer-asset-id" in created.headers["access-control-expose-headers"]
    # The Host header never makes the Location.
    spoofed = create(tenant.api, 1, Host="evil.example")
    assert spoofed.headers["location"].startswith(stack.edge_url)
    # 6 MiB held: 5 MiB more do not fit; termination gives them back.
    assert_error(create(tenant.api, 5 * MIB), 413, "quota_exceeded")
    assert tenant.api.delete(path_of(created.headers["location"]), headers=TUS).status_code == 204
    assert create(tenant.api, 5 * MIB).status_code == 201


def test_every_error_has_its_status_and_the_envelope(
    tenant: Tenant, new_tenant: Any, anon: httpx.Client
) -> None:
    api = tenant.api
    # No key, a wrong version, no length, a deferred length, too large.
    assert_error(create(anon, 10), 401, "unauthorized")
    missing_version = api.post(
        "/api/uploads/tus", headers={"Upload-Length": "1", "Upload-Metadata": meta(filename="a")}
    )
    assert_error(missing_version, 412, "unsupported_version")
    assert missing_version.headers["tus-version"] == "1.0.0"
    no_length = api.post("/api/uploads/tus", headers={**TUS, "Upload-Metadata": meta(filename="a")})
    assert_error(no_length, 400, "invalid_request")
    assert_error(create(api, 1, **{"Upload-Defer-Length": "1"}), 400, "invalid_request")
    assert_error(create(api, 100 * MIB + 1), 413, "file_too_large")
    # Bad metadata: no filename, not base64, a name the rules refuse; folders checked.
    assert_error(create(api, 1, meta(filetype="text/plain")), 400, "invalid_request")
    assert_error(create(api, 1, "filename !!!"), 400, "invalid_request")
    assert_error(create(api, 1, meta(filename="a/b")), 400, "invalid_request")
    assert_error(create(api, 1, meta(filename="a", visibility="secret")), 400, "invalid_request")
    assert_error(
        create(api, 1, meta(filename="a", folderId="fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9")), 404, "not_found"
    )
    other = new_tenant("Other")
    folder = other.api.post("/api/folders", json={"name": "theirs"}).json()
    assert_error(create(api, 1, meta(filename="a", folderId=folder["id"])), 403, "forbidden")
    assert used_bytes(api) == 0

    url = create(api, 10).headers["location"]
    # A wrong offset, a chunk that is not an offset stream, a checksum that does not match.
    wrong = assert_error(patch(api, url, b"abc", 5), 409, "offset_mismatch")
    assert wrong["details"] == {"offset": 0}
    assert_error(
        api.patch(path_of(url), content=b"abc", headers={**TUS, "Upload-Offset": "0"}),
        415,
        "unsupported_media_type",
    )
    mismatch = patch(api, url, b"abc", 0, **{"Upload-Checksum": sha256_header(b"xyz")})
    assert_error(mismatch, 460, "checksum_mismatch")
    assert mismatch.headers["tus-resumable"] == "1.0.0"
    assert head(api, url).headers["upload-offset"] == "0"
    assert_error(patch(api, url, b"abc", 0, **{"Upload-Checksum": "md5 AAAA"}), 400, "invalid_request")
    assert_error(patch(api, url, b"x" * 11, 0), 413, "file_too_large")
    # Another organization sees nothing: 404 everywhere.
    assert head(other.api, url).status_code == 404
    assert_error(patch(other.api, url, b"abc", 0), 404, "not_found")
    assert_error(other.api.delete(path_of(url), headers=TUS), 404, "not_found")
    # A right chunk with its checksum moves the offset.
    right = patch(api, url, b"abcde", 0, **{"Upload-Checksum": sha256_header(b"abcde")})
    assert right.status_code == 204 and right.headers["upload-offset"] == "5"
    done = patch(api, url, b"fghij", 5)
    assert done.status_code == 204 and done.headers["upload-offset"] == "10"
    asset = api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    assert asset["sha256"] == hashlib.sha256(b"abcdefghij").hexdigest() and asset["name"] == "f.bin"


def test_length_and_offset_in_other_digits_are_400(tenant: Tenant) -> None:
    """ "²".isdigit() holds and int("²") raises: such a header (latin-1 on the wire) was a 500."""
    api = tenant.api
    superscript = "²".encode("latin-1")
    creation = {**TUS, "Upload-Length": superscript, "Upload-Metadata": meta(filename="a")}
    assert_error(api.post("/api/uploads/tus", headers=creation), 400, "invalid_request")
    url = create(api, 10).headers["location"]
    chunk = {**TUS, "Upload-Offset": superscript, "Content-Type": "application/offset+octet-stream"}
    assert_error(api.patch(path_of(url), content=b"abc", headers=chunk), 400, "invalid_request")


def test_the_document_states_the_header_rules(tenant: Tenant) -> None:
    """What the routes enforce of tus headers is in the OpenAPI document (schemathesis reads it)."""
    paths = tenant.api.get("/api/openapi.json").json()["paths"]
    creation = {p["name"]: p for p in paths["/api/uploads/tus"]["post"]["parameters"]}
    assert creation["Tus-Resumable"]["required"] and creation["Tus-Resumable"]["schema"]["enum"] == ["1.0.0"]
    assert creation["Upload-Length"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 100 * MIB}
    assert creation["Upload-Metadata"]["required"]
    chunk = paths["/api/uploads/tus/{upload_id}"]["patch"]
    assert list(chunk["requestBody"]["content"]) == ["application/offset+octet-stream"]
    pattern = re.compile({p["name"]: p for p in chunk["parameters"]}["Upload-Checksum"]["schema"]["pattern"])
    assert pattern.fullmatch(sha256_header(b"abc")) and pattern.fullmatch("sha1 " + "A" * 27 + "=")
    assert not pattern.fullmatch("md5 AAAA") and not pattern.fullmatch("sha256 " + "A" * 44)


def test_an_upload_token_is_spent_at_creation_and_the_location_carries_a_capability(
    tenant: Tenant, anon: httpx.Client
) -> None:
    folder = tenant.api.post("/api/folders", json={"name": "inbox"}).json()
    token = tenant.api.post("/api/upload-tokens", json={"folderId": folder["id"], "maxBytes": 1000}).json()
    too_large = anon.post(
        f"/api/uploads/tus?token={token['token']}",
        headers={**TUS, "Upload-Length": "1001", "Upload-Metadata": meta(filename="a.txt")},
    )
    assert_error(too_large, 413, "file_too_large")
    created = anon.post(
        f"/api/uploads/tus?token={token['token']}",
        headers={**TUS, "Upload-Length": "10", "Upload-Metadata": meta(filename="from-browser.txt")},
    )
    assert created.status_code == 201, created.text
    url = created.headers["location"]
    assert "?token=cof_tus_" in url
    # Spent: a second creation with it is refused.
    again = anon.post(
        f"/api/uploads/tus?token={token['token']}",
        headers={**TUS, "Upload-Length": "10", "Upload-Metadata": meta(filename="b.txt")},
    )
    assert_error(again, 401, "unauthorized")
    # Without the capability, or with another upload's: refused.
    bare = url.split("?")[0]
    assert_error(patch(anon, bare, b"0123456789", 0), 401, "unauthorized")
    other_url = create(tenant.api, 10).headers["location"]
    forged = other_url + "?token=" + url.split("token=")[1]
    assert_error(patch(anon, forged, b"0123456789", 0), 401, "unauthorized")
    # With it, no key needed.
    assert head(anon, url).headers["upload-offset"] == "0"
    done = patch(anon, url, b"0123456789", 0)
    assert done.status_code == 204, done.text
    asset = tenant.api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    assert asset["folderId"] == folder["id"] and asset["name"] == "from-browser.txt"
    assert done.headers["access-control-allow-origin"] == "*"


def test_a_creation_whose_bytes_fail_leaves_no_upload_behind(tenant: Tenant, anon: httpx.Client) -> None:
    """creation-with-upload refused for its body: the client has no Location to resume with,
    so nothing stays open holding a reservation, and an upload token is good for another try."""
    body = {"Content-Type": "application/offset+octet-stream"}
    longer = tenant.api.post(
        "/api/uploads/tus",
        content=b"abcdef",
        headers={**TUS, **body, "Upload-Length": "2", "Upload-Metadata": meta(filename="a.bin")},
    )
    assert_error(longer, 413, "file_too_large")
    wrong = sha256_header(b"something else")
    token = tenant.api.post("/api/upload-tokens", json={}).json()["token"]
    for url in ("/api/uploads/tus", f"/api/uploads/tus?token={token}"):
        caller = tenant.api if "token" not in url else anon
        checked = {"Upload-Length": "3", "Upload-Metadata": meta(filename="b.bin"), "Upload-Checksum": wrong}
        refused = caller.post(url, content=b"abc", headers={**TUS, **body, **checked})
        assert_error(refused, 460, "checksum_mismatch")
    assert tenant.api.get("/api/uploads").json()["uploads"] == []
    retried = anon.post(
        f"/api/uploads/tus?token={token}",
        content=b"abc",
        headers={**TUS, **body, "Upload-Length": "3", "Upload-Metadata": meta(filename="b.bin")},
    )
    assert retried.status_code == 201 and retried.headers["upload-offset"] == "3", retried.text


def test_a_creation_whose_client_goes_away_leaves_no_upload_behind(
    tenant: Tenant, anon: httpx.Client
) -> None:
    """creation-with-upload whose connection drops mid-body: the client never got a Location,
    so the upload ends (its reservation free) and the upload token is good for another try."""
    token = tenant.api.post("/api/upload-tokens", json={}).json()["token"]
    edge = urlsplit(str(anon.base_url))
    request = (
        f"POST /api/uploads/tus?token={token} HTTP/1.1\r\nHost: {edge.netloc}\r\n"
        f"Tus-Resumable: 1.0.0\r\nUpload-Length: 5000\r\n"
        f"Upload-Metadata: {meta(filename='gone.bin')}\r\n"
        "Content-Type: application/offset+octet-stream\r\nContent-Length: 5000\r\n\r\n"
    ).encode()
    with socket.create_connection((edge.hostname, edge.port or 80), timeout=10) as conn:
        conn.sendall(request + b"x" * 1000)
        deadline = time.monotonic() + 10
        while not tenant.api.get("/api/uploads").json()["uploads"]:  # polled: the edge is writing
            assert time.monotonic() < deadline
            time.sleep(0.01)
    headers = {**TUS, "Upload-Length": "3", "Upload-Metadata": meta(filename="b.bin")}
    body = {"Content-Type": "application/offset+octet-stream"}
    deadline = time.monotonic() + 15
    url = f"/api/uploads/tus?token={token}"
    while (retried := anon.post(url, content=b"abc", headers={**headers, **body})).status_code != 201:
        assert retried.status_code == 401 and time.monotonic() < deadline, retried.text  # polled
        time.sleep(0.05)
    assert retried.headers["upload-offset"] == "3"
    assert tenant.api.get("/api/uploads").json()["uploads"] == []


def test_eight_racing_patches_at_one_offset_store_the_chunk_once(tenant: Tenant) -> None:
    chunk = os.urandom(2 * MIB)
    url = create(tenant.api, len(chunk) + 3).headers["location"]
    answers = _at_once(8, lambda: patch(tenant.api, url, chunk, 0))
    statuses = sorted(a.status_code for a in answers)
    assert statuses.count(204) == 1, statuses
    for answer in answers:
        if answer.status_code != 204:
            assert answer.status_code in (409, 423)
            assert_error(
                answer, answer.status_code, "offset_mismatch" if answer.status_code == 409 else "locked"
            )
    assert head(tenant.api, url).headers["upload-offset"] == str(len(chunk))
    done = patch(tenant.api, url, b"end", len(chunk))
    asset = tenant.api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    assert asset["sha256"] == hashlib.sha256(chunk + b"end").hexdigest()


def test_forty_racing_creations_never_exceed_the_quota(new_tenant: Any) -> None:
    tenant = new_tenant(quota_bytes=10 * MIB)
    assert create(tenant.api, 7 * MIB).status_code == 201
    answers = _at_once(40, lambda: create(tenant.api, MIB))
    assert sorted(a.status_code for a in answers) == [201] * 3 + [413] * 37


def test_termination_frees_the_bytes_and_the_reservation(stack: Any, new_tenant: Any) -> None:
    tenant = new_tenant(quota_bytes=10 * MIB)
    url = create(tenant.api, 8 * MIB).headers["location"]
    assert patch(tenant.api, url, os.urandom(3 * MIB), 0).status_code == 204
    upload_id = urlsplit(url).path.rsplit("/", 1)[1]
    assert len(list(stack.data_dir.rglob(f"*tus.{upload_id}"))) == 1
    assert tenant.api.delete(path_of(url), headers=TUS).status_code == 204
    assert head(tenant.api, url).status_code == 404
    assert tenant.api.get("/api/usage").json()["usedBytes"] == 0
    assert stack.metadata_scalar("SELECT count(*) FROM upload_intents") == 0
    assert stack.metadata_scalar("SELECT count(*) FROM tus_uploads") == 0
    upload_id = urlsplit(url).path.rsplit("/", 1)[1]
    assert list(stack.data_dir.rglob(f"*tus.{upload_id}")) == []  # the part file
    assert create(tenant.api, 10 * MIB).status_code == 201


def _at_once(n: int, call: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """``call`` from ``n`` threads released together."""
    barrier = threading.Barrier(n)
    answers: list[httpx.Response] = []

    def run() -> None:
        barrier.wait()
        answers.append(call())

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def _held(stack: Any, upload_id: str) -> Any:
    """A transaction holding the upload's row (PostgreSQL) or the write lock (SQLite): metadata
    cannot record a chunk until it ends; reads go on."""
    engine = stack.metadata_engine
    connection = engine.connect()
    if engine.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        connection.begin()
        connection.exec_driver_sql(f"SELECT 1 FROM tus_uploads WHERE id = '{upload_id}' FOR UPDATE")
    return connection


def test_head_never_answers_behind_a_chunk_it_acknowledged(stack: Any, tenant: Tenant) -> None:
    # A chunk is answered before metadata has its record (written while the next one streams);
    # a client that drops the next chunk and asks HEAD at once must still get the first's end.
    first, second = os.urandom(2 * MIB), os.urandom(24 * MIB)
    url = create(tenant.api, len(first) + len(second) + 1).headers["location"]
    upload_id = path_of(url).rsplit("/", 1)[1].split("?")[0]
    go_on, streaming, finish = threading.Event(), threading.Event(), threading.Event()

    def body(data: bytes, paused: threading.Event, pause_at: int, reached: threading.Event | None) -> Any:
        yield data[:pause_at]
        if reached is not None:
            reached.set()  # (past what socket buffers hold: the edge is reading this chunk)
        assert paused.wait(30)
        yield data[pause_at:]

    answers: dict[str, httpx.Response] = {}

    def send(
        name: str, data: bytes, paused: threading.Event, pause_at: int, reached: Any, offset: int
    ) -> None:
        headers = {
            **TUS,
            "Upload-Offset": str(offset),
            "Content-Type": "application/offset+octet-stream",
            "Content-Length": str(len(data)),  # (chunked: edge would wait for the record first)
        }
        content = body(data, paused, pause_at, reached)
        answers[name] = tenant.api.patch(path_of(url), content=content, headers=headers)

    one = threading.Thread(target=send, args=("first", first, go_on, MIB, None, 0))
    one.start()
    sql = f"SELECT lock_token FROM tus_uploads WHERE id = '{upload_id}'"
    deadline = time.monotonic() + 30
    while stack.metadata_scalar(sql) is None:  # polled: the first chunk's lease
        assert time.monotonic() < deadline
        time.sleep(0.01)
    held = _held(stack, upload_id)
    try:
        go_on.set()
        one.join(30)
        assert answers["first"].status_code == 204
        assert answers["first"].headers["upload-offset"] == str(len(first))  # its record waits
        two = threading.Thread(target=send, args=("second", second, finish, 20 * MIB, streaming, len(first)))
        two.start()
        assert streaming.wait(30)
        heads: list[httpx.Response] = []
        asking = threading.Thread(target=lambda: heads.append(head(tenant.api, url)))
        asking.start()
        asking.join(1.0)  # an answer now (before the record) must not be behind
        if heads:
            assert int(heads[0].headers["upload-offset"]) >= len(first)
    finally:
        held.rollback()
        held.close()
    asking.join(30)
    assert int(heads[0].headers["upload-offset"]) >= len(first)
    finish.set()
    two.join(30)
    assert answers["second"].status_code == 204, answers["second"].text
    done = patch(tenant.api, url, b"!", len(first) + len(second))
    asset = tenant.api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    assert asset["sha256"] == hashlib.sha256(first + second + b"!").hexdigest()


def _capability_upload(anon: httpx.Client, api: httpx.Client, length: int) -> str:
    """An upload created with an upload token minted through ``api``: its capability URL."""
    token = api.post("/api/upload-tokens", json={}).json()["token"]
    created = anon.post(
        f"/api/uploads/tus?token={token}",
        headers={**TUS, "Upload-Length": str(length), "Upload-Metadata": meta(filename="half.bin")},
    )
    assert created.status_code == 201, created.text
    return created.headers["location"]  # type: ignore[no-any-return]


def _until(check: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.1)


def test_a_capability_dies_with_the_key_that_minted_its_token(
    stack: Any, new_tenant: Any, anon: httpx.Client, admin: Any
) -> None:
    """Issue 44: the capability of an upload created with a token minted by key K stops
    working once K is deleted (within the auth cache's bound), and the upload is terminated:
    its bytes and its reservation released."""
    tenant = new_tenant(quota_bytes=10 * MIB)
    minter = admin("create-key", "--org", tenant.org_id, "--name", "minter")
    with httpx.Client(base_url=stack.edge_url, headers={"x-api-key": minter["key"]}, timeout=60) as api:
        url = _capability_upload(anon, api, 8 * MIB)
    half = os.urandom(4 * MIB)
    assert patch(anon, url, half, 0).status_code == 204
    assert_error(create(tenant.api, 3 * MIB), 413, "quota_exceeded")  # 8 MiB held
    admin("delete-key", minter["id"])
    statuses: list[int] = []
    _until(lambda: statuses.append(head(anon, url).status_code) or statuses[-1] != 200)
    assert statuses[-1] == 401
    assert head(anon, url).status_code == 404  # terminated by the request that met the dead minter
    assert_error(patch(anon, url, half, 4 * MIB), 404, "not_found")
    assert head(tenant.api, url.split("?")[0]).status_code == 404
    assert stack.metadata_scalar("SELECT count(*) FROM tus_uploads") == 0
    assert tenant.api.get("/api/assets").json()["total"] == 0
    assert create(tenant.api, 10 * MIB).status_code == 201  # the reservation is free again


def test_a_member_removed_takes_the_capabilities_of_their_key_along(
    stack: Any, new_tenant: Any, anon: httpx.Client, admin: Any
) -> None:
    tenant = new_tenant()
    user = admin(
        "create-user",
        "--email",
        f"u{os.urandom(4).hex()}@example.com",
        "--password",
        "pw-" + secrets.token_urlsafe(16),  # never "-…", which argparse takes for an option
    )
    admin("add-member", "--org", tenant.org_id, "--user", user["id"])
    key = admin("create-key", "--org", tenant.org_id, "--user", user["id"])
    headers = {"x-api-key": key["key"], "x-organization-id": tenant.org_id}
    with httpx.Client(base_url=stack.edge_url, headers=headers, timeout=60) as api:
        url = _capability_upload(anon, api, 100)
    assert patch(anon, url, b"x" * 50, 0).status_code == 204
    admin("remove-member", "--org", tenant.org_id, "--user", user["id"])
    _until(lambda: head(anon, url).status_code != 200)
    assert_error(patch(anon, url, b"x" * 50, 50), 404, "not_found")
    assert stack.metadata_scalar("SELECT count(*) FROM tus_uploads") == 0


def test_unknown_upload_ids_are_404(tenant: Tenant) -> None:
    for path in (
        "/api/uploads/tus/doesnotexist",
        "/api/uploads/tus/tus_" + "0" * 26,
        "/api/uploads/tus/" + "x" * 300,
    ):
        assert tenant.api.head(path, headers=TUS).status_code == 404  # (HEAD: no body)
        assert_error(
            tenant.api.patch(
                path, headers={**TUS, "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}
            ),
            404,
            "not_found",
        )
        assert_error(tenant.api.delete(path, headers=TUS), 404, "not_found")


def test_an_organization_lists_and_ends_its_open_uploads(new_tenant: Any, anon: httpx.Client) -> None:
    tenant, other = new_tenant(quota_bytes=10 * MIB), new_tenant()
    first = create(tenant.api, 4 * MIB).headers["location"]
    assert patch(tenant.api, first, b"x" * 1000, 0).status_code == 204
    second = _capability_upload(anon, tenant.api, 5 * MIB)
    listed = tenant.api.get("/api/uploads")
    assert listed.status_code == 200, listed.text
    page = listed.json()
    assert page["total"] == 2 and page["limit"] == 50 and page["offset"] == 0
    newest, oldest = page["uploads"]
    assert newest["id"] == urlsplit(second).path.rsplit("/", 1)[1] and newest["viaToken"] is True
    assert oldest["id"] == urlsplit(first).path.rsplit("/", 1)[1] and oldest["viaToken"] is False
    assert (oldest["size"], oldest["offset"], oldest["reservedBytes"]) == (4 * MIB, 1000, 4 * MIB)
    assert oldest["organizationId"] == tenant.org_id and oldest["name"] == "f.bin"
    assert oldest["createdAt"].endswith("Z") and oldest["expiresAt"] > oldest["createdAt"]
    assert tenant.api.get("/api/uploads", params={"limit": 1, "offset": 1}).json()["uploads"] == [oldest]
    # Another organization sees none of them, and cannot end them.
    assert other.api.get("/api/uploads").json() == {
        **{"uploads": [], "total": 0, "limit": 50, "offset": 0},
        "nextCursor": None,
    }
    assert_error(other.api.delete(f"/api/uploads/{newest['id']}"), 404, "not_found")
    assert_error(anon.get("/api/uploads"), 401, "unauthorized")
    # Ended: gone from the list, its capability 404, its reservation free.
    ended = tenant.api.delete(f"/api/uploads/{newest['id']}")
    assert ended.status_code == 200 and ended.json() == {"success": True}
    assert head(anon, second).status_code == 404
    assert [u["id"] for u in tenant.api.get("/api/uploads").json()["uploads"]] == [oldest["id"]]
    assert_error(tenant.api.delete(f"/api/uploads/{newest['id']}"), 404, "not_found")
    assert_error(tenant.api.delete("/api/uploads/doesnotexist"), 404, "not_found")
    assert create(tenant.api, 6 * MIB).status_code == 201


def test_ending_a_finished_upload_is_404_and_keeps_it(new_tenant: Any) -> None:
    """``DELETE /api/uploads/{id}`` ends unfinished uploads only: a finished one is 404 and
    left as it was, so its tus client can still learn (HEAD) that it finished, rather than
    upload it again as a second asset."""
    tenant = new_tenant()
    url = create(tenant.api, 5).headers["location"]
    assert patch(tenant.api, url, b"hello", 0).status_code == 204
    upload_id = urlsplit(url).path.rsplit("/", 1)[1]
    assert_error(tenant.api.delete(f"/api/uploads/{upload_id}"), 404, "not_found")
    finished = head(tenant.api, url)
    assert finished.status_code == 200 and finished.headers["upload-offset"] == "5"
    assert tenant.api.get("/api/assets").json()["total"] == 1


def test_bytes_past_a_finished_uploads_length_are_413_not_dropped(tenant: Any) -> None:
    """A PATCH at a finished upload's own offset answered 204 whatever its body, the bytes
    dropped; past Upload-Length they are 413, as for an unfinished upload. An empty one (a
    client asking where it stands) is still 204."""
    url = create(tenant.api, 5).headers["location"]
    assert patch(tenant.api, url, b"hello", 0).status_code == 204
    assert_error(patch(tenant.api, url, b"more!", 5), 413, "file_too_large")
    chunked = tenant.api.patch(
        path_of(url),
        content=iter([b"more!"]),
        headers={**TUS, "Upload-Offset": "5", "Content-Type": "application/offset+octet-stream"},
    )
    assert_error(chunked, 413, "file_too_large")
    again = patch(tenant.api, url, b"", 5)
    assert again.status_code == 204 and again.headers["upload-offset"] == "5"
    assert tenant.api.get("/api/assets").json()["assets"][0]["size"] == 5


def test_a_last_chunk_retried_after_its_completion_failed_completes_the_upload(
    monkeypatch: pytest.MonkeyPatch, tenant: Any
) -> None:
    """The last chunk's bytes were published, then metadata failed to make the asset (503):
    each retry of that chunk was 503 ("the bytes of upload … are gone"), the upload stuck with
    its reservation until it expired. blob now answers a retried last chunk whose bytes are the
    published file's with that file, and the retry makes the asset."""
    from coffer_edge.clients.metadata import MetadataClient
    from coffer_kit.contract.errors import CofferError

    complete, failures = MetadataClient.tus_complete, [CofferError(503, "unavailable", "metadata is down")]

    async def failing_once(self: Any, *args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await complete(self, *args, **kwargs)

    monkeypatch.setattr(MetadataClient, "tus_complete", failing_once)
    url = create(tenant.api, 6).headers["location"]
    assert patch(tenant.api, url, b"abc", 0).status_code == 204
    assert_error(patch(tenant.api, url, b"def", 3), 503, "unavailable")
    assert head(tenant.api, url).headers["upload-offset"] == "3"
    assert_error(patch(tenant.api, url, b"xyz", 3), 503, "unavailable")  # not the bytes published
    done = patch(tenant.api, url, b"def", 3)
    assert done.status_code == 204, done.text
    asset = tenant.api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    assert asset["size"] == 6 and asset["sha256"] == hashlib.sha256(b"abcdef").hexdigest()
    assert httpx.get(asset["publicUrl"]).content == b"abcdef"
    assert tenant.api.get("/api/uploads").json()["total"] == 0


def test_an_expiry_that_passes_while_uploading_refuses_the_completion(tenant: Any) -> None:
    """``expiresAt`` is checked at creation, but a resumable upload may take days: one that
    passed meanwhile made an asset already expired (``expiresAt`` before ``createdAt``), in the
    trash or gone a few seconds after its 204. The completion is now 400 naming the field."""
    api = tenant.api
    when = utcnow() + timedelta(seconds=1)
    made = create(api, 2, meta(filename="late.txt", expiresAt=isoformat(when)))
    assert made.status_code == 201, made.text
    while utcnow() <= when:  # (the condition is the clock's)
        time.sleep(0.05)
    done = patch(api, made.headers["location"], b"ab", 0)
    assert assert_error(done, 400, "invalid_request")["details"]["field"] == "expiresAt"
    assert head(api, made.headers["location"]).status_code == 404  # terminated, its bytes deleted
    assert api.get("/api/assets").json()["total"] == 0
    assert used_bytes(api) == 0


def test_a_chunks_late_record_never_lets_another_request_write_beside_the_next_chunk(
    monkeypatch: pytest.MonkeyPatch, stack: Any, tenant: Tenant
) -> None:
    """A chunk is answered before its record, which is written while the next chunk streams.
    Landing after the next chunk's first renewal, the record made that chunk's lease a kept one
    of 2 s again: a second PATCH at the same offset then took the upload while the first still
    streamed, both wrote it, and the asset's bytes were not its sha256's. The next chunk's
    first renewal now waits for the record: the second PATCH is 423, the upload whole."""
    import asyncio

    from coffer_edge.clients.metadata import MetadataClient

    recorded, renewed = threading.Event(), threading.Event()
    advance, renew = MetadataClient.tus_advance, MetadataClient.tus_renew

    async def late_advance(self: Any, upload_id: str, step: Any, *, request_id: str) -> Any:
        while not recorded.is_set():  # the first chunk's record, held back (a busy metadata)
            await asyncio.sleep(0.01)
        return await advance(self, upload_id, step, request_id=request_id)

    async def noted_renew(self: Any, *args: Any, **kwargs: Any) -> None:
        renewed.set()
        await renew(self, *args, **kwargs)

    monkeypatch.setattr(MetadataClient, "tus_advance", late_advance)
    monkeypatch.setattr(MetadataClient, "tus_renew", noted_renew)
    first, second = os.urandom(MIB), os.urandom(4 * MIB)
    url = create(tenant.api, len(first) + len(second) + 1).headers["location"]
    upload_id = path_of(url).rsplit("/", 1)[1]
    assert patch(tenant.api, url, first, 0).status_code == 204  # its record waits
    streaming, finish = threading.Event(), threading.Event()

    def body() -> Any:
        sent = MIB
        yield second[:sent]
        streaming.set()
        while not finish.wait(0.2):  # a byte now and then: a slow client, never an idle one
            yield second[sent : sent + 1]
            sent += 1
        yield second[sent:]

    answers: dict[str, httpx.Response] = {}

    def send() -> None:
        headers = {**TUS, "Upload-Offset": str(MIB), "Content-Type": "application/offset+octet-stream"}
        headers["Content-Length"] = str(len(second))
        answers["second"] = tenant.api.patch(path_of(url), content=body(), headers=headers)

    sending = threading.Thread(target=send)
    sending.start()
    assert streaming.wait(30)
    renewed.wait(2)  # the old code's first renewal, half a second in (now: after the record)
    recorded.set()
    offset = f"SELECT \"offset\" FROM tus_uploads WHERE id = '{upload_id}'"
    deadline = time.monotonic() + 10
    while stack.metadata_scalar(offset) != MIB:  # the record has landed
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(3)  # (a duration, not a condition: past the 2 s a kept lease lasts)
    other = patch(tenant.api, url, os.urandom(len(second) + 1), MIB)
    assert other.status_code == 423, (
        f"another request wrote the upload beside a streaming chunk: {other.text}"
    )
    finish.set()
    sending.join(30)
    assert answers["second"].status_code == 204, answers["second"].text
    done = patch(tenant.api, url, b"!", len(first) + len(second))
    assert done.status_code == 204, done.text
    asset = tenant.api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    assert asset["sha256"] == hashlib.sha256(first + second + b"!").hexdigest()
    assert hashlib.sha256(httpx.get(asset["publicUrl"]).content).hexdigest() == asset["sha256"]


@pytest.mark.parametrize("when", ["before the next chunk", "while the next chunk streams"])
def test_a_chunk_whose_record_failed_sends_the_client_back_to_head(
    monkeypatch: pytest.MonkeyPatch, tenant: Tenant, when: str
) -> None:
    """A chunk is answered before metadata records its offset. One record that failed (a blip
    of metadata) made every later record fail too, while their chunks were still answered 204
    at ever higher offsets; HEAD answered the old one, and only the last chunk was 409, the
    client starting again from there. Now a chunk that finds the last record failed is 409, at
    most two 204s run ahead of the record (one when the failure came before the next chunk
    began), and the upload resumes from HEAD."""
    import asyncio

    from coffer_edge.clients.metadata import MetadataClient
    from coffer_kit.contract.errors import CofferError

    advance, records, streamed = MetadataClient.tus_advance, [], threading.Event()

    async def blip(self: Any, upload_id: str, step: Any, *, request_id: str) -> Any:
        records.append(step.offset)
        if len(records) == 2:  # the second chunk's record
            while when != "before the next chunk" and not streamed.is_set():
                await asyncio.sleep(0.01)
            raise CofferError(503, "unavailable", "blip")
        return await advance(self, upload_id, step, request_id=request_id)

    monkeypatch.setattr(MetadataClient, "tus_advance", blip)
    data = os.urandom(5 * MIB)
    url = create(tenant.api, len(data)).headers["location"]

    def chunk(offset: int) -> httpx.Response:
        piece = data[offset : offset + MIB]

        def body() -> Any:
            yield piece
            if offset == 2 * MIB:
                streamed.set()  # the third chunk's bytes are sent

        headers = {**TUS, "Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream"}
        return tenant.api.patch(path_of(url), content=body(), headers={**headers, "Content-Length": str(MIB)})

    offset, answered = 0, []
    while (answer := chunk(offset)).status_code == 204:
        offset = int(answer.headers["upload-offset"])
        answered.append(offset)
    assert_error(answer, 409, "conflict")
    recorded = int(head(tenant.api, url).headers["upload-offset"])
    assert recorded == MIB
    # Failing while the third chunk is sent, the record may fail before edge reads that chunk's
    # head (then it is refused at once) or while its bytes stream (then it is answered).
    allowed = [[2 * MIB]] if when == "before the next chunk" else [[2 * MIB], [2 * MIB, 3 * MIB]]
    assert [o for o in answered if o > recorded] in allowed, answered
    offset = recorded
    while offset < len(data):
        answer = chunk(offset)
        assert answer.status_code == 204, answer.text
        offset = int(answer.headers["upload-offset"])
    asset = tenant.api.get(f"/api/assets/{answer.headers['coffer-asset-id']}").json()
    assert asset["size"] == len(data) and asset["sha256"] == hashlib.sha256(data).hexdigest()
    assert hashlib.sha256(httpx.get(asset["publicUrl"]).content).hexdigest() == asset["sha256"]


def test_a_creation_whose_completion_answer_was_lost_spends_its_token_once(
    monkeypatch: pytest.MonkeyPatch, tenant: Tenant, anon: httpx.Client
) -> None:
    """creation-with-upload whose completion metadata committed, its answer lost (503 to edge):
    the creation was 503 and the upload token released, so the client's retry made a second
    asset with a single-use token. Edge now reads the upload again: it completed, so the
    creation is answered as a success, and the token stays spent."""
    from coffer_edge.clients.metadata import MetadataClient
    from coffer_kit.contract.errors import CofferError

    complete, lost = MetadataClient.tus_complete, [CofferError(503, "unavailable", "the answer was lost")]

    async def committed_then_lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        completed = await complete(self, *args, **kwargs)
        if lost:
            raise lost.pop()
        return completed

    monkeypatch.setattr(MetadataClient, "tus_complete", committed_then_lost)
    token = tenant.api.post("/api/upload-tokens", json={}).json()["token"]
    headers = {
        **TUS,
        "Content-Type": "application/offset+octet-stream",
        "Upload-Length": "3",
        "Upload-Metadata": meta(filename="once.bin"),
    }
    first = anon.post(f"/api/uploads/tus?token={token}", content=b"abc", headers=headers)
    assert first.status_code == 201, first.text
    assert first.headers["upload-offset"] == "3" and "?token=cof_tus_" in first.headers["location"]
    again = anon.post(f"/api/uploads/tus?token={token}", content=b"abc", headers=headers)
    assert_error(again, 401, "unauthorized")
    assets = tenant.api.get("/api/assets").json()
    assert [a["id"] for a in assets["assets"]] == [first.headers["coffer-asset-id"]]
    assert used_bytes(tenant.api) == 3


def test_a_post_with_x_http_method_override_is_the_method_it_names(
    tenant: Tenant, anon: httpx.Client, new_tenant: Any
) -> None:
    """tus 1.0.0: ``X-HTTP-Method-Override`` MUST be taken as the request's method (tus-js-client
    sends it with ``overridePatchMethod``; the CORS preflight allows it). A POST on an upload's
    URL is PATCH, DELETE or HEAD as it says, with every check of that method; without it, 405."""
    url = create(tenant.api, 10 + 100_000).headers["location"]
    chunk = {"Content-Type": "application/offset+octet-stream"}

    def post(method: str | None, data: bytes = b"", api: httpx.Client = tenant.api, **headers: str) -> Any:
        sent = {**TUS, **headers} | ({"X-HTTP-Method-Override": method} if method else {})
        return api.post(path_of(url), content=data, headers=sent)

    written = post("PATCH", b"01234", **chunk, **{"Upload-Offset": "0"})
    assert written.status_code == 204 and written.headers["upload-offset"] == "5", written.text
    assert head(tenant.api, url).headers["upload-offset"] == "5"
    asked = post("HEAD")
    assert asked.status_code == 200 and asked.headers["upload-offset"] == "5", asked.text
    assert asked.headers["upload-length"] == "100010" and asked.content == b""
    # A chunk past the 64 KiB a body read whole may have streams as a PATCH's does.
    large = post("PATCH", os.urandom(100_000), **chunk, **{"Upload-Offset": "5"})
    assert large.status_code == 204 and large.headers["upload-offset"] == "100005", large.text
    assert_error(post("PATCH", b"56789", **chunk, **{"Upload-Offset": "0"}), 409, "offset_mismatch")
    assert_error(post("PATCH", b"56789", anon, **chunk, **{"Upload-Offset": "100005"}), 401, "unauthorized")
    assert_error(post("DELETE", api=new_tenant().api), 404, "not_found")  # another organization's
    assert_error(post("GET"), 400, "invalid_request")
    assert_error(post(None), 405, "method_not_allowed")
    assert post("DELETE").status_code == 204
    assert_error(post("HEAD"), 404, "not_found")
    assert tenant.api.get("/api/uploads").json()["uploads"] == []
