"""The ``coffer`` command line against the real stack: every command, its JSON, its exit codes."""

from __future__ import annotations

import importlib.metadata
import json
import os
import stat
import subprocess
import sys
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from coffer_client import Coffer, profiles

pytestmark = pytest.mark.e2e


def test_help_lists_every_command(cli: Any, commands: tuple[str, ...]) -> None:
    r = cli.proc("--help")
    assert r.exit_code == 0
    for command in commands:
        assert f"  {command} " in r.stdout
    assert "--install-completion" in r.stdout  # shell completion
    assert cli.proc().exit_code == 2  # no command: usage, exit 2
    assert cli.proc("nonsense").exit_code == 2


def test_version() -> None:
    expected = f"coffer {importlib.metadata.version('coffer-client')}\n"
    exe = str(Path(sys.executable).parent / "coffer")
    for argv in (
        [exe, "--version"],  # answered before the commands load
        [exe, "-P", "other", "--version"],  # through the option
        [sys.executable, "-m", "coffer_client", "-V"],
    ):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout == expected, (argv, r.stderr)


# Start-up: what ``--help`` and ``--version`` must not load (docs/client.md, "Start-up").
LOADED = """
import sys
sys.argv = ["coffer", *sys.argv[1:]]
from coffer_client.__main__ import main
try:
    main()
except SystemExit:
    pass
heavy = ("httpx", "tenacity", "rich", "coffer_client._sync", "coffer_client.models", "platformdirs")
print(" ".join(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["upload", "--help"]])
def test_help_and_version_load_no_http_stack(argv: list[str]) -> None:
    r = subprocess.run([sys.executable, "-c", LOADED, *argv], capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith(("Usage:", "coffer ")), r.stdout
    assert r.stderr.strip() == "", r.stderr


# The collector is off while a command loads and back on once it has its client, so that a long
# upload or sync still frees its own garbage (docs/client.md, "Start-up").
COLLECTOR = """
import gc, sys
sys.argv = ["coffer", *sys.argv[1:]]
from coffer_client.__main__ import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)
"""


def test_collector_back_on_once_the_command_has_its_client(cli: Any) -> None:
    r = subprocess.run(
        [sys.executable, "-c", COLLECTOR, "usage", "--json"],
        env={**os.environ, **cli.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["assetCount"] == 0
    assert r.stderr.split() == ["True", "True"], r.stderr


def test_folders_by_path(cli: Any, sdk: Coffer) -> None:
    assert cli("mkdir", "/photos").exit_code == 0
    r = cli("mkdir", "-p", "/photos/2024/summer", "--json")
    assert r.exit_code == 0
    summer = json.loads(r.stdout)
    assert summer["name"] == "summer" and summer["parentId"]
    assert cli("mkdir", "-p", "/photos/2024/summer").exit_code == 0  # exists: fine with -p
    r = cli("mkdir", "/photos")
    assert r.exit_code == 1 and "conflict" in r.stderr
    r = cli("mkdir", "/nowhere/child")
    assert r.exit_code == 3 and r.stderr.count("\n") == 1 and "/nowhere" in r.stderr
    assert cli("mkdir", "/").exit_code == 2
    assert cli("mkdir", "/bad\x01name").exit_code == 2  # the service's 400: what was typed is wrong

    r = cli("ls", "--json")
    assert [f["name"] for f in json.loads(r.stdout)["folders"]] == ["photos"]
    r = cli("ls", "/photos")
    assert r.exit_code == 0 and "2024/" in r.stdout

    r = cli("ls", "/photos/nope")
    assert r.exit_code == 3 and r.stderr.startswith("coffer: No folder /photos/nope")

    # mv a folder: into an existing folder, then renamed in place.
    cli("mkdir", "/archive")
    r = cli("mv", "/photos/2024", "/archive")
    moved = sdk.resolve_folder("/archive/2024")
    assert moved is not None and (r.exit_code, r.stdout.split()) == (0, ["/archive/2024/", moved.id])
    r = cli("mv", "/archive/2024", "/archive/old-2024", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["name"] == "old-2024"
    r = cli("mv", "/archive", "/archive/old-2024")
    assert r.exit_code == 1 and "folder_cycle" in r.stderr

    assert cli("rmdir", "/archive").exit_code == 0
    assert cli("rmdir", "/archive").exit_code == 3
    assert cli("rmdir", "/").exit_code == 2
    assert [f.name for f in sdk.list_folders()] == ["photos"]

    # A default expiry (issue 47), in whole days.
    r = cli("mkdir", "/month", "--expires", "30d", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["expiryDays"] == 30, r.stderr
    month = sdk.resolve_folder("/month")
    assert month is not None and month.expiry_days == 30
    assert cli("mkdir", "/hourly", "--expires", "90m").exit_code == 2
    assert sdk.update_folder(month.id, expiry_days=None).expiry_days is None


def test_upload_ls_download_url_mv_rm(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("alpha\n")
    b = tmp_path / "b.png"
    b.write_bytes(b"\x89PNG fake")
    cli("mkdir", "/docs")
    r = cli("upload", str(a), str(b), "--to", "/docs", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [x["name"] for x in out["uploaded"]] == ["a.txt", "b.png"] and out["failed"] == []
    a_id = out["uploaded"][0]["id"]

    r = cli("upload", str(a), "--to", "/missing")
    assert r.exit_code == 3 and "No folder /missing" in r.stderr
    r = cli("upload", str(tmp_path))
    assert r.exit_code == 2 and "-r" in r.stderr
    assert cli("upload", str(tmp_path / "absent.txt")).exit_code == 2

    r = cli("ls", "/docs")
    assert "a.txt" in r.stdout and "6 B" in r.stdout and a_id in r.stdout
    listing = json.loads(cli("ls", "/docs", "--json").stdout)
    assert [x["name"] for x in listing["assets"]] == ["a.txt", "b.png"]
    # Dates in the reader's time zone: "JST-9" is POSIX for UTC+9 (no zoneinfo file needed).
    tokyo = timezone(timedelta(hours=9))
    created = datetime.fromisoformat(listing["assets"][0]["createdAt"]).astimezone(tokyo)
    line = f"a.txt\t6 B\t{created:%Y-%m-%d %H:%M}\t{a_id}\tpublic\n"
    assert line in cli.proc("ls", "/docs", TZ="JST-9").stdout

    dest = tmp_path / "back"
    dest.mkdir()
    assert cli("download", "/docs/a.txt", "-o", str(dest)).exit_code == 0
    assert (dest / "a.txt").read_text() == "alpha\n"
    r = cli("download", a_id, "-o", "-")
    assert r.exit_code == 0 and r.stdout == "alpha\n"
    r = cli("download", a_id, "-o", str(tmp_path / "no-such-dir" / "a.txt"))
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "No such file" in r.stderr
    assert cli("download", "/docs/none.txt").exit_code == 3
    assert cli("download", "ast_unknown").exit_code == 3

    r = cli("url", "/docs/a.txt", "--expires", "10m", "--json")
    signed = json.loads(r.stdout)
    assert signed["expiresIn"] == 600 and httpx.get(signed["url"]).text == "alpha\n"
    r = cli("url", a_id, "--public")
    assert httpx.get(r.stdout.strip()).text == "alpha\n"
    assert cli("url", a_id, "--expires", "soon").exit_code == 2
    assert cli("url", a_id, "--expires", "8d").exit_code == 2  # above 7 days: the service's 400

    r = cli("mv", "/docs/a.txt", "/docs/renamed.txt")
    assert (r.exit_code, r.stdout.split()) == (0, ["/docs/renamed.txt", a_id])  # where it is now
    assert sdk.get_asset(a_id).name == "renamed.txt"
    assert cli("mv", a_id, "/").exit_code == 0
    assert sdk.get_asset(a_id).folder_id is None
    assert cli("mv", "/docs/none.txt", "/").exit_code == 3

    # Two assets with one name: the path is ambiguous, the id is not.
    cli("upload", str(b), "--to", "/docs")
    r = cli("download", "/docs/b.png")
    assert r.exit_code == 1 and "give an id" in r.stderr

    r = cli("rm", "/renamed.txt", "/docs/none.txt", "--json")
    assert r.exit_code == 3
    assert json.loads(r.stdout)["deleted"] == [a_id]
    assert cli("rm", a_id).exit_code == 3


def test_a_reader_that_leaves_early_ends_the_command_quietly(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    """``coffer ls | head -1``: once the reader has gone, the command stops with exit 1 and no
    message, as ``ls`` would (it used to print "coffer: Broken pipe")."""
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(1 << 20))
    sdk.upload(f)
    for argv in (["ls"], ["usage"], ["download", "/f.bin", "-o", "-", "-q"]):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the first line is written
        try:
            r = cli.proc(*argv, stdout=write)
        finally:
            os.close(write)
        assert (r.exit_code, r.stderr) == (1, ""), argv


def test_a_usage_error_with_json_is_a_json_document_too(cli_for: Any) -> None:
    """docs/client.md: with --json every error is one JSON document on stdout; a mistyped
    option, a missing argument and a refused value are too, while stderr and exit 2 stay
    click's. Nothing here reaches a service: the URL is a closed port."""
    cli = cli_for("http://127.0.0.1:9", "unused")
    for argv, message in (
        (["ls", "--bogus", "--json"], "No such option: --bogus"),
        (["info", "--json"], "Missing argument 'ASSET'."),
        (["url", "/f.bin", "--fit", "sideways", "--json"], "--fit must be one of cover, contain, inside"),
    ):
        r = cli.proc(*argv)
        assert r.exit_code == 2, (argv, r)
        error = json.loads(r.stdout)["error"]
        assert (error["code"], error["status"]) == ("usage", None), argv
        assert error["message"].endswith(message), (argv, error)
        assert f"Error: {error['message']}" in r.stderr, (argv, r.stderr)
    r = cli("ls", "--bogus")  # without --json: click's lines on stderr alone
    assert (r.exit_code, r.stdout) == (2, "")
    assert "No such option: --bogus" in r.stderr


def test_usage(cli: Any, tmp_path: Path, tenant: Any) -> None:
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 2048)
    cli("upload", str(f), "-q")
    u = json.loads(cli("usage", "--json").stdout)
    assert (u["usedBytes"], u["assetCount"], u["organizationId"]) == (2048, 1, tenant.org_id)
    line = cli("usage").stdout
    assert line.startswith("2.0 KiB of") and line.endswith(", 1 asset\n"), line


def test_info_shows_the_declared_and_detected_types(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    """Issue 48: a GIF named photo.jpg is declared image/jpeg; its bytes say image/gif."""
    f = tmp_path / "photo.jpg"
    f.write_bytes(
        b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
    )
    cli("upload", str(f), "-q")
    [asset] = sdk.assets_page().assets
    assert (asset.mime_type, asset.detected_type, asset.scan_status) == ("image/jpeg", "image/gif", None)
    lines = dict(line.split("\t", 1) for line in cli("info", "/photo.jpg").stdout.splitlines())
    assert (lines["type"], lines["detected"], lines["scan"]) == ("image/jpeg", "image/gif", "not scanned")
    assert json.loads(cli("info", asset.id, "--json").stdout)["detectedType"] == "image/gif"


def test_recursive_upload_of_200_files_eight_at_once(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    root = tmp_path / "site"
    for i in range(200):
        d = root / f"d{i % 4}" / ("deep" if i % 8 == 0 else "")
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:03}.txt").write_text(f"file {i}\n")
    # Left out: links out of the tree (a file, a directory) and a FIFO (it would block).
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("PRIVATE KEY\n")
    (root / "d0" / "innocent.txt").symlink_to(secret)
    (root / "linked").symlink_to(secret.parent, target_is_directory=True)
    os.mkfifo(root / "d1" / "pipe")
    r = cli("upload", "-r", str(root), "-j", "8", "--json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(cli("sync", str(root), "/elsewhere", "--dry-run", "--json").stdout)
    assert len(plan["upload"]) == 200
    out = json.loads(r.stdout)
    assert len(out["uploaded"]) == 200 and not out["failed"]  # (the links and the FIFO left out)
    assert sdk.resolve_folder("/site/d0/deep") is not None
    assert sum(1 for _ in sdk.list_assets()) == 200
    assert {a.name for a in sdk.list_assets(sdk.resolve_folder("/site/d1").id)} == {  # type: ignore[union-attr]
        f"f{i:03}.txt" for i in range(200) if i % 4 == 1
    }


def test_sync(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    local = tmp_path / "local"
    (local / "sub").mkdir(parents=True)
    (local / "one.txt").write_text("1")
    (local / "sub" / "two.txt").write_text("2")
    (local / "sub" / "three.txt").write_text("3")

    r = cli("sync", str(local), "/backup", "--dry-run", "--json")
    assert r.exit_code == 0 and sorted(json.loads(r.stdout)["upload"]) == [
        "/backup/one.txt",
        "/backup/sub/three.txt",
        "/backup/sub/two.txt",
    ]
    assert sdk.list_folders() == []  # a dry run changes nothing

    first = json.loads(cli("sync", str(local), "/backup", "--json").stdout)
    assert len(first["uploaded"]) == 3 and first["unchanged"] == 0
    second = json.loads(cli("sync", str(local), "/backup", "--json").stdout)
    assert second["uploaded"] == [] and second["unchanged"] == 3  # by sha256: nothing to send again
    again = cli("sync", str(local), "/backup")  # what a person reads
    assert (again.stdout, again.stderr) == ("", "nothing to upload; 3 unchanged, 0 remote items deleted\n")

    (local / "one.txt").write_text("changed")
    (local / "sub" / "three.txt").unlink()
    third = json.loads(cli("sync", str(local), "/backup", "--json").stdout)
    assert [a["name"] for a in third["uploaded"]] == ["one.txt"] and third["deleted"] == []
    backup = sdk.resolve_folder("/backup")
    assert backup is not None
    ones = [a for a in sdk.list_assets(backup.id) if a.name == "one.txt"]
    assert len(ones) == 1 and ones[0].size == 7  # the changed file replaced the old one

    r = cli("sync", str(local), "/backup", "--delete", "--dry-run")
    assert "three.txt" in r.stdout
    r = cli("sync", str(local), "/backup", "--delete")
    assert r.stderr == "nothing to upload; 2 unchanged, 1 remote item deleted\n"
    sub = sdk.resolve_folder("/backup/sub")
    assert sub is not None and [a.name for a in sdk.list_assets(sub.id)] == ["two.txt"]


def test_sync_meets_decomposed_names_as_the_service_keeps_them(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    """macOS writes names decomposed (NFD); the service keeps them composed (NFC). A second
    sync uploaded café.txt again beside the first (every run, each a copy against the quota),
    and an NFD folder failed it ("a folder named 'été' already exists")."""
    local = tmp_path / "local"
    folder = local / unicodedata.normalize("NFD", "été")
    folder.mkdir(parents=True)
    (local / unicodedata.normalize("NFD", "café.txt")).write_text("c")
    (folder / "a.txt").write_text("a")
    for run in range(2):
        r = cli("sync", str(local), "/site", "--json")
        assert r.exit_code == 0, r.stderr
        assert len(json.loads(r.stdout)["uploaded"]) == (2 if run == 0 else 0)
    site = sdk.resolve_folder("/site")
    assert site is not None and [a.name for a in sdk.list_assets(site.id)] == ["café.txt"]
    assert [f.name for f in sdk.list_folders(site.id)] == ["été"]


def test_wrong_key_is_exit_4_with_one_line(cli: Any) -> None:
    wrong = "cof_org_" + "Z" * 30
    r = cli.proc("ls", COFFER_API_KEY=wrong)
    assert r.exit_code == 4
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("coffer: ") and "unauthorized" in r.stderr
    assert wrong not in r.stdout + r.stderr
    r = cli.proc("ls", "--json", COFFER_API_KEY=wrong)
    assert r.exit_code == 4 and json.loads(r.stdout)["error"]["code"] == "unauthorized"
    r = cli.proc("ls", COFFER_API_KEY="")
    assert r.exit_code == 4 and "COFFER_API_KEY" in r.stderr
    r = cli.proc("ls", "/unknown/folder")
    assert r.exit_code == 3 and r.stderr.count("\n") == 1


def test_service_down_is_exit_1(cli: Any, unused_port: int) -> None:
    r = cli.proc("--retries", "1", "ls", COFFER_URL=f"http://127.0.0.1:{unused_port}", timeout=120)
    assert r.exit_code == 1 and r.stderr.startswith("coffer: ") and r.stderr.count("\n") == 1


def test_configure_stores_a_private_profile(cli: Any, stack: Any, tenant: Any) -> None:
    env = {"COFFER_URL": "", "COFFER_API_KEY": ""}
    r = cli("configure", "--profile", "work", input=f"{stack.edge_url}\n{tenant.key}\n\n", **env)
    assert r.exit_code == 0, r.stderr
    assert tenant.key not in r.stdout + r.stderr  # hidden input: not echoed
    path = Path(cli.env["XDG_CONFIG_HOME"]) / "coffer" / "config.ini"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    saved = profiles.load("work", path)
    assert (saved.url, saved.api_key) == (stack.edge_url, tenant.key)
    assert tenant.key not in repr(saved)

    # The profile is what the other commands use (by --profile or COFFER_PROFILE).
    assert cli("--profile", "work", "ls", **env).exit_code == 0
    assert cli("ls", **env, COFFER_PROFILE="work").exit_code == 0
    assert cli("ls", **env).exit_code == 4  # the default profile does not exist

    # Reconfiguring keeps the key when Enter is pressed.
    r = cli("configure", "-P", "work", input="\n\n\n", **env)
    assert r.exit_code == 0 and profiles.load("work", path).api_key == tenant.key


def test_tags_metadata_and_a_recursive_listing(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    """Issue 50: ``coffer tag``, ``coffer meta set``, ``coffer ls --tag … -r``, and the SDK's."""
    top = sdk.create_folder("top")
    low = sdk.create_folder("low", top.id)
    f = tmp_path / "a.txt"
    f.write_bytes(b"a")
    deep = sdk.upload(f, folder_id=low.id, metadata={"sku": "1"}, tags=["red"])
    other = sdk.upload(f, name="b.txt", folder_id=top.id, tags=["blue"])
    assert (deep.metadata, deep.tags) == ({"sku": "1"}, ["red"])
    assert cli("tag", other.id, "green", "-d", "blue").stdout.split() == ["green"]
    shown = json.loads(cli("meta", "set", other.id, "n=3", "live=true", "note=hi", "--json").stdout)
    assert shown == {"n": 3, "live": True, "note": "hi"}
    assert json.loads(cli("meta", "set", other.id, "note=", "--json").stdout) == {"n": 3, "live": True}
    listed = cli("ls", "/top", "-r").stdout.splitlines()
    assert [line.split("\t")[0] for line in listed] == ["top/b.txt", "top/low/a.txt"]
    tagged = cli("ls", "/", "-r", "--tag", "red").stdout.splitlines()
    assert [line.split("\t")[0] for line in tagged] == ["top/low/a.txt"]
    found = list(sdk.list_assets(None, meta={"n": 3}, tags=["green", "red"], any_tag=True))
    assert [a.id for a in found] == [other.id]
    # An upload token fixing the asset's expiry, metadata and tags (issues 47 and 50).
    expires = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    token = sdk.create_upload_token(asset_expires_at=expires, metadata={"order": "o-7"}, tags=["inbox"])
    made = sdk.upload_with_token(token, f, name="from-browser.txt")
    assert (made.metadata, made.tags, made.expires_at) == ({"order": "o-7"}, ["inbox"], expires)
