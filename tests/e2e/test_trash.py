"""The trash and expiry (issue 47) over real processes, on both backends: what only the whole
stack shows. The rules (bounds, 413 on restore, who may act, validation) are tested in process
(services/metadata/tests/test_trash.py, services/edge/tests/api/test_authorization.py).

- delete → the public and signed URLs answer 404 within 5 s, and still after a scan passes (the
  trash's hold is not the scan's) → usedBytes down, trashedBytes up → restore → the same URLs
  answer 200 with the same SHA-256;
- an asset expires within two minutes of its expiresAt, with exactly one asset.expired event;
- emptying the trash, with edge SIGKILLed mid-purge and the purge called again, leaves no
  object without a row and no row without its object.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import httpx
import pytest

from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_testkit.store import stored_objects
from coffer_testkit.testing import metric
from coffer_testkit.webhooks import LOOPBACK_ENV, webhook_receiver

pytestmark = pytest.mark.e2e

ENV = {
    # Expiry is checked every second (with jitter 0.5-1.5 s) instead of 30 s: the two-minute
    # bound holds either way; the test finishes sooner.
    "COFFER_EDGE_EXPIRY_INTERVAL_SECONDS": "1",
    **LOOPBACK_ENV,
    "COFFER_EDGE_RATE_LIMIT": "100000/second",
}


def poll(check: Any, *, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return found


def edge_metric(stack: Any, name: str, label: str) -> float:
    return metric(stack.url("edge_internal") + "/metrics", name, label)


def sha(url: str) -> str | None:
    answer = httpx.get(url, timeout=30)
    return hashlib.sha256(answer.content).hexdigest() if answer.status_code == 200 else None


def test_trash_restore_expiry_and_a_killed_purge(own_stack_with: Any, admin_for: Any) -> None:
    with webhook_receiver() as receiver:
        stack = own_stack_with(**ENV)
        admin = admin_for(stack)
        org = admin("create-org", "--name", "Trashy")["id"]
        admin("set-trash-retention", "--org", org, "--days", "7")
        key = admin("create-key", "--org", org)["key"]
        api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=60)
        hook = api.post("/api/webhooks", json={"url": receiver.url + "/hook", "events": ["asset.expired"]})
        assert hook.status_code == 201, hook.text

        # Delete → 404 within 5 s → usage moves → restore → the same URLs, the same bytes.
        body = bytes(range(256)) * 400
        asset = api.post("/api/assets", files={"file": ("keep.bin", body)}).json()
        signed = api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": 3600}).json()["url"]
        digest = hashlib.sha256(body).hexdigest()
        assert sha(asset["publicUrl"]) == digest == sha(signed) == asset["sha256"]
        before = api.get("/api/usage").json()
        deleted_at = time.monotonic()
        assert api.delete(f"/api/assets/{asset['id']}").json() == {"success": True}
        poll(
            lambda: httpx.get(asset["publicUrl"]).status_code == 404 and httpx.get(signed).status_code == 404,
            timeout=5 - (time.monotonic() - deleted_at),
            what="the URLs still answer 5 s after the delete",
        )
        # A scan of it that passes now releases the scan's hold only: the trash's stays.
        token = (stack.data_dir / "secrets" / "internal_token").read_text().strip()
        passed = httpx.put(
            f"{stack.url('blob')}/internal/v1/held/{asset['key']}",
            json={"held": False},
            headers={"x-coffer-internal-token": token},
        )
        assert passed.status_code == 200, passed.text
        assert httpx.get(asset["publicUrl"]).status_code == 404 and httpx.get(signed).status_code == 404
        after = api.get("/api/usage").json()
        assert after["usedBytes"] == before["usedBytes"] - len(body)
        assert after["trashedBytes"] == before["trashedBytes"] + len(body) and after["trashedCount"] == 1
        listed = api.get("/api/trash").json()
        assert [a["id"] for a in listed["assets"]] == [asset["id"]] and listed["assets"][0][
            "reason"
        ] == "deleted"
        restored = api.post(f"/api/trash/{asset['id']}/restore")
        assert restored.status_code == 200, restored.text
        assert {k: restored.json()[k] for k in ("id", "key", "publicUrl")} == {
            k: asset[k] for k in ("id", "key", "publicUrl")
        }
        assert sha(asset["publicUrl"]) == digest == sha(signed)
        assert api.get("/api/usage").json()["usedBytes"] == before["usedBytes"]

        # Expiry: within two minutes of expiresAt, one asset.expired event. Set at upload an
        # hour ahead, then brought forward to 2 s from now by PATCH (a past expiresAt is 400, and
        # on a loaded machine an upload can take seconds).
        later = utcnow() + timedelta(hours=1)
        made = api.post(
            "/api/assets", files={"file": ("doomed.txt", b"bye")}, data={"expiresAt": isoformat(later)}
        )
        assert made.status_code == 201, made.text
        doomed = made.json()
        assert doomed["expiresAt"] == isoformat(later)
        expires = utcnow() + timedelta(seconds=2)
        moved = api.patch(f"/api/assets/{doomed['id']}", json={"expiresAt": isoformat(expires)})
        assert moved.status_code == 200 and moved.json()["expiresAt"] == isoformat(expires), moved.text
        soon = api.get("/api/assets", params={"expiresBefore": isoformat(expires + timedelta(seconds=1))})
        assert [a["id"] for a in soon.json()["assets"]] == [doomed["id"]]
        poll(
            lambda: api.get(f"/api/assets/{doomed['id']}").status_code == 404,
            timeout=120 + (expires - utcnow()).total_seconds(),
            what="the asset did not expire within two minutes",
        )
        assert (utcnow() - expires).total_seconds() < 120
        trashed = {a["id"]: a for a in api.get("/api/trash").json()["assets"]}
        assert trashed[doomed["id"]]["reason"] == "expired"
        assert poll(lambda: httpx.get(doomed["publicUrl"]).status_code == 404, timeout=5, what="still served")
        events = receiver.wait("/hook", 1, timeout=30)
        # Two more sweeps must not expire it again (each answered before the count moves).
        sweeps = edge_metric(stack, "coffer_expiry_sweeps_total", 'outcome="done"')
        poll(
            lambda: edge_metric(stack, "coffer_expiry_sweeps_total", 'outcome="done"') >= sweeps + 2,
            timeout=30,
            what="two more expiry sweeps never ran",
        )
        events = receiver.on("/hook")
        ids = {json.loads(e.body)["id"] for e in events}
        assert len(ids) == 1, f"{len(ids)} asset.expired events"
        assert json.loads(events[0].body)["data"]["asset"]["id"] == doomed["id"]

        # Emptying a full trash (two purge batches of TRASH_PURGE_BATCH = 100), edge SIGKILLed
        # mid-purge, then called again.
        with ThreadPoolExecutor(4) as pool:
            made = list(
                pool.map(
                    lambda i: api.post("/api/assets", files={"file": (f"p{i}.bin", b"p" * 2000)}).json()[
                        "id"
                    ],
                    range(150),
                )
            )
            deleted = pool.map(lambda asset_id: api.delete(f"/api/assets/{asset_id}").status_code, made)
            assert set(deleted) == {200}
        objects_before = len(stored_objects(stack, org))

        def purge() -> None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.delete(f"{stack.edge_url}/api/trash", headers={"x-api-key": key}, timeout=60)

        worker = threading.Thread(target=purge)
        worker.start()
        # Kill once the purge has committed its batch and begun deleting objects.
        poll(
            lambda: len(stored_objects(stack, org)) < objects_before, timeout=60, what="the purge never began"
        )
        stack.kill("edge")
        worker.join(timeout=60)
        assert len(stored_objects(stack, org)) > objects_before - 100, "the kill came after the batch"
        stack.start("edge")
        api.close()
        api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=60)
        rounds = 0
        while (batch := api.delete("/api/trash").json())["remaining"] > 0 or batch["purged"] > 0:
            rounds += 1
            assert rounds < 10, batch
        assert api.get("/api/trash").json()["total"] == 0
        rows = {a["id"]: a for a in api.get("/api/assets", params={"limit": 100}).json()["assets"]}
        stored = stored_objects(stack, org)
        assert set(stored) == set(rows), (
            f"objects without a row: {sorted(set(stored) - set(rows))}; "
            f"rows without an object: {sorted(set(rows) - set(stored))}"
        )
        usage = api.get("/api/usage").json()
        assert (usage["trashedBytes"], usage["trashedCount"]) == (0, 0)
        assert usage["usedBytes"] == sum(a["size"] for a in rows.values())
        api.close()
