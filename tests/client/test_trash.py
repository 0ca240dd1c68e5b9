"""``coffer trash ls|restore|purge`` and ``coffer upload --expires`` (issue 47), and the SDK's
trash methods, against a running stack."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from coffer_client import Coffer

pytestmark = pytest.mark.e2e


def test_trash_commands(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    assert sdk.set_trash_retention(5).retention_days == 5
    deadline = time.monotonic() + 6  # edge's principal cache: at most 5 s
    while sdk.trash_settings().retention_days != 5:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    (tmp_path / "a.txt").write_bytes(b"aaa")
    (tmp_path / "b.txt").write_bytes(b"bb")
    r = cli("upload", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--expires", "7d", "--json")
    assert r.exit_code == 0, r.stderr
    ids = {a.name: a.id for a in sdk.list_assets()}
    assert all(sdk.get_asset(i).expires_at is not None for i in ids.values())
    for asset_id in ids.values():
        sdk.delete_asset(asset_id)
    listed = json.loads(cli("trash", "ls", "--json").stdout)["assets"]
    assert sorted(a["name"] for a in listed) == ["a.txt", "b.txt"]
    assert "a.txt" in cli("trash", "ls").stdout
    r = cli("trash", "restore", ids["a.txt"])
    assert r.exit_code == 0 and ids["a.txt"] in r.stdout
    assert sdk.get_asset(ids["a.txt"]).name == "a.txt"
    assert cli("trash", "purge").exit_code == 2  # neither ids nor --all
    r = cli("trash", "purge", "--all", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"purged": 1}
    assert sdk.list_trash().total == 0
    assert cli("upload", str(tmp_path / "a.txt"), "--expires", "soon").exit_code == 2
