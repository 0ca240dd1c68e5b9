"""Backup and restore as docs/backup.md tells it (issue 47), on both backends: metadata's app
and blob's storage driver in process on a real database and a real store, the backup taken
with the real tools (SQLite's online backup or ``pg_dump``; the directory or the bucket
copied), changes made after it, a restore into a new installation, and the two commands
(``coffer-metadata manifest``, ``coffer-blob scrub``) run on the restored one: clean.

In process rather than over a running stack: the order of the steps and the scrub's verdict
are what is under test, and uploads are the two calls edge makes (bytes through the driver,
then the row through metadata's internal API), as in every metadata and blob test.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from coffer_blob import cli as blob_cli
from coffer_blob.config import Settings as BlobSettings
from coffer_blob.storage import Storage, make_driver
from coffer_kit.contract.ids import ASSET, ORG, new_id
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_metadata import cli as metadata_cli
from coffer_metadata.config import Settings as MetadataSettings
from coffer_metadata.main import create_app
from coffer_metadata.migrations import migrate
from coffer_testkit.testing import app_client

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Installation:
    """One installation's metadata database and store, and the settings that name them."""

    database_url: str
    env: dict[str, str]

    def storage(self) -> Storage:
        names = {"COFFER_STORAGE": "storage", "COFFER_BLOB_DIR": "blob_dir", "COFFER_S3_BUCKET": "s3_bucket"}
        names |= {"COFFER_S3_ENDPOINT_URL": "s3_endpoint_url", "COFFER_S3_REGION": "s3_region"}
        fields: dict[str, Any] = {names[k]: v for k, v in self.env.items() if k in names}
        return make_driver(
            BlobSettings(
                mode="local",
                data_dir=Path(self.env["COFFER_DATA_DIR"]),
                s3_force_path_style=True,
                signing_secret=SecretStr(secrets.token_urlsafe(32)),
                **fields,
            )
        )


@pytest.fixture(params=["embedded", "production"])
def installation(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Installation:
    root = tmp_path / "live"
    root.mkdir()
    env = {"COFFER_DATA_DIR": str(root)}
    if request.param == "embedded":
        url = f"sqlite:///{root / 'metadata.db'}"
        env |= {"COFFER_STORAGE": "fs", "COFFER_BLOB_DIR": str(root / "blobs")}
    else:
        url = request.getfixturevalue("fresh_database")("backup_live")
        s3 = request.getfixturevalue("s3_server")
        env |= s3.env(s3.new_bucket())
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.setenv(name, env[name])
    migrate(url)
    return Installation(url, {**env, "COFFER_METADATA_DATABASE_URL": url})


@pytest.fixture
async def metadata(installation: Installation) -> AsyncIterator[httpx.AsyncClient]:
    token = secrets.token_urlsafe(24)
    settings = MetadataSettings(
        metadata_database_url=installation.database_url,
        data_dir=Path(installation.env["COFFER_DATA_DIR"]),
        internal_token=SecretStr(token),
        cdn_url="http://cdn.test",
    )
    async with app_client(create_app(settings), "http://metadata", {INTERNAL_TOKEN_HEADER: token}) as client:
        yield client


async def upload(metadata: httpx.AsyncClient, storage: Storage, org: str, data: bytes) -> str:
    """An upload as edge makes it: the intent, the bytes, then the row. Answers the asset id."""
    asset_id = new_id(ASSET)
    intent = await metadata.post(f"/internal/v1/orgs/{org}/intents", json={"assetId": asset_id})
    assert intent.status_code == 201, intent.text
    key, sha256 = f"{org}/{asset_id}/file.bin", hashlib.sha256(data).hexdigest()
    writer = storage.open_writer(key)
    writer.write(data)
    writer.commit(content_type="application/octet-stream", sha256=sha256)
    body = {"id": asset_id, "key": key, "filename": "file.bin", "mimeType": "application/octet-stream"}
    body |= {"size": len(data), "sha256": sha256, "quotaBytes": 10**12}
    row = await metadata.post(f"/internal/v1/orgs/{org}/assets", json=body)
    assert row.status_code == 201, row.text
    return asset_id


async def delete(metadata: httpx.AsyncClient, storage: Storage, org: str, asset_id: str) -> None:
    """A delete as edge makes it: the row hidden (a tombstone), the bytes, the tombstone."""
    hidden = await metadata.post(f"/internal/v1/orgs/{org}/assets/{asset_id}/tombstone")
    assert hidden.status_code == 200, hidden.text
    storage.delete_prefix(hidden.json()["key"].rsplit("/", 1)[0] + "/")
    assert (await metadata.delete(f"/internal/v1/tombstones/{asset_id}")).status_code < 300


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def back_up_database(live: Installation, into: Path) -> Path:
    """Step 1: the database, consistently while the service runs."""
    if live.database_url.startswith("sqlite"):
        target = into / "metadata.db"
        with (
            sqlite3.connect(live.database_url.removeprefix("sqlite:///")) as source,
            sqlite3.connect(target) as copy,
        ):
            source.backup(copy)  # SQLite's online backup (`sqlite3 metadata.db ".backup …"`)
        return target
    target = into / "metadata.dump"
    subprocess.run(["pg_dump", "--format=custom", f"--file={target}", libpq(live.database_url)], check=True)
    return target


def back_up_store(live: Installation, into: Path, request: pytest.FixtureRequest) -> str:
    """Step 2, after the database: the directory copied, or the bucket copied server-side."""
    if live.env["COFFER_STORAGE"] == "fs":
        shutil.copytree(live.env["COFFER_BLOB_DIR"], into / "blobs")
        return str(into / "blobs")
    s3 = request.getfixturevalue("s3_server")
    client, bucket, source = s3.client(), s3.new_bucket(), live.env["COFFER_S3_BUCKET"]
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=source):
        for item in page.get("Contents", []):
            # CopyObject keeps the object's metadata (its SHA-256, its visibility): `aws s3 sync`.
            client.copy_object(
                Bucket=bucket, Key=item["Key"], CopySource={"Bucket": source, "Key": item["Key"]}
            )
    return bucket


def restore(
    live: Installation, database: Path, store: str, into: Path, request: pytest.FixtureRequest
) -> Installation:
    """The backup put into a new installation (new database, new directory or bucket)."""
    into.mkdir()
    env = {**live.env, "COFFER_DATA_DIR": str(into)}
    if database.suffix == ".db":
        shutil.copy(database, into / "metadata.db")
        url = f"sqlite:///{into / 'metadata.db'}"
    else:
        url = request.getfixturevalue("fresh_database")("backup_restored")
        subprocess.run(["pg_restore", "--no-owner", f"--dbname={libpq(url)}", str(database)], check=True)
    env["COFFER_METADATA_DATABASE_URL"] = url
    env |= {"COFFER_BLOB_DIR": store} if live.env["COFFER_STORAGE"] == "fs" else {"COFFER_S3_BUCKET": store}
    return Installation(url, env)


def scrub(
    installation: Installation,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
) -> tuple[int, dict[str, Any]]:
    """``coffer-metadata manifest`` then ``coffer-blob scrub --json --verify all`` (the
    commands' own code, in process) on the installation's settings."""
    for name, value in installation.env.items():
        monkeypatch.setenv(name, value)
    manifest = Path(installation.env["COFFER_DATA_DIR"]) / "manifest.jsonl"
    assert metadata_cli.main(["manifest", "--output", str(manifest)]) == 0
    capsys.readouterr()
    code = blob_cli.main(["scrub", "--manifest", str(manifest), "--json", "--verify", "all", *args])
    return code, json.loads(capsys.readouterr().out)


async def test_a_backup_restored_into_a_new_installation_scrubs_clean(
    installation: Installation,
    metadata: httpx.AsyncClient,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    storage = installation.storage()
    org = new_id(ORG)
    kept = [await upload(metadata, storage, org, os.urandom(1000 + i)) for i in range(3)]
    gone = await upload(metadata, storage, org, b"deleted before the backup")
    await delete(metadata, storage, org, gone)
    backup = tmp_path / "backup"
    backup.mkdir()

    database = back_up_database(installation, backup)
    # Uploaded between the two steps: its bytes are in the store's copy, its row is not.
    between = await upload(metadata, storage, org, b"between the steps")
    store = back_up_store(installation, backup, request)
    # After the backup: a delete and an upload; neither is in it.
    await delete(metadata, storage, org, kept[0])
    await upload(metadata, storage, org, b"after the backup")
    storage.close()

    live_code, live = scrub(installation, monkeypatch, capsys)
    assert live_code == 0 and live["clean"] is True, live  # the live installation, for comparison

    restored = restore(installation, database, store, tmp_path / "restored", request)
    code, report = scrub(restored, monkeypatch, capsys)
    assert code == 0 and report["clean"] is True, report
    # The backup's three assets, the one deleted after it among them, every one hashed.
    assert report["assets"] == report["verified"] == 3
    # The object uploaded between the steps has no row: inside the in-flight window it is not
    # reported. On a restored installation nothing is in flight: it goes, and nothing else.
    assert report["youngOrphans"] == 1
    code, report = scrub(restored, monkeypatch, capsys, "--orphan-age", "0", "--delete-orphans")
    assert code == 1 and [o["assetId"] for o in report["orphans"]] == [between], report
    assert report["deletedOrphans"] == 1 and not report["missing"] and not report["corrupt"]
    code, report = scrub(restored, monkeypatch, capsys, "--orphan-age", "0")
    assert code == 0 and report["clean"] is True and report["youngOrphans"] == 0, report
    assert report["assets"] == report["verified"] == 3
