"""``coffer-metadata manifest`` (issue 47): every row that owns bytes, on both databases."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import httpx
import pytest

from coffer_kit.contract.ids import ASSET, ORG, new_id
from coffer_kit.contract.wire import ACTOR_HEADER
from coffer_kit.db import make_engine
from coffer_metadata import cli
from coffer_metadata.manifest import write_manifest
from coffer_testkit.testing import commit_asset

pytestmark = pytest.mark.anyio


async def test_the_manifest_lists_assets_deletes_and_uploads_in_flight(
    api: httpx.AsyncClient, database_url: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    org = new_id(ORG)
    kept = (await commit_asset(api, org, size=5, sha256="c" * 64, key_name="kept.txt")).json()
    hidden = (await commit_asset(api, org, size=7, key_name="gone.txt")).json()
    assert (await api.post(f"/internal/v1/orgs/{org}/assets/{hidden['id']}/tombstone")).status_code == 200
    trashed = (await commit_asset(api, org, size=9, sha256="d" * 64, key_name="binned.txt")).json()
    binned = await api.post(
        f"/internal/v1/orgs/{org}/assets/{trashed['id']}/trash",
        json={"retentionDays": 7, "limitBytes": 10**9},
        headers={ACTOR_HEADER: json.dumps({"type": "key", "id": "key_a"})},
    )
    assert binned.status_code == 200, binned.text
    in_flight = new_id(ASSET)
    intent = await api.post(f"/internal/v1/orgs/{org}/intents", json={"assetId": in_flight})
    assert intent.status_code == 201

    engine = make_engine(database_url)
    try:
        out = io.StringIO()
        count = write_manifest(engine, out)
    finally:
        engine.dispose()
    *rows, end = [json.loads(line) for line in out.getvalue().splitlines()]
    assert count == len(rows) == 4
    assert end == {"end": True, "count": 4, "at": end["at"]}  # (the scrub refuses a manifest cut short)
    assert datetime.fromisoformat(end["at"]) <= datetime.now(UTC)  # (--flags fix refuses a stale one)
    by_asset = {row["asset"]: row for row in rows}
    assert by_asset[kept["id"]] == {
        "org": org,
        "asset": kept["id"],
        "key": f"{org}/{kept['id']}/kept.txt",
        "size": 5,
        "sha256": "c" * 64,
        "created": by_asset[kept["id"]]["created"],
        "state": "asset",
        "private": False,
        "trashed": False,
    }
    assert by_asset[kept["id"]]["created"].startswith("20")
    # A trashed asset still owns its object (a restore gives it back): the scrub must neither
    # miss its bytes nor call them an orphan.
    assert {k: by_asset[trashed["id"]][k] for k in ("key", "size", "sha256", "state", "trashed")} == {
        "key": f"{org}/{trashed['id']}/binned.txt",
        "size": 9,
        "sha256": "d" * 64,
        "state": "asset",
        "trashed": True,
    }
    assert by_asset[hidden["id"]]["state"] == "deleting"
    assert by_asset[hidden["id"]]["key"] == f"{org}/{hidden['id']}/gone.txt"
    assert by_asset[in_flight]["state"] == "uploading"

    # The command writes the same lines to a file.
    monkeypatch.setenv("COFFER_METADATA_DATABASE_URL", database_url)
    monkeypatch.setenv("COFFER_DATA_DIR", str(tmp_path))
    target = f"{tmp_path}/manifest.jsonl"
    assert cli.main(["manifest", "--output", target]) == 0
    with open(target, encoding="utf-8") as written:
        *lines, last = written.read().splitlines()
    assert sorted(lines) == sorted(out.getvalue().splitlines()[:-1])
    assert {**json.loads(last), "at": None} == {**end, "at": None}  # (a snapshot of its own)
