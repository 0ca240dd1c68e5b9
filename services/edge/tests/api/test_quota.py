"""Quotas: 413 quota_exceeded with its details, space released by deletes, uploads in flight
holding their size, and an idle upload stopped (in process)."""

from __future__ import annotations

import json
import secrets
import select
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from coffer_harness.api import upload_zeros, used_bytes
from coffer_harness.inprocess import IDLE_SECONDS
from coffer_testkit.testing import assert_error

from .test_tus import create, head, path_of

KIB = 1024
MIB = 1024 * KIB


def test_upload_past_the_quota_is_413_with_details(new_tenant) -> None:
    tenant = new_tenant(quota_bytes=100 * KIB)
    assert upload_zeros(tenant.api, 60 * KIB).status_code == 201
    error = assert_error(upload_zeros(tenant.api, 50 * KIB), 413, "quota_exceeded")
    assert error["details"] == {"usedBytes": 60 * KIB, "quotaBytes": 100 * KIB, "requestedBytes": 50 * KIB}
    assert upload_zeros(tenant.api, 40 * KIB).status_code == 201  # exactly up to the quota is fine
    assert_error(upload_zeros(tenant.api, 1), 413, "quota_exceeded")
    assert used_bytes(tenant.api) == 100 * KIB


def test_deleting_releases_space(new_tenant) -> None:
    tenant = new_tenant(quota_bytes=100 * KIB)
    first = upload_zeros(tenant.api, 80 * KIB).json()
    assert_error(upload_zeros(tenant.api, 80 * KIB), 413, "quota_exceeded")
    assert tenant.api.delete(f"/api/assets/{first['id']}").status_code == 200
    assert upload_zeros(tenant.api, 80 * KIB).status_code == 201


class _HeldUpload:
    """An upload whose headers and first bytes are sent and whose rest waits: an upload in flight."""

    def __init__(self, stack: Any, key: str, size: int) -> None:
        boundary = "held" + secrets.token_hex(8)
        self.head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="held.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        self.tail = f"\r\n--{boundary}--\r\n".encode()
        self.size = size
        length = len(self.head) + size + len(self.tail)
        self.sock = socket.create_connection(("127.0.0.1", urlsplit(stack.edge_url).port))
        self.sock.settimeout(30)
        self.sock.sendall(
            f"POST /api/assets HTTP/1.1\r\nHost: edge\r\nx-api-key: {key}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            f"Content-Length: {length}\r\n\r\n".encode()
            + self.head
        )

    def answer(self) -> tuple[int, dict[str, Any]]:
        """The status and JSON body of the answer (read until the connection has all of it)."""
        data = b""
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < _length(data):
            chunk = self.sock.recv(65536)
            assert chunk, data
            data += chunk
        self.sock.close()
        return int(data.split(b" ", 2)[1]), json.loads(data.partition(b"\r\n\r\n")[2])

    def finish(self) -> tuple[int, dict[str, Any]]:
        self.sock.sendall(b"\0" * self.size + self.tail)
        return self.answer()


def _length(data: bytes) -> int:
    head = data.partition(b"\r\n\r\n")[0].decode().lower()
    return int(head.split("content-length:", 1)[1].split("\r\n", 1)[0])


def test_an_upload_that_cannot_fit_is_refused_before_its_bytes_are_sent(stack, new_tenant) -> None:
    """Issue 23: the quota is checked from Content-Length at the intent, not after 8 MiB streamed."""
    tenant = new_tenant(quota_bytes=1 * MIB)
    held = _HeldUpload(stack, tenant.key, 8 * MIB)
    status, body = held.answer()  # nothing but the headers and the part's head was sent
    assert (status, body["error"]["code"]) == (413, "quota_exceeded")
    assert body["error"]["details"]["requestedBytes"] >= 8 * MIB
    assert used_bytes(tenant.api) == 0


def test_uploads_in_flight_hold_their_size_against_the_quota(stack, new_tenant) -> None:
    tenant = new_tenant(quota_bytes=3 * MIB)
    first = _HeldUpload(stack, tenant.key, 2 * MIB)
    in_flight = "SELECT count(*) FROM upload_intents WHERE organization_id = :o"
    deadline = time.monotonic() + 30
    while stack.metadata_scalar(in_flight, o=tenant.org_id) != 1:
        assert time.monotonic() < deadline, "edge never registered the first upload"
    # The held 2 MiB leave room for less than the 2.5 MiB this body carries at least.
    error = assert_error(upload_zeros(tenant.api, 5 * MIB // 2), 413, "quota_exceeded")
    assert "Uploads in progress hold" in error["message"]
    status, asset = first.finish()
    assert (status, asset["size"]) == (201, 2 * MIB)
    # Once stored, only the stored size counts: exactly the rest of the quota fits.
    assert upload_zeros(tenant.api, 1 * MIB).status_code == 201
    assert used_bytes(tenant.api) == 3 * MIB


def test_an_upload_that_sends_nothing_is_stopped_and_holds_nothing(stack, new_tenant) -> None:
    """A client that sends none of its body for the idle bound (5 s here, 60 s by default): a
    one-shot upload is 408 ``request_timeout``, nothing kept, its reservation released at once
    (it held 3 MiB of a 5 MiB quota until the sweeper's hour); a tus PATCH ends with what
    arrived kept, as when the client goes away."""
    tenant = new_tenant(quota_bytes=5 * MIB)
    started = time.monotonic()
    held = _HeldUpload(stack, tenant.key, 3 * MIB)
    created = create(tenant.api, MIB)
    assert created.status_code == 201, created.text
    location = created.headers["location"]
    patching = socket.create_connection(("127.0.0.1", urlsplit(stack.edge_url).port))
    patching.settimeout(30)
    patching.sendall(
        f"PATCH {path_of(location)} HTTP/1.1\r\nHost: edge\r\nx-api-key: {tenant.key}\r\n"
        "Tus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\n"
        f"Content-Length: {MIB}\r\n\r\n".encode()
        + b"a" * (100 * KIB)
    )

    status, body = held.answer()
    assert (status, body["error"]["code"]) == (408, "request_timeout")
    assert time.monotonic() - started >= IDLE_SECONDS
    in_flight = "SELECT count(*) FROM upload_intents WHERE organization_id = :o"
    assert stack.metadata_scalar(in_flight, o=tenant.org_id) == 1  # the tus upload's alone
    assert upload_zeros(tenant.api, 3 * MIB).status_code == 201  # the quota is free again

    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = patching.recv(65536)
        assert chunk, answer
        answer += chunk
    patching.close()
    assert answer.split(b" ", 2)[1] == b"204" and b"upload-offset: 102400" in answer.lower()
    assert head(tenant.api, location).headers["upload-offset"] == str(100 * KIB)


def test_an_upload_blob_fails_holds_nothing_though_blob_cannot_delete_its_bytes(
    stack: Any, new_tenant: Any, monkeypatch: Any
) -> None:
    """With blob down, the failed upload's cleanup (delete its bytes, then its intent) stopped
    at the first step: the intent held its size and its place in flight for the sweeper's
    hour, and the organization's next uploads were 413 or 429 once blob was back."""
    from coffer_edge.clients.blob import BlobClient
    from coffer_kit.contract.errors import unavailable

    async def down(*_: Any, **__: Any) -> Any:
        raise unavailable("blob is down (the test)")

    tenant = new_tenant(quota_bytes=10 * MIB)
    with monkeypatch.context() as outage:
        outage.setattr(BlobClient, "upload", down)
        outage.setattr(BlobClient, "delete_prefix", down)
        assert_error(upload_zeros(tenant.api, 8 * MIB), 503, "unavailable")
    held = "SELECT count(*) FROM upload_intents WHERE organization_id = :o AND NOT swept"
    assert stack.metadata_scalar(held, o=tenant.org_id) == 0
    # The intent stays, swept, for the sweeper to delete whatever bytes blob may hold.
    assert (
        stack.metadata_scalar(
            "SELECT count(*) FROM upload_intents WHERE organization_id = :o", o=tenant.org_id
        )
        == 1
    )
    assert upload_zeros(tenant.api, 5 * MIB).status_code == 201


def test_an_upload_still_streaming_when_the_sweeper_may_take_it_is_stopped(
    stack: Any, new_tenant: Any, monkeypatch: Any
) -> None:
    """A one-shot upload's intent is the sweeper's once older than its age (an hour): a body
    that never idled but took longer (100 MiB at 28 KiB/s) was swept as it streamed, its bytes
    deleted, its commit refused. Its body must now arrive within 90 % of that age (here
    shortened to about 3 s); past it, 408 and nothing held."""
    from coffer_edge.routers import assets

    limit = 3600 * 0.00085  # about 3 s of the in-process stack's intent age (an hour)
    monkeypatch.setattr(assets, "UPLOAD_TIME_SHARE", limit / 3600)
    tenant = new_tenant(quota_bytes=5 * MIB)
    started = time.monotonic()
    slow = _HeldUpload(stack, tenant.key, 64 * KIB)
    # A chunk a second (never idle) until the answer comes, which it must past the limit.
    while not select.select([slow.sock], [], [], 1)[0]:
        assert time.monotonic() - started < limit + 10, "never stopped"
        slow.sock.sendall(b"\0" * KIB)
    assert time.monotonic() - started >= limit
    status, body = slow.answer()
    assert (status, body["error"]["code"]) == (408, "request_timeout")
    assert "resumable upload" in body["error"]["message"]
    in_flight = "SELECT count(*) FROM upload_intents WHERE organization_id = :o"
    assert stack.metadata_scalar(in_flight, o=tenant.org_id) == 0
    assert tenant.api.get("/api/assets").json()["total"] == 0


def _chunked_until_answered(stack: Any, key: str, size: int) -> tuple[int, int, dict[str, Any]]:
    """A multipart upload of ``size`` zero bytes with no Content-Length (chunked), sent 64 KiB at
    a time until the service answers: (bytes sent by then, status, JSON body)."""
    boundary = "chunked" + secrets.token_hex(8)
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", urlsplit(stack.edge_url).port))
    sock.settimeout(30)
    sock.sendall(
        f"POST /api/assets HTTP/1.1\r\nHost: edge\r\nx-api-key: {key}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n".encode()
    )
    pieces = [head, *[b"\0" * (64 * KIB)] * (size // (64 * KIB)), f"\r\n--{boundary}--\r\n".encode()]
    sent = 0
    for piece in pieces:
        if select.select([sock], [], [], 0)[0]:
            break  # answered
        sock.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
        sent += len(piece)
    else:
        sock.sendall(b"0\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < _length(data):
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    sock.close()
    return sent, int(data.split(b" ", 2)[1]), json.loads(data.partition(b"\r\n\r\n")[2])


def test_a_body_without_a_length_is_stopped_at_the_room_the_quota_left(stack, new_tenant) -> None:
    """A chunked body declares no size, so the intent cannot refuse it up front: it is stopped
    once it holds more than the quota left when it was admitted (plus the framing's 1 MiB), not
    streamed whole (48 MiB to blob, at a full quota) before the commit refused it."""
    tenant = new_tenant(quota_bytes=3 * MIB)
    assert upload_zeros(tenant.api, 2 * MIB).status_code == 201
    sent, status, body = _chunked_until_answered(stack, tenant.key, 48 * MIB)
    assert (status, body["error"]["code"]) == (413, "quota_exceeded"), body
    details = body["error"]["details"]
    assert (details["usedBytes"], details["quotaBytes"]) == (2 * MIB, 3 * MIB)
    assert details["requestedBytes"] > MIB
    assert sent < 16 * MIB, sent  # the room, the framing's slack and the sockets' buffers
    # What fits still fits, chunked too.
    _, status, body = _chunked_until_answered(stack, tenant.key, MIB)
    assert (status, body.get("size")) == (201, MIB), body
    assert used_bytes(tenant.api) == 3 * MIB
    in_flight = "SELECT count(*) FROM upload_intents WHERE organization_id = :o"
    assert stack.metadata_scalar(in_flight, o=tenant.org_id) == 0


def test_a_body_without_a_length_holds_no_more_than_the_quota_left(stack, new_tenant) -> None:
    """A chunked body held the 100 MiB bound against the quota while it streamed, whatever the
    quota: one such upload left open (a key's, or an upload token's, anyone's) made every
    other upload of a 20 MiB organization 413 for as long as it lasted. It now holds at most
    what the quota left, and is stopped there (the test above)."""
    tenant = new_tenant(quota_bytes=20 * MIB)
    boundary = "held" + secrets.token_hex(8)
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="h.bin"\r\n\r\n'.encode()
    with socket.create_connection(("127.0.0.1", urlsplit(stack.edge_url).port)) as held:
        held.sendall(
            f"POST /api/assets HTTP/1.1\r\nHost: edge\r\nx-api-key: {tenant.key}\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
            + b"%x\r\n%b\r\n" % (len(head), head)
        )
        in_flight = "SELECT count(*) FROM upload_intents WHERE organization_id = :o"
        deadline = time.monotonic() + 10
        while stack.metadata_scalar(in_flight, o=tenant.org_id) != 1:
            assert time.monotonic() < deadline, "the held upload was never admitted"
            time.sleep(0.05)
        beside = upload_zeros(tenant.api, KIB)
        assert beside.status_code == 201, beside.text
    assert used_bytes(tenant.api) == KIB
