"""Two replicas of every service over one PostgreSQL, one S3 bucket and one Redis (issue 49), on
production's backend: each edge calls its own auth, metadata and blob, and each metadata has a
webhook dispatcher of its own, as pods of the chart would.

- uploads through both edges at once fill the organization's quota exactly, never past it;
- what one replica stored, the other lists and serves (its CDN too), byte for byte;
- one webhook endpoint gets every asset.created, whichever replica made it;
- a key deleted through one edge is refused by the other within 5 s;
- no process holds more PostgreSQL connections than its budget (docs/operations.md, "The
  connection budget"), and edge and blob hold none.

The budget's arithmetic is tested on the chart (tests/chart/test_render.py), the pools'
bounds in process (libs/kit/tests).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy.engine import make_url

from coffer_stack.stack import Ports, Stack
from coffer_testkit.testing import TEST_DATABASE_BUDGET, PeakConnections, assert_error, free_port
from coffer_testkit.webhooks import LOOPBACK_ENV, Receiver, webhook_receiver

from .conftest import zygote

# Production's backend: the embedded default is one machine's SQLite files, not shared.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.parametrize("backend", ["production"], indirect=True, scope="session"),
]
ENV = {
    # Each metadata's dispatcher in a process of its own, as the chart's webhooks pods.
    "COFFER_METADATA_WEBHOOKS_IN_PROCESS": "false",
    **LOOPBACK_ENV,
}
SIZE = 64 * 1024
FITS = 8  # files of SIZE in the organization's quota
# What each process may hold (TEST_DATABASE_BUDGET: the pool, the loop's keyed read and its
# hot write; a dispatcher at most 4 of the pool).
BUDGET = sum(int(v) for v in TEST_DATABASE_BUDGET.values())


@pytest.fixture
def replicas(own_stack_with: Any, tmp_path: Path) -> Iterator[tuple[Stack, Stack]]:
    first = own_stack_with(**ENV)
    second = Stack(
        data_dir=first.data_dir,  # the same secrets: replicas share them
        ports=Ports.drawn(free_port),
        extra_env=first.extra_env,
        log_dir=tmp_path / "second-logs",
        zygote=zygote(),
    )
    second.start()
    try:
        yield first, second
    finally:
        second.stop()


def _processes(stacks: tuple[Stack, Stack]) -> dict[str, int]:
    return {
        f"{name} {i + 1}": process.pid
        for i, stack in enumerate(stacks)
        for name, process in stack.processes.items()
    }


def _delivered_assets(receiver: Receiver) -> set[str]:
    return {json.loads(r.body)["data"]["asset"]["id"] for r in receiver.on("/hook")}


def _served_alike(replicas: tuple[Stack, Stack], apis: list[httpx.Client], created: dict[str, bytes]) -> None:
    """Each asset, by id through either edge, and its bytes from either CDN."""
    for asset_id, body in created.items():
        for api in apis:
            asset = api.get(f"/api/assets/{asset_id}").json()
            assert asset["sha256"] == hashlib.sha256(body).hexdigest()
            for stack in replicas:
                url = stack.public_cdn_url + urlsplit(asset["publicUrl"]).path
                assert httpx.get(url).content == body, url


def _deleted_on_one_refused_on_the_other(apis: list[httpx.Client], other: Stack) -> None:
    made = apis[0].post("/api/keys", json={"name": "short-lived"})
    assert made.status_code == 201, made.text
    short = {"x-api-key": made.json()["key"]}
    assert httpx.get(other.edge_url + "/api/folders", headers=short).status_code == 200  # cached there
    assert apis[0].delete(f"/api/keys/{made.json()['apiKey']['id']}").status_code == 200
    deleted_at = time.monotonic()
    while True:
        sent = time.monotonic()  # (when the request left: a loaded machine may answer late)
        if (answer := httpx.get(other.edge_url + "/api/folders", headers=short)).status_code != 200:
            break
        assert sent - deleted_at < 5.5, "the other edge still takes the deleted key after 5 s"
        time.sleep(0.1)
    assert_error(answer, 401, "unauthorized")


def _within_budget(peak: dict[str, int]) -> None:
    print(f"PostgreSQL connections at most, per process: {peak}")
    for name, most in peak.items():
        if name.startswith(("edge", "blob")):
            assert most == 0, (name, most)  # only auth and metadata talk to the database
        else:
            assert most <= BUDGET, (name, most)
    assert peak["metadata 1"] + peak["metadata 2"] > 0  # the sampler saw them


def test_two_replicas_of_every_service_share_one_postgresql(
    replicas: tuple[Stack, Stack], admin_for: Any
) -> None:
    first, second = replicas
    admin = admin_for(first)
    org = admin("create-org", "--name", "Replicated", "--quota-bytes", str(FITS * SIZE))["id"]
    key = admin("create-key", "--org", org, "--name", "both")["key"]
    apis = [
        httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=60) for stack in replicas
    ]
    port = make_url(first.extra_env["COFFER_METADATA_DATABASE_URL"]).port or 5432
    processes = _processes(replicas)
    assert len(processes) == 10, processes  # edge, auth, metadata, blob, dispatcher: twice

    with webhook_receiver() as receiver:
        endpoint = {"url": f"{receiver.url}/hook", "events": ["asset.created"]}
        hook = apis[1].post("/api/webhooks", json=endpoint)
        assert hook.status_code == 201, hook.text

        # Twice the quota's worth of uploads, through both edges at once.
        bodies = [os.urandom(SIZE) for _ in range(2 * FITS)]

        def upload(i: int) -> httpx.Response:
            return apis[i % 2].post("/api/assets", files={"file": (f"f{i}.bin", bodies[i])})

        with PeakConnections(processes, port) as connections, ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(upload, range(2 * FITS)))
            created = {a.json()["id"]: bodies[i] for i, a in enumerate(answers) if a.status_code == 201}
            # Both replicas read what both wrote, meanwhile.
            listings = list(pool.map(lambda api: api.get("/api/assets", params={"limit": 100}), apis))

        assert len(created) == FITS, [(a.status_code, a.text) for a in answers]
        for answer in answers:
            if answer.status_code != 201:
                assert_error(answer, 413, "quota_exceeded")
        for api in apis:
            usage = api.get("/api/usage").json()
            assert (usage["usedBytes"], usage["assetCount"]) == (FITS * SIZE, FITS), usage
        for listing in listings:
            assert listing.status_code == 200 and {a["id"] for a in listing.json()["assets"]} <= set(created)
        _served_alike(replicas, apis, created)

        # One endpoint, every event, whichever replica wrote it and whichever dispatcher sent it.
        deadline = time.monotonic() + 30
        while _delivered_assets(receiver) != set(created):
            assert time.monotonic() < deadline, f"{len(_delivered_assets(receiver))} of {FITS} delivered"
            time.sleep(0.05)

    _deleted_on_one_refused_on_the_other(apis, second)
    for api in apis:
        api.close()
    _within_budget(connections.peak)
