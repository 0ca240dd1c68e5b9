"""Resumable uploads (tus, CONTRACT §9) over real processes, on both backends: tus clients no one
here wrote (tus-js-client under Node, tuspy) killed or stopped mid-upload and resumed by a fresh
client; two edges and two blobs taking turns, one blob SIGKILLed mid-chunk; termination and
expiry leaving no part file, tail or multipart upload behind and the quota as it was."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
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


# -- issue 44: capabilities die with their authority, reservations cannot be squatted --------


def _token_upload(stack: Stack, key: str, length: int, org: str | None = None) -> str:
    """An upload created with an upload token that ``key`` minted: its capability URL."""
    headers = {"x-api-key": key, **({"x-organization-id": org} if org else {})}
    minted = httpx.post(f"{stack.edge_url}/api/upload-tokens", headers=headers, json={})
    assert minted.status_code == 201, minted.text
    created = httpx.post(
        f"{stack.edge_url}/api/uploads/tus?token={minted.json()['token']}",
        headers={**TUS, "Upload-Length": str(length), "Upload-Metadata": "filename YS5iaW4="},
    )
    assert created.status_code == 201, created.text
    return created.headers["location"]  # type: ignore[no-any-return]


def _patch(url: str, offset: int, data: bytes, **headers: str) -> httpx.Response:
    sent = {**TUS, "Upload-Offset": str(offset), "Content-Type": "application/offset+octet-stream", **headers}
    return httpx.patch(url, headers=sent, content=data, timeout=60)


def _poll(check: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.2)
    return value


# Which capabilities die with a key is edge's and auth's rule; the upload's bytes and reservation
# are released on both backends by test_expired_uploads_are_swept_bytes_reservation_and_all.
@pytest.mark.parametrize("backend", ["embedded"], indirect=True, scope="session")
def test_a_deleted_key_takes_its_uploads_capabilities_along(
    stack: Stack, new_tenant: Any, admin: Any
) -> None:
    """Issue 44: half an upload through a token minted by key K, K deleted: the rest sent with
    the capability creates nothing, and the upload's bytes and reservation are released."""
    tenant = new_tenant(quota_bytes=30 * MIB)
    minter = admin("create-key", "--org", tenant.org_id, "--name", "minter")
    data = os.urandom(12 * MIB)
    url = _token_upload(stack, minter["key"], len(data))
    assert _patch(url, 0, data[: 6 * MIB]).status_code == 204
    asset_id = _asset_of(stack, url)
    assert stored_objects(stack, tenant.org_id).get(asset_id)
    admin("delete-key", minter["id"])
    # Within the 5 s that keys promise, the capability stops working.
    _poll(lambda: head(url).status_code != 200, timeout=15)
    rest = _patch(url, 6 * MIB, data[6 * MIB :])
    assert rest.status_code in (401, 404), rest.text
    assert tenant.api.get("/api/assets").json()["total"] == 0
    assert stored_objects(stack, tenant.org_id).get(asset_id) is None
    assert _create(stack, tenant.key, 30 * MIB)  # the reservation is free again


# Which capabilities die with a key is edge's and auth's rule; the upload's bytes and reservation
# are released on both backends by test_expired_uploads_are_swept_bytes_reservation_and_all.
@pytest.mark.parametrize("backend", ["embedded"], indirect=True, scope="session")
def test_the_sweeper_ends_uploads_whose_minter_is_gone(own_stack_with: Any, admin_for: Any) -> None:
    """Nobody calls on the uploads again: edge's sweeper terminates those whose minting key was
    deleted, or whose user left the organization, and their reservations come back."""
    stack = own_stack_with(COFFER_SWEEP_INTERVAL_SECONDS="0.5")
    admin = admin_for(stack)
    org = admin("create-org", "--name", "Swept", "--quota-bytes", str(20 * MIB))["id"]
    key = admin("create-key", "--org", org)
    user = admin(
        "create-user",
        "--email",
        f"u{os.urandom(4).hex()}@example.com",
        "--password",
        "pw-" + secrets.token_urlsafe(16),  # never "-…", which argparse takes for an option
    )
    admin("add-member", "--org", org, "--user", user["id"])
    personal = admin("create-key", "--org", org, "--user", user["id"])
    keeper = admin("create-key", "--org", org)["key"]
    by_key = _token_upload(stack, key["key"], 8 * MIB)
    by_member = _token_upload(stack, personal["key"], 8 * MIB, org)
    for url in (by_key, by_member):
        assert _patch(url, 0, os.urandom(MIB)).status_code == 204
    untouched = _token_upload(stack, keeper, 2 * MIB)  # its minter stays
    assets = {_asset_of(stack, u) for u in (by_key, by_member)}
    admin("delete-key", key["id"])
    admin("remove-member", "--org", org, "--user", user["id"])
    _poll(lambda: not assets & set(stored_objects(stack, org)))
    listed = httpx.get(f"{stack.edge_url}/api/uploads", headers={"x-api-key": keeper}).json()
    assert [u["id"] for u in listed["uploads"]] == [urlsplit(untouched).path.rsplit("/", 1)[1]]
    assert _create(stack, keeper, 18 * MIB)  # 16 MiB released; 2 MiB still held
    assert head(untouched).status_code == 200


def test_a_one_shot_upload_honours_a_resumable_reservation(stack: Stack, new_tenant: Any) -> None:
    """Issue 44: with a resumable upload of half the quota and a byte reserved, a POST
    /api/assets of the same size is refused (413), and the resumable upload completes."""
    quota = 8 * MIB
    tenant = new_tenant(quota_bytes=quota)
    size = quota // 2 + 1
    url = _create(stack, tenant.key, size)
    one_shot = tenant.api.post(
        "/api/assets", files={"file": ("f.bin", os.urandom(size), "application/octet-stream")}
    )
    assert one_shot.status_code == 413, one_shot.text
    assert one_shot.json()["error"]["code"] == "quota_exceeded"
    data = os.urandom(size)
    done = _patch(url, 0, data, **{"x-api-key": tenant.key})
    assert done.status_code == 204, done.text
    assert_stored(tenant.api, done.headers["coffer-asset-id"], data)
    assert tenant.api.get("/api/usage").json()["usedBytes"] == size


def test_idle_uploads_give_their_reservation_and_place_back(own_stack_with: Any, admin_for: Any) -> None:
    """Issue 44: creations with no bytes hold the quota and the places in flight only until
    they have been idle for COFFER_METADATA_TUS_IDLE_SECONDS; a squatter's next PATCH asks
    again (413 when its length no longer fits); the organization sees and ends its uploads."""
    stack = own_stack_with(COFFER_METADATA_TUS_IDLE_SECONDS="2", COFFER_METADATA_MAX_UPLOADS_IN_FLIGHT="3")
    admin = admin_for(stack)
    org = admin("create-org", "--name", "Squatted", "--quota-bytes", str(20 * MIB))["id"]
    key = admin("create-key", "--org", org)["key"]
    api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=60)
    squatters = [_token_upload(stack, key, 9 * MIB), _token_upload(stack, key, 9 * MIB)]
    _token_upload(stack, key, 1)
    upload = {"file": ("f.bin", os.urandom(5 * MIB), "application/octet-stream")}
    # 19 MiB held and 3 places taken: no upload goes in.
    assert api.post("/api/assets", files=upload).status_code in (413, 429)
    full = httpx.post(
        f"{stack.edge_url}/api/uploads/tus",
        headers={**TUS, "x-api-key": key, "Upload-Length": "1", "Upload-Metadata": "filename YS5iaW4="},
    )
    assert full.status_code == 429, full.text
    # Idle: they hold nothing, and uploads go in again.
    _poll(lambda: all(u["reservedBytes"] == 0 for u in api.get("/api/uploads").json()["uploads"]))
    stored = api.post(
        "/api/assets", files={"file": ("f.bin", os.urandom(12 * MIB), "application/octet-stream")}
    )
    assert stored.status_code == 201, stored.text
    # A squatter's next write: its 9 MiB no longer fit beside the 12 stored.
    assert_error_code(_patch(squatters[0], 0, b"x"), 413, "quota_exceeded")
    # The organization sees its open uploads and ends them.
    listed = api.get("/api/uploads").json()
    assert listed["total"] == 3
    for item in listed["uploads"]:
        assert api.delete(f"/api/uploads/{item['id']}").status_code == 200
    assert api.get("/api/uploads").json()["total"] == 0
    assert head(squatters[1]).status_code == 404
    api.close()


def assert_error_code(answer: httpx.Response, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
