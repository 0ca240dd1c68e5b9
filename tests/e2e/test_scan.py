"""Malware scanning (issue 48) over real processes on both backends and a real clamd: the
68-byte EICAR file in ``block`` mode goes pending → infected within 30 s, its public and signed
URLs answer 404 throughout, signing it is refused, and ``asset.infected`` reaches a webhook
receiver; a clean file goes clean and is served; with clamd stopped, a scan becomes
``unscanned`` after its retries, and the metric counts it.

clamd loads only a signature database made for the test (coffer_testkit.clamd: the EICAR
file's MD5 in an ``.hdb``), since signature downloads are not reachable here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coffer_stack.stack import Stack
from coffer_testkit import testing
from coffer_testkit.clamd import EICAR, SIGNATURE, Clamd, running_clamd
from coffer_testkit.testing import assert_error
from coffer_testkit.webhooks import LOOPBACK_ENV, Receiver, webhook_receiver

pytestmark = pytest.mark.e2e

SCAN_ENV = {
    **LOOPBACK_ENV,
    # Retries within a test's patience: 0.2 s, then 0.4 s, then unscanned.
    # (edge's internal tuning, coffer_edge.config.EdgeTuning, as JSON).
    "COFFER_EDGE_TUNING": '{"scan_retries": 2, "scan_backoff_seconds": 0.2}',
    "COFFER_BLOB_SCAN_TIMEOUT_SECONDS": "10",
}
INFECTED_WITHIN = 30.0  # seconds (issue 48)
CLEAN = b"an ordinary file, nothing to see\n" * 1000


@pytest.fixture(scope="module")
def clamd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clamd]:
    with running_clamd(tmp_path_factory.mktemp("clamd")) as running:
        yield running


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    backend: str,
    backend_env: Any,
    running_stack_factory: Any,
    clamd: Clamd,
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp(f"scan-{backend}")
    with running_stack_factory(root, **backend_env(), **SCAN_ENV, COFFER_BLOB_CLAMD_URL=clamd.url) as s:
        yield s


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver() as state:
        yield state


def upload(api: httpx.Client, name: str, data: bytes) -> dict[str, Any]:
    response = api.post("/api/assets", files={"file": (name, data, "text/plain")})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def scan_mode(admin: Any, tenant: Any, mode: str) -> None:
    admin("set-ingest", "--org", tenant.org_id, "--scan", mode)
    # edge caches the principal for up to 5 s: wait until an upload is queued for scanning.
    deadline = time.monotonic() + 6
    while upload(tenant.api, "probe.txt", b"probe")["scanStatus"] != "pending":
        assert time.monotonic() < deadline, "the scan mode did not reach edge"
        time.sleep(0.2)


def status_within(api: httpx.Client, asset_id: str, wanted: str, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while (asset := api.get(f"/api/assets/{asset_id}").json())["scanStatus"] != wanted:
        assert time.monotonic() < deadline, f"still {asset['scanStatus']} after {seconds} s"
        time.sleep(0.1)
    return asset  # type: ignore[no-any-return]


def blob_signed_url(stack: Stack, key: str) -> str:
    """A signed URL made by blob directly (edge refuses to sign a file that has not passed)."""
    token = (Path(stack.data_dir) / "secrets" / "internal_token").read_text().strip()
    answer = httpx.post(
        stack.url("blob") + "/internal/v1/sign",
        json={"key": key, "expiresIn": 600},
        headers={"x-coffer-internal-token": token},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["url"]  # type: ignore[no-any-return]


def metric(stack: Stack, name: str, label: str) -> float:
    """A sample of edge's metrics (its internal listener) whose labels include ``label``."""
    return testing.metric(stack.url("edge_internal") + "/metrics", name, label)


def test_eicar_in_block_mode_is_quarantined(
    stack: Stack, admin: Any, tenant: Any, receiver: Receiver
) -> None:
    api = tenant.api
    hook = api.post(
        "/api/webhooks", json={"url": receiver.url + "/scan", "events": ["asset.scanned", "asset.infected"]}
    )
    assert hook.status_code == 201, hook.text
    scan_mode(admin, tenant, "block")

    started = time.monotonic()
    asset = upload(api, "eicar.com.txt", EICAR)
    assert asset["size"] == 68 and asset["scanStatus"] == "pending"
    signed = blob_signed_url(stack, asset["key"])
    # Held from the start: never served while pending.
    assert_error(httpx.get(asset["publicUrl"]), 404, "not_found")
    assert httpx.get(signed).status_code == 404
    infected = status_within(api, asset["id"], "infected", INFECTED_WITHIN)
    assert time.monotonic() - started < INFECTED_WITHIN
    assert infected["scanSignature"].startswith(SIGNATURE)
    assert_error(httpx.get(asset["publicUrl"]), 404, "not_found")
    assert_error(httpx.get(signed), 404, "not_found")
    error = assert_error(api.get(f"/api/assets/{asset['id']}/url"), 409, "quarantined")
    assert error["details"]["signature"] == infected["scanSignature"]

    deliveries = [json.loads(r.body) for r in receiver.wait("/scan", 2 + 1)]  # (the probe's scan too)
    kinds = {(d["type"], d["data"]["asset"]["id"]) for d in deliveries}
    assert ("asset.infected", asset["id"]) in kinds and ("asset.scanned", asset["id"]) in kinds
    [event] = [d for d in deliveries if d["type"] == "asset.infected"]
    assert event["data"]["asset"]["scanSignature"] == infected["scanSignature"]

    # Deletable, as any asset.
    assert api.delete(f"/api/assets/{asset['id']}").status_code == 200

    # A clean file: held while pending, then clean and served, and signable. The hold follows
    # the recorded status (edge releases it once metadata says clean), a blob call later: polled.
    clean = upload(api, "notes.txt", CLEAN)
    status_within(api, clean["id"], "clean", INFECTED_WITHIN)
    deadline = time.monotonic() + 5
    while (served := httpx.get(clean["publicUrl"])).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (served.status_code, served.content) == (200, CLEAN)
    url = api.get(f"/api/assets/{clean['id']}/url")
    assert url.status_code == 200 and httpx.get(url.json()["url"]).content == CLEAN


def test_async_mode_serves_while_pending_and_quarantines_when_infected(admin: Any, tenant: Any) -> None:
    api = tenant.api
    scan_mode(admin, tenant, "async")
    asset = upload(api, "eicar.txt", EICAR)
    assert asset["scanStatus"] in ("pending", "infected")
    status_within(api, asset["id"], "infected", INFECTED_WITHIN)
    assert_error(httpx.get(asset["publicUrl"]), 404, "not_found")
    clean = upload(api, "fine.txt", CLEAN)
    status_within(api, clean["id"], "clean", INFECTED_WITHIN)
    assert httpx.get(clean["publicUrl"]).content == CLEAN


def test_a_stopped_scanner_ends_unscanned_after_the_retries(
    stack: Stack, clamd: Clamd, admin: Any, tenant: Any
) -> None:
    api = tenant.api
    scan_mode(admin, tenant, "block")
    before = metric(stack, "coffer_scan_results_total", 'status="unscanned"')
    clamd.stop()
    try:
        asset = upload(api, "late.txt", CLEAN)
        unscanned = status_within(api, asset["id"], "unscanned", 20)
        assert unscanned["scanSignature"] is None
        # Never silently passed: under block it stays held back and unsignable.
        assert_error(httpx.get(asset["publicUrl"]), 404, "not_found")
        assert_error(api.get(f"/api/assets/{asset['id']}/url"), 409, "not_scanned")
        assert metric(stack, "coffer_scan_results_total", 'status="unscanned"') >= before + 1
    finally:
        clamd.start()
