"""Issue 50 over real processes on both backends: an asset's metadata and tags round-trip
through every upload path (the form, an upload token's form, tus) and PATCH, and filter the
listing; a value out of bounds is 400 naming the field; an uploaded JPEG gains its width,
height and placeholder within 5 s, announced by ``asset.updated`` at a webhook receiver, and a
PDF gets none. (The rules themselves: services/metadata/tests/test_describe.py and
services/edge/tests/api/test_describe.py, in process.)"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import pyvips

from coffer_stack.stack import Stack
from coffer_testkit.testing import assert_error
from coffer_testkit.webhooks import LOOPBACK_ENV, Receiver, webhook_receiver

pytestmark = pytest.mark.e2e

ENV = {
    **LOOPBACK_ENV,
}
FACTS_WITHIN = 5.0  # seconds (issue 50)
META = {"product": "sku-1", "rank": 3, "live": True}
TUS = {"Tus-Resumable": "1.0.0"}


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, backend: str, backend_env: Any, running_stack_factory: Any
) -> Iterator[Stack]:
    with running_stack_factory(tmp_path_factory.mktemp(f"describe-{backend}"), **backend_env(), **ENV) as s:
        yield s


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver() as state:
        yield state


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def jpeg(width: int, height: int) -> bytes:
    image = pyvips.Image.black(width, height, bands=3).new_from_image([30, 120, 200])
    return bytes(image.copy(interpretation="srgb").jpegsave_buffer(Q=90))


def facts_of(api: httpx.Client, asset_id: str, within: float) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while (seen := api.get(f"/api/assets/{asset_id}").json())["image"] is None:
        assert time.monotonic() < deadline, f"no image facts within {within} s"
        time.sleep(0.05)
    return seen  # type: ignore[no-any-return]


def test_metadata_and_tags_round_trip_and_a_jpeg_gains_its_facts(
    stack: Stack, tenant: Any, receiver: Receiver
) -> None:
    api = tenant.api
    hook = api.post("/api/webhooks", json={"url": receiver.url + "/facts", "events": ["asset.updated"]})
    assert hook.status_code == 201, hook.text
    # The first image after blob starts waits for its worker pool's start (not bounded here).
    warm = api.post("/api/assets", files={"file": ("w.jpg", jpeg(8, 8), "image/jpeg")}).json()
    facts_of(api, warm["id"], 60)

    form = api.post(
        "/api/assets",
        files={"file": ("a.txt", b"a", "text/plain")},
        data={"metadata": json.dumps(META), "tags": "red,big"},
    )
    assert form.status_code == 201, form.text
    token = api.post("/api/upload-tokens", json={}).json()
    parts = urlsplit(token["url"])
    with httpx.Client(base_url=stack.edge_url) as browser:
        by_token = browser.post(
            f"{parts.path}?{parts.query}", files={"file": ("b.txt", b"b", "text/plain")}, data={"tags": "red"}
        )
    assert by_token.status_code == 201, by_token.text
    entries = f"filename {b64('c.txt')},metadata {b64(json.dumps(META))},tags {b64('blue')}"
    created = api.post("/api/uploads/tus", headers={**TUS, "Upload-Length": "1", "Upload-Metadata": entries})
    assert created.status_code == 201, created.text
    done = api.patch(
        urlsplit(created.headers["location"]).path,
        content=b"c",
        headers={**TUS, "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"},
    )
    assert done.status_code == 204, done.text
    ids = [form.json()["id"], by_token.json()["id"], done.headers["coffer-asset-id"]]
    seen = [api.get(f"/api/assets/{i}").json() for i in ids]
    assert [(a["metadata"], a["tags"]) for a in seen] == [
        (META, ["big", "red"]),
        ({}, ["red"]),
        (META, ["blue"]),
    ]
    patched = api.patch(
        f"/api/assets/{ids[1]}", json={"metadata": {"product": "sku-2"}, "tags": {"remove": ["red"]}}
    )
    assert (patched.json()["metadata"], patched.json()["tags"]) == ({"product": "sku-2"}, [])
    found = api.get("/api/assets", params={"tag": "red", "meta[product]": "sku-1"}).json()
    assert [a["id"] for a in found["assets"]] == [ids[0]] and found["total"] == 1
    refused = api.post("/api/assets", files={"file": ("x.txt", b"x")}, data={"tags": "no space"})
    assert assert_error(refused, 400, "invalid_request")["details"]["field"] == "tags[0]"

    started = time.monotonic()
    photo = api.post("/api/assets", files={"file": ("p.jpg", jpeg(300, 200), "image/jpeg")}).json()
    pdf = api.post("/api/assets", files={"file": ("d.pdf", b"%PDF-1.4\n", "application/pdf")}).json()
    assert photo["image"] is None  # computed after the upload, never on its path
    shown = facts_of(api, photo["id"], FACTS_WITHIN - (time.monotonic() - started))
    assert shown["image"] == {"width": 300, "height": 200, "orientation": 1} and shown["placeholder"]
    delivered = [json.loads(r.body) for r in receiver.wait("/facts", 3, timeout=30)]
    announced = [d["data"]["asset"] for d in delivered if d["data"]["asset"]["id"] == photo["id"]]
    assert [(a["image"], a["placeholder"]) for a in announced] == [(shown["image"], shown["placeholder"])]
    assert api.get(f"/api/assets/{pdf['id']}").json()["image"] is None
