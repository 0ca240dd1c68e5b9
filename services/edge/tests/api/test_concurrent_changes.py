"""Changes of one asset made at once end with the store as metadata says, on both databases.

Each change writes metadata and the store in the order that never makes an asset more
reachable than metadata says; two changes at once could still reach the store in the other
order than metadata. Here one change's store write arrives late (held at edge's call to blob
until the other change has answered), as a slow network or a second edge replica would make
it: the asset must end neither served while private nor served from the trash."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from coffer_edge.clients.blob import BlobClient
from coffer_testkit.testing import TLS, assert_error


class LateStoreWrite:
    """Holds the first call to ``BlobClient.<method>`` that ``matches`` until ``open()``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, method: str, matches: Callable[..., bool]) -> None:
        self.entered, self.opened, self.used = threading.Event(), threading.Event(), False
        original = getattr(BlobClient, method)

        async def call(client: BlobClient, *args: Any, **kwargs: Any) -> Any:
            if not self.used and matches(*args, **kwargs):
                self.used = True
                self.entered.set()
                while not self.opened.is_set():  # the services share this loop: wait without blocking it
                    await asyncio.sleep(0.01)
            return await original(client, *args, **kwargs)

        monkeypatch.setattr(BlobClient, method, call)

    def wait_entered(self) -> None:
        assert self.entered.wait(10), "the store write never came"

    def open(self) -> None:
        self.opened.set()


def _bare(stack: Any, asset: dict[str, Any]) -> str:
    return (
        stack.public_cdn_url.rstrip("/") + "/" + "/".join(quote(s, safe="") for s in asset["key"].split("/"))
    )


def _served_within(url: str, status: int, seconds: float = 5.0) -> None:
    """The CDN answers ``status`` within the contract's 5 s, and still does a moment later."""
    deadline = time.monotonic() + seconds
    while (answer := httpx.get(url, verify=TLS).status_code) != status:
        assert time.monotonic() < deadline, f"{url} still answers {answer}"
        time.sleep(0.05)


def test_a_late_public_does_not_undo_a_later_private(
    stack: Any, tenant: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    asset = tenant.api.post(
        "/api/assets", files={"file": ("s.txt", b"secret")}, data={"visibility": "private"}
    ).json()
    late = LateStoreWrite(monkeypatch, "set_visibility", lambda _key, visibility, **_: visibility == "public")
    path = f"/api/assets/{asset['id']}"
    with ThreadPoolExecutor(1) as pool:
        going_public = pool.submit(tenant.api.patch, path, json={"visibility": "public"})
        late.wait_entered()  # metadata says public; the store not yet
        assert tenant.api.patch(path, json={"visibility": "private"}).status_code == 200
        late.open()
        assert going_public.result().status_code == 200
    assert tenant.api.get(path).json()["visibility"] == "private"
    _served_within(_bare(stack, asset), 404)


def test_a_late_release_does_not_undo_a_later_delete(
    stack: Any, tenant: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tenant.api.put("/api/trash/settings", json={"retentionDays": 7}).status_code == 200
    deadline = time.monotonic() + 5  # edge's principal cache may still hold no trash: poll
    while tenant.api.get("/api/trash/settings").json()["retentionDays"] != 7:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    asset = tenant.api.post("/api/assets", files={"file": ("t.txt", b"kept a week")}).json()
    path = f"/api/assets/{asset['id']}"
    assert tenant.api.delete(path).status_code == 200
    _served_within(_bare(stack, asset), 404)
    late = LateStoreWrite(
        monkeypatch, "set_held", lambda _key, held, **kw: not held and kw.get("reason") == "trash"
    )
    with ThreadPoolExecutor(1) as pool:
        restoring = pool.submit(tenant.api.post, f"/api/trash/{asset['id']}/restore")
        late.wait_entered()  # metadata has it live; the store still holds it
        assert tenant.api.delete(path).status_code == 200
        late.open()
        assert restoring.result().status_code == 200
    assert_error(tenant.api.get(path), 404, "not_found")
    assert [a["id"] for a in tenant.api.get("/api/trash").json()["assets"]] == [asset["id"]]
    _served_within(_bare(stack, asset), 404)
