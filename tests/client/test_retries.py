"""When the client sends an upload again, and when it must not.

edge answers 503 when metadata does not answer the commit of an upload in time, and metadata may
have committed it (services/edge ``_upload``): such a 503 can stand for an asset that exists, and
sending the upload again would store it twice. So a POST is sent again only when the service
cannot have received all of it: the connection broke, or the service answered and closed it,
before the body's last byte was out. These tests drive the real stack (blob, then edge, killed in
the middle of an upload), and a real ASGI app over a real socket for the answers a stack cannot be
made to give on cue (a 503 after the commit; an answer, then a close, before the body is read)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest

import coffer_client as cc
from coffer_client import AsyncCoffer, Coffer, RetryPolicy
from coffer_testkit.testing import serving

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def random_file(path: Path, mib: int) -> str:
    h = hashlib.sha256()
    with path.open("wb") as fh:
        for _ in range(mib):
            chunk = os.urandom(MIB)
            h.update(chunk)
            fh.write(chunk)
    return h.hexdigest()


class Cut:
    """A progress callback that kills ``service`` once a third of the body is out (and, with
    ``restart``, starts it again before the upload goes on); ``sent`` is every progress figure,
    ``posts`` every attempt."""

    def __init__(self, stack: Any, service: str, *, restart: bool) -> None:
        self.stack, self.service, self.restart = stack, service, restart
        self.done = False
        self.sent: list[int] = []
        self.posts = 0

    def count(self, request: httpx.Request) -> None:
        self.posts += request.method == "POST"

    def __call__(self, done: int, total: int | None) -> None:
        self.sent.append(done)
        if not self.done and total and done >= total // 3:
            self.done = True
            self.stack.kill(self.service)
            if self.restart:
                # From this thread: a service dies with the thread that started it (PDEATHSIG).
                self.stack.start(self.service)

    def went_again(self) -> bool:
        return any(later < earlier for earlier, later in zip(self.sent, self.sent[1:], strict=False))


def test_uploads_cut_midway_are_sent_again_only_when_nothing_can_be_stored(
    own_stack_with: Any, admin_for: Any, tmp_path: Path
) -> None:
    stack = own_stack_with()
    admin = admin_for(stack)
    org = admin("create-org", "--name", "retries")["id"]
    key = admin("create-key", "--org", org)["key"]
    src = tmp_path / "cut.bin"
    digest = random_file(src, 48)
    policy = RetryPolicy(attempts=3, initial_wait=0.2, max_wait=1.0)

    # blob dies: edge answers 503, reads the rest of the body and keeps the connection, so the
    # client cannot tell this 503 from one after a commit. It is not sent again: one POST.
    cut = Cut(stack, "blob", restart=False)
    with (
        httpx.Client(timeout=60, event_hooks={"request": [cut.count]}) as http,
        Coffer(stack.edge_url, key, retry=policy, http_client=http) as c,
        pytest.raises(cc.Unavailable),
    ):
        c.upload(src, progress=cut)
    assert cut.posts == 1 and not cut.went_again()
    stack.start("blob")
    with Coffer(stack.edge_url, key) as c:
        assert list(c.list_assets()) == []  # a failure leaves nothing

    # edge dies (and is back): the connection broke before the body was out, so nothing can
    # have been stored. Sent again, and stored once.
    cut = Cut(stack, "edge", restart=True)
    with (
        httpx.Client(timeout=60, event_hooks={"request": [cut.count]}) as http,
        Coffer(stack.edge_url, key, retry=policy, http_client=http) as c,
    ):
        asset = c.upload(src, progress=cut)
        assert cut.posts == 2 and cut.went_again(), cut.sent[:60]
        assert asset.size == 48 * MIB and asset.sha256 == digest
        assert [a.id for a in c.list_assets()] == [asset.id]
        back = tmp_path / "back.bin"
        c.download(asset.id, back)
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest


class Service:
    """A stand-in for edge's upload route, as an ASGI app: it keeps what it was sent and answers
    what the test scripts (``read_first``: read the whole body before answering)."""

    def __init__(self, answers: list[tuple[int, bool]]) -> None:
        # (status, read_first) per request; an answer before the body closes the connection.
        self.answers = answers
        self.requests = 0
        self.stored: list[int] = []  # sizes of the bodies it read in full

    def asset(self, size: int) -> dict[str, Any]:
        return {
            "id": f"ast_{len(self.stored)}",
            "organizationId": "org_1",
            "folderId": None,
            "key": "k",
            "name": "f.bin",
            "mimeType": "application/octet-stream",
            "size": size,
            "publicUrl": "http://cdn.test/k",
            "createdAt": "2026-01-01T00:00:00Z",
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        status, read_first = self.answers[min(self.requests, len(self.answers) - 1)]
        self.requests += 1
        size = 0
        if read_first:
            while True:
                message = await receive()
                size += len(message.get("body", b""))
                if not message.get("more_body"):
                    break
            self.stored.append(size)  # as metadata would commit it, whatever is answered next
        if status == 201:
            body = json.dumps(self.asset(size)).encode()
        else:
            envelope = {"code": "unavailable", "message": "The metadata service is unavailable."}
            body = json.dumps({"error": envelope}).encode()
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"0")]
        if not read_first:
            headers.append((b"connection", b"close"))  # the unread body is not waited for
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


NOT_AGAIN = [(503, True), (201, True)]  # a 503 after the whole body: it may stand for an asset
AGAIN = [(503, False), (201, True)]  # a 503 and a close before the body is out: nothing stored
POLICY = RetryPolicy(attempts=3, initial_wait=0.01, max_wait=0.05)


def test_a_503_after_the_whole_upload_is_not_sent_again(tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(64 * 1024))
    service = Service(NOT_AGAIN)
    with serving(service) as url, Coffer(url, "k", retry=POLICY) as c, pytest.raises(cc.Unavailable):
        c.upload(src)
    assert service.requests == 1 and len(service.stored) == 1


def test_a_503_before_the_body_is_out_is_sent_again(tmp_path: Path) -> None:
    # 16 MiB: more than the socket buffers hold, so the close comes while the client still sends.
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(16 * MIB))
    service = Service(AGAIN)
    with serving(service) as url, Coffer(url, "k", retry=POLICY) as c:
        asset = c.upload(src)
    # The first answer came before the body was read: sent again, and stored once.
    assert service.requests == 2 and len(service.stored) == 1 and service.stored[0] > 16 * MIB
    assert asset.id == "ast_1"


def test_the_async_client_follows_the_same_rule(tmp_path: Path) -> None:
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3 * MIB))

    async def attempts(answers: list[tuple[int, bool]]) -> tuple[Service, Any]:
        service = Service(answers)
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=service))
        async with AsyncCoffer("http://coffer.test", "k", retry=POLICY, http_client=http) as c:
            try:
                outcome: Any = await c.upload(src)
            except cc.CofferError as exc:
                outcome = exc
        await http.aclose()
        return service, outcome

    service, outcome = asyncio.run(attempts(NOT_AGAIN))
    assert isinstance(outcome, cc.Unavailable) and service.requests == 1 and len(service.stored) == 1
    service, outcome = asyncio.run(attempts(AGAIN))
    assert isinstance(outcome, cc.Asset) and service.requests == 2 and len(service.stored) == 1
