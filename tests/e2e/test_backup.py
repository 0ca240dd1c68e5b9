"""Backup and restore as docs/backup.md tells it (issue 47), on both backends, over a running
stack: the database first, then the store; changes after; a restore into a new installation;
the scrub of the restored installation is clean.

A restore into new databases, a new bucket and a new data dir, rather than over the running
stack: what an operator does after losing an installation, and the stack the other tests
share keeps running.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coffer_harness.api import Tenant, upload_zeros
from coffer_stack.stack import Stack

pytestmark = pytest.mark.e2e


def libpq(url: str) -> str:
    """The SQLAlchemy URL as pg_dump and pg_restore take it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def back_up_database(stack: Stack, into: Path) -> Path:
    """Step 1: metadata's database (auth's is taken the same way)."""
    url = stack.extra_env.get("COFFER_METADATA_DATABASE_URL")
    if url is None:  # the embedded default: SQLite's online backup, a consistent copy
        target = into / "metadata.db"
        with sqlite3.connect(stack.data_dir / "metadata.db") as source, sqlite3.connect(target) as copy:
            source.backup(copy)
        return target
    target = into / "metadata.dump"
    subprocess.run(["pg_dump", "--format=custom", f"--file={target}", libpq(url)], check=True)
    return target


def back_up_store(stack: Stack, into: Path, s3: Any) -> str:
    """Step 2, after the database: the directory, or the bucket copied server-side."""
    env = stack.extra_env
    if env.get("COFFER_STORAGE") != "s3":
        shutil.copytree(stack.data_dir / "blobs", into / "blobs")
        return str(into / "blobs")
    client, bucket = s3.client(), s3.new_bucket()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=env["COFFER_S3_BUCKET"]):
        for item in page.get("Contents", []):
            # CopyObject keeps the object's metadata (its SHA-256, its visibility).
            source = {"Bucket": env["COFFER_S3_BUCKET"], "Key": item["Key"]}
            client.copy_object(Bucket=bucket, Key=item["Key"], CopySource=source)
    return bucket


def restore(stack: Stack, database: Path, store: str, into: Path, fresh_database: Any) -> dict[str, str]:
    """The backup into a new installation; answers its settings."""
    env = {"COFFER_DATA_DIR": str(into / "data")}
    (into / "data").mkdir()
    if database.suffix == ".db":
        shutil.copy(database, into / "data" / "metadata.db")
        env["COFFER_METADATA_DATABASE_URL"] = f"sqlite:///{into / 'data' / 'metadata.db'}"
    else:
        url = fresh_database("restored")
        subprocess.run(["pg_restore", "--no-owner", f"--dbname={libpq(url)}", str(database)], check=True)
        env["COFFER_METADATA_DATABASE_URL"] = url
    if stack.extra_env.get("COFFER_STORAGE") == "s3":
        names = ("COFFER_S3_ENDPOINT_URL", "COFFER_S3_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        env |= {n: stack.extra_env[n] for n in names}
        env |= {"COFFER_STORAGE": "s3", "COFFER_S3_BUCKET": store, "COFFER_S3_FORCE_PATH_STYLE": "true"}
    else:
        env |= {"COFFER_STORAGE": "fs", "COFFER_BLOB_DIR": store}
    return env


def scrub(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    """``coffer-metadata manifest | coffer-blob scrub --manifest - --json`` on the settings."""
    run_env = {**os.environ, **env}
    manifest = subprocess.run(
        [sys.executable, "-m", "coffer_metadata.cli", "manifest"],
        env=run_env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coffer_blob.cli",
            "scrub",
            "--manifest",
            "-",
            "--json",
            "--verify",
            "all",
            *args,
        ],
        env=run_env,
        input=manifest.stdout,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr.decode()
    return done.returncode, json.loads(done.stdout)


def test_a_restored_backup_scrubs_clean(
    stack: Stack, tenant: Tenant, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    api = tenant.api
    kept = [upload_zeros(api, 1000 + i).json() for i in range(3)]
    assert all("id" in a for a in kept), kept
    backups = tmp_path / "backup"
    backups.mkdir()

    database = back_up_database(stack, backups)
    # An upload between the two steps: its bytes are in the store's copy, its row is not.
    between = upload_zeros(api, 77).json()
    s3 = request.getfixturevalue("s3_server") if stack.extra_env.get("COFFER_STORAGE") == "s3" else None
    store = back_up_store(stack, backups, s3)
    # Changes after the backup: neither is in it.
    assert api.delete(f"/api/assets/{kept[0]['id']}").status_code == 204
    upload_zeros(api, 55)

    fresh = (
        request.getfixturevalue("fresh_database")
        if "COFFER_METADATA_DATABASE_URL" in stack.extra_env
        else None
    )
    restored = restore(stack, database, store, tmp_path / "restored", fresh)

    code, report = scrub(restored)
    assert code == 0, report
    assert report["clean"] is True
    # Every asset of the backup, this tenant's three included (the deleted one is back), hashed.
    assert report["assets"] >= 3 and report["verified"] == report["assets"]
    # The upload made between the steps is an object without a row: inside the in-flight
    # window it is not reported; once the restore is known to be at rest, it goes.
    assert report["youngOrphans"] >= 1
    code, report = scrub(restored, "--orphan-age", "0", "--delete-orphans")
    assert between["id"] in {o["assetId"] for o in report["orphans"]}
    assert report["deletedOrphans"] == len(report["orphans"])
    code, report = scrub(restored, "--orphan-age", "0")
    assert code == 0 and report["clean"] is True and report["youngOrphans"] == 0, report
