"""Resumable uploads (tus, CONTRACT §9) over real processes, on both backends: tus clients no one
here wrote (tus-js-client under Node, tuspy) killed or stopped mid-upload and resumed by a fresh
client; two edges and two blobs taking turns, one blob SIGKILLed mid-chunk; termination and
expiry leaving no part file, tail or multipart upload behind and the quota as it was."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import create_engine, text
from tusclient import client as tus

from coffer_stack.stack import Ports, Stack
from coffer_testkit.store import stored_objects
from coffer_testkit.testing import free_port

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
TUS = {"Tus-Resumable": "1.0.0"}
TUSJS = Path(__file__).parent / "tusjs"


@pytest.fixture(scope="session")
def tusjs() -> Path:
    """tus-js-client from the npm registry, as the lock file pins it (make test installs it)."""
    if not (TUSJS / "node_modules" / "tus-js-client").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=TUSJS, check=True)
    return TUSJS / "upload.mjs"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "journey.bin"
    path.write_bytes(os.urandom(20 * MIB + 12345))
    return path


def node(script: Path, **options: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["node", str(script), json.dumps(options)], stdout=subprocess.PIPE, text=True, cwd=script.parent
    )


def lines(proc: subprocess.Popen[str]) -> Iterator[dict[str, Any]]:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield json.loads(line)


def head(url: str, **headers: str) -> httpx.Response:
    return httpx.head(url, headers={**TUS, **headers})


def assert_stored(api: httpx.Client, asset_id: str, data: bytes) -> dict[str, Any]:
    asset = api.get(f"/api/assets/{asset_id}").json()
    assert asset["size"] == len(data) and asset["sha256"] == hashlib.sha256(data).hexdigest()
    assert httpx.get(asset["publicUrl"]).content == data
    return asset  # type: ignore[no-any-return]


def only_the_file(stack: Stack, org_id: str, asset_id: str) -> None:
    """The store holds the asset's file and nothing else of the upload (no part file, tail or
    multipart upload)."""
    stored = stored_objects(stack, org_id).get(asset_id, {})
    leftovers = {name for name in stored if "%" in name and not name.startswith("%meta.")}
    assert leftovers == set()


def test_tus_js_client_killed_mid_upload_resumes_with_a_fresh_client(
    stack: Stack, new_tenant: Any, tusjs: Path, source: Path
) -> None:
    tenant = new_tenant()
    data = source.read_bytes()
    common = {"file": str(source), "chunkSize": 3 * MIB + 1, "headers": {"x-api-key": tenant.key}}
    first = node(
        tusjs, endpoint=f"{stack.edge_url}/api/uploads/tus", metadata={"filename": "journey.bin"}, **common
    )
    url = None
    for message in lines(first):
        url = message.get("url", url)
        if message.get("offset", 0) >= 6 * MIB:
            first.send_signal(signal.SIGKILL)  # mid-upload, with no chance to tidy up
            break
    first.wait()
    assert url is not None
    stopped = int(head(url, **{"x-api-key": tenant.key}).headers["upload-offset"])
    assert 6 * MIB <= stopped < len(data)

    second = node(tusjs, uploadUrl=url, **common)
    offsets = []
    for message in lines(second):
        assert "error" not in message, message
        if "offset" in message:
            offsets.append(message["offset"])
        if "assetId" in message:
            asset_id = message["assetId"]
    assert second.wait() == 0
    assert offsets[0] > stopped  # it went on from where the server was, not from zero
    assert_stored(tenant.api, asset_id, data)
    only_the_file(stack, tenant.org_id, asset_id)


def test_tuspy_stopped_and_resumed_by_a_fresh_client(stack: Stack, new_tenant: Any, source: Path) -> None:
    tenant = new_tenant()
    data = source.read_bytes()
    endpoint = f"{stack.edge_url}/api/uploads/tus"
    with source.open("rb") as stream:
        uploader = tus.TusClient(endpoint, headers={"x-api-key": tenant.key}).uploader(
            file_stream=stream, chunk_size=5 * MIB + 7, metadata={"filename": "t.bin"}, upload_checksum=True
        )
        uploader.upload(stop_at=11 * MIB)
    with source.open("rb") as stream:
        fresh = tus.TusClient(endpoint, headers={"x-api-key": tenant.key})
        resumed = fresh.uploader(file_stream=stream, url=uploader.url, chunk_size=4 * MIB - 3)
        assert resumed.offset == 11 * MIB
        resumed.upload()
    answer = head(uploader.url, **{"x-api-key": tenant.key})
    asset = assert_stored(tenant.api, answer.headers["coffer-asset-id"], data)
    only_the_file(stack, tenant.org_id, asset["id"])


@pytest.fixture
def second_edge_and_blob(stack: Stack, tmp_path: Path) -> Iterator[Stack]:
    """Another edge and another blob over the same databases and store as ``stack``'s: a second
    replica of each (this edge calls this blob, and the shared auth and metadata)."""
    ports = Ports(
        edge=free_port(),
        cdn=free_port(),
        auth=stack.ports.auth,
        metadata=stack.ports.metadata,
        blob=free_port(),
        edge_internal=free_port(),
        dispatcher=free_port(),
    )
    other = Stack(data_dir=stack.data_dir, ports=ports, extra_env=stack.extra_env, log_dir=tmp_path / "logs")
    other.start("blob", "edge")
    try:
        yield other
    finally:
        other.stop()


def test_replicas_take_turns_and_a_blob_killed_mid_chunk_loses_nothing(
    stack: Stack, second_edge_and_blob: Stack, new_tenant: Any
) -> None:
    tenant = new_tenant()
    other = second_edge_and_blob
    data = os.urandom(23 * MIB + 5)
    key = {"x-api-key": tenant.key}
    created = httpx.post(
        f"{stack.edge_url}/api/uploads/tus",
        headers={
            **TUS,
            **key,
            "Upload-Length": str(len(data)),
            "Upload-Metadata": "filename cmVwbGljYXMuYmlu",
        },
    )
    assert created.status_code == 201, created.text
    path = urlsplit(created.headers["location"]).path
    edges = [stack.edge_url, other.edge_url]

    def patch(edge: str, offset: int, body: Any) -> httpx.Response:
        headers = {
            **TUS,
            **key,
            "Upload-Offset": str(offset),
            "Content-Type": "application/offset+octet-stream",
        }
        return httpx.patch(edge + path, headers=headers, content=body, timeout=60)

    # Chunks alternate between the replicas (S3: parts written by one blob, continued by another).
    offset, size = 0, 3 * MIB + 11
    for turn in range(4):
        answer = patch(edges[turn % 2], offset, data[offset : offset + size])
        assert answer.status_code == 204, answer.text
        offset = int(answer.headers["upload-offset"])
    assert offset == 4 * size

    # The second blob dies mid-chunk: the chunk it was writing counts for nothing.
    halfway, go = threading.Event(), threading.Event()

    def held(chunk: bytes) -> Iterator[bytes]:
        for i in range(0, len(chunk), 512 * 1024):
            if i == 2 * MIB:
                halfway.set()
                go.wait(30)
            yield chunk[i : i + 512 * 1024]

    answers: list[httpx.Response | Exception] = []

    def send() -> None:
        try:
            answers.append(patch(other.edge_url, offset, held(data[offset : offset + 6 * MIB])))
        except httpx.HTTPError as exc:
            answers.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    assert halfway.wait(30)
    other.kill("blob")
    go.set()
    sender.join(60)
    assert answers and (isinstance(answers[0], Exception) or answers[0].status_code >= 500), answers
    # The first edge tells the offset, and finishes the upload from it.
    offset = _offset_when_free(stack.edge_url + path, key)
    assert offset == 4 * size
    answer = patch(stack.edge_url, offset, data[offset:])
    assert answer.status_code == 204, answer.text
    asset = assert_stored(tenant.api, answer.headers["coffer-asset-id"], data)
    only_the_file(stack, tenant.org_id, asset["id"])


def _offset_when_free(url: str, key: dict[str, str], timeout: float = 45) -> int:
    """The upload's offset, once no request holds it (a dead writer's lease runs out)."""
    deadline = time.monotonic() + timeout
    while True:
        probe = httpx.patch(
            url,
            headers={**TUS, **key, "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"},
            content=b"",
        )
        if probe.status_code == 409:
            return int(probe.json()["error"]["details"]["offset"])
        assert probe.status_code == 423, probe.text
        assert time.monotonic() < deadline, "the upload stayed locked"
        time.sleep(0.2)


def _create(stack: Stack, key: str, length: int) -> str:
    answer = httpx.post(
        f"{stack.edge_url}/api/uploads/tus",
        headers={
            **TUS,
            "x-api-key": key,
            "Upload-Length": str(length),
            "Upload-Metadata": "filename YS5iaW4=",
        },
    )
    assert answer.status_code == 201, answer.text
    return answer.headers["location"]  # type: ignore[no-any-return]


def _fill(url: str, key: str, data: bytes) -> None:
    """Write ``data`` from offset 0 in two chunks: past one S3 part, and a tail below one."""
    offset = 0
    for chunk in (data[: 9 * MIB], data[9 * MIB :]):
        answer = httpx.patch(
            url,
            headers={
                **TUS,
                "x-api-key": key,
                "Upload-Offset": str(offset),
                "Content-Type": "application/offset+octet-stream",
            },
            content=chunk,
            timeout=60,
        )
        assert answer.status_code == 204, answer.text
        offset += len(chunk)


def _asset_of(stack: Stack, upload_url: str) -> str:
    upload_id = urlsplit(upload_url).path.rsplit("/", 1)[1]
    url = stack.extra_env.get("COFFER_METADATA_DATABASE_URL") or f"sqlite:///{stack.data_dir / 'metadata.db'}"
    engine = create_engine(url)
    with engine.connect() as conn:
        asset_id = conn.execute(
            text("SELECT asset_id FROM tus_uploads WHERE id = :id"), {"id": upload_id}
        ).scalar()
    engine.dispose()
    return str(asset_id)


def test_termination_leaves_nothing_and_gives_the_quota_back(stack: Stack, new_tenant: Any) -> None:
    tenant = new_tenant(quota_bytes=30 * MIB)
    url = _create(stack, tenant.key, 12 * MIB)
    asset_id = _asset_of(stack, url)
    _fill(url, tenant.key, os.urandom(11 * MIB))  # one byte short of complete
    assert stored_objects(stack, tenant.org_id).get(asset_id)  # part file, or parts and a tail
    gone = httpx.delete(url, headers={**TUS, "x-api-key": tenant.key})
    assert gone.status_code == 204
    assert stored_objects(stack, tenant.org_id).get(asset_id) is None
    assert head(url, **{"x-api-key": tenant.key}).status_code == 404
    assert _create(stack, tenant.key, 30 * MIB)  # the whole quota is free again


def test_expired_uploads_are_swept_bytes_reservation_and_all(own_stack_with: Any, admin_for: Any) -> None:
    stack = own_stack_with(COFFER_SWEEP_INTERVAL_SECONDS="0.5")
    admin = admin_for(stack)
    org = admin("create-org", "--name", "Expiring", "--quota-bytes", str(30 * MIB))["id"]
    key = admin("create-key", "--org", org)["key"]
    url = _create(stack, key, 12 * MIB)
    asset_id = _asset_of(stack, url)
    _fill(url, key, os.urandom(11 * MIB))
    # (HEAD waits for the last chunk's record, which would move the expiry again.)
    assert head(url, **{"x-api-key": key}).headers["upload-offset"] == str(11 * MIB)
    # 24 h pass (the expiry, moved into the past behind the API's back).
    db = stack.extra_env.get("COFFER_METADATA_DATABASE_URL") or f"sqlite:///{stack.data_dir / 'metadata.db'}"
    engine = create_engine(db)
    with engine.begin() as conn:
        conn.execute(text("UPDATE tus_uploads SET expires_at = '2000-01-01 00:00:00'"))
        conn.execute(text("UPDATE upload_intents SET expires_at = '2000-01-01 00:00:00'"))
    engine.dispose()
    assert head(url, **{"x-api-key": key}).status_code == 404
    deadline = time.monotonic() + 30
    while stored_objects(stack, org).get(asset_id) is not None:
        assert time.monotonic() < deadline, stored_objects(stack, org)
        time.sleep(0.2)
    assert _create(stack, key, 30 * MIB)
