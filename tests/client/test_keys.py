"""Scoped keys from the SDK and the ``coffer`` command line (issue 46), on a real stack."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from coffer_client import Coffer, errors


def test_a_read_only_subtree_key_on_the_command_line(
    cli: Any, cli_for: Any, stack: Any, tmp_path: Path
) -> None:
    assert cli("mkdir", "/public").exit_code == 0
    assert cli("mkdir", "/private").exit_code == 0
    (tmp_path / "logo.txt").write_bytes(b"logo")
    (tmp_path / "secret.txt").write_bytes(b"secret")
    assert cli("upload", str(tmp_path / "logo.txt"), "--to", "/public").exit_code == 0
    assert cli("upload", str(tmp_path / "secret.txt"), "--to", "/private").exit_code == 0

    made = cli("keys", "create", "--scope", "read-only", "--folder", "/public", "--name", "reader")
    assert made.exit_code == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("cof_org_")
    assert "can read files, list folders, sign URLs, see usage in " in made.stderr
    assert "cannot upload or delete" in made.stderr

    reader = cli_for(stack.edge_url, secret)
    listed = reader("ls", "/")
    assert listed.exit_code == 0, listed.stderr
    assert "logo.txt" in listed.stdout
    assert (
        "secret.txt" not in listed.stdout
        and "private" not in listed.stdout
        and "public/" not in listed.stdout
    )

    refused = reader("upload", str(tmp_path / "secret.txt"))
    assert refused.exit_code != 0
    assert "assets:write" in refused.stderr and "insufficient_scope" in refused.stderr

    me = reader("keys", "self")
    assert me.exit_code == 0 and "read-only" in me.stdout

    # The full key lists it in words, and deletes it: refused within 5 s.
    keys = cli("keys", "ls")
    line = next(line for line in keys.stdout.splitlines() if "\treader\t" in line)
    assert "read-only" in line and "cannot upload or delete" in line
    assert cli("keys", "rm", line.split("\t", 1)[0]).exit_code == 0
    deadline = time.monotonic() + 5.5
    while (gone := reader("ls", "/")).exit_code == 0:
        assert time.monotonic() < deadline, "deleted key still accepted after 5 s"
        time.sleep(0.1)
    assert "unauthorized" in gone.stderr


def test_a_subtree_key_cannot_mint_a_wider_key_or_token(
    cli: Any, cli_for: Any, stack: Any, tenant: Any
) -> None:
    assert cli("mkdir", "/public").exit_code == 0
    with Coffer(stack.edge_url, tenant.key) as full:
        public = full.resolve_folder("/public")
        assert public is not None
        limited = full.create_key(name="limited", scopes=["read-only", "keys:manage"], folder_id=public.id)
    assert limited.api_key.folder_id == public.id

    minter = cli_for(stack.edge_url, limited.key)
    wider = minter("keys", "create", "--scope", "full")
    assert wider.exit_code != 0 and "insufficient_scope" in wider.stderr
    with Coffer(stack.edge_url, limited.key) as sdk:
        with pytest.raises(errors.InsufficientScope) as raised:
            sdk.create_upload_token()
        assert raised.value.status == 403 and raised.value.required == "upload-tokens:create"
        with pytest.raises(errors.InsufficientScope) as raised:
            sdk.create_key(scopes=["uploader"])
        assert raised.value.required == "assets:write"
        narrower = sdk.create_key(scopes=["assets:read"])
        assert narrower.api_key.folder_id == public.id and narrower.api_key.scopes == ["assets:read"]
        me = sdk.key_self()
        assert me.folder_id == public.id and me.folder_path == "/public"
        assert [k.id for k in sdk.list_keys()] == [narrower.api_key.id, limited.api_key.id]
        rotated = sdk.rotate_key(narrower.api_key.id)
        assert rotated.api_key.scopes == ["assets:read"]
        sdk.delete_key(rotated.api_key.id)
        with pytest.raises(errors.NotFound):
            sdk.get_key(rotated.api_key.id)
