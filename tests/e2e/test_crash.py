"""Crash consistency: SIGKILL blob, metadata or edge mid-upload and mid-delete, restart, sweep,
and find no bytes without a row and no row without bytes."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from coffer_testkit.store import stored_objects
from coffer_testkit.testing import multipart_stream

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024


def slow(body: Iterator[bytes], delay: float, started: threading.Semaphore) -> Iterator[bytes]:
    """Send the body in pieces with pauses, so uploads are in flight when a process dies;
    ``started`` is released once the first piece is on its way."""
    first = True
    for chunk in body:
        if first:
            started.release()
            first = False
        for i in range(0, len(chunk), 256 * 1024):
            yield chunk[i : i + 256 * 1024]
            time.sleep(delay)


def all_assets(api: httpx.Client) -> dict[str, dict]:
    found: dict[str, dict] = {}
    offset = 0
    while True:
        page = api.get("/api/assets", params={"limit": 100, "offset": offset}).json()
        found.update({a["id"]: a for a in page["assets"]})
        offset += 100
        if offset >= page["total"]:
            return found


def test_kill_services_mid_traffic_then_sweep_converges(own_stack, admin_for) -> None:
    admin = admin_for(own_stack)
    org = admin("create-org", "--name", "Crashy")["id"]
    key = admin("create-key", "--org", org)["key"]
    headers = {"x-api-key": key}
    api = httpx.Client(base_url=own_stack.edge_url, headers=headers, timeout=60)
    existing = [
        api.post("/api/assets", files={"file": (f"e{i}.bin", b"e" * 50_000)}).json()["id"] for i in range(24)
    ]
    rng = random.Random(7)

    def uploader(n: int) -> None:
        ctype, body = multipart_stream(size=rng.randint(1, 4) * MIB, filename=f"u{n}.bin")
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                f"{own_stack.edge_url}/api/assets",
                content=slow(body, 0.02, in_flight),
                headers={**headers, "content-type": ctype},
                timeout=30,
            )

    def deleter(asset_id: str) -> None:
        time.sleep(rng.uniform(0, 0.2))  # spread the deletes around the kill
        with contextlib.suppress(httpx.HTTPError):
            httpx.delete(f"{own_stack.edge_url}/api/assets/{asset_id}", headers=headers, timeout=30)

    for round_, victim in enumerate(["blob", "metadata", "edge", "blob", "metadata", "edge"]):
        workers = [threading.Thread(target=uploader, args=(round_ * 10 + i,)) for i in range(6)]
        workers += [threading.Thread(target=deleter, args=(existing.pop(),)) for _ in range(4)]
        in_flight = threading.Semaphore(0)
        for w in workers:
            w.start()
        # Kill once uploads are under way (each has sent its first piece), not after a guess.
        for _ in range(3):
            assert in_flight.acquire(timeout=30), "uploads did not start"
        time.sleep(rng.uniform(0, 0.2))
        own_stack.kill(victim)
        for w in workers:
            w.join(timeout=60)
        own_stack.start(victim)

    sweep = subprocess.run(
        [sys.executable, "-m", "coffer_edge.cli", "sweep", "--intent-age", "0", "--tombstone-age", "0"],
        env=own_stack.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sweep.returncode == 0, sweep.stderr
    print("sweep:", sweep.stdout.strip())
    again = json.loads(
        subprocess.run(
            [sys.executable, "-m", "coffer_edge.cli", "sweep", "--intent-age", "0", "--tombstone-age", "0"],
            env=own_stack.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    assert again == {"intents": 0, "tombstones": 0, "failed": 0, "uploads": 0}

    rows = all_assets(api)
    stored = stored_objects(own_stack, org)
    assert set(stored) == set(rows), (
        f"bytes without a row: {sorted(set(stored) - set(rows))}; "
        f"rows without bytes: {sorted(set(rows) - set(stored))}"
    )
    for asset_id, asset in rows.items():
        files = {n: size for n, size in stored[asset_id].items() if not n.startswith("%meta.")}
        assert files == {asset["key"].split("/", 2)[2]: asset["size"]}, (asset, stored[asset_id])
        assert httpx.get(asset["publicUrl"]).status_code == 200
    # Usage agrees with the rows: exactly the remaining quota can still be used.
    total = sum(a["size"] for a in rows.values())
    admin("set-quota", "--org", org, "--quota-bytes", str(total + 10))
    api.close()
    # A new key: edge has no cached principal (with the old quota) for it, so no waiting.
    fresh = admin("create-key", "--org", org)["key"]
    api = httpx.Client(base_url=own_stack.edge_url, headers={"x-api-key": fresh}, timeout=60)
    assert api.post("/api/assets", files={"file": ("fits.bin", b"x" * 10)}).status_code == 201
    assert api.post("/api/assets", files={"file": ("over.bin", b"x")}).status_code == 413
    api.close()
