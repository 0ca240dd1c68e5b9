"""Resumable uploads from the SDK and the command line (tus, CONTRACT §9): chunks with progress,
an interrupted upload continued from where the service stopped, and ``coffer upload`` killed
in a real terminal (tmux) and run again, its bar starting near where it stopped."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import pytest

from coffer_client import AsyncCoffer, Coffer, errors
from coffer_testkit.testing import TcpProxy

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024


class Interrupted(Exception):
    """The program stops mid-upload (its progress callback raises)."""


@pytest.fixture
def file_20(tmp_path: Path) -> Path:
    path = tmp_path / "twenty.bin"
    path.write_bytes(os.urandom(20 * MIB + 5))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sdk_uploads_in_chunks_with_progress(stack: Any, sdk: Coffer, file_20: Path) -> None:
    seen: list[tuple[int, int]] = []
    urls: list[str] = []
    asset = sdk.upload_resumable(
        file_20,
        name="r.bin",
        chunk_size=3 * MIB,
        progress=lambda d, t: seen.append((d, t)),
        on_created=urls.append,
    )
    size = file_20.stat().st_size
    assert asset.name == "r.bin" and asset.size == size and asset.sha256 == sha256(file_20)
    assert seen[0] == (0, size) and seen[-1] == (size, size)
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(seen))
    assert len(urls) == 1 and urls[0].startswith(f"{stack.edge_url}/api/uploads/tus/tus_")


def _cut_at_7_mib(sdk: Coffer, path: Path) -> str:
    """Upload ``path`` in 4 MiB chunks until 7 MiB are sent, then stop as a killed client
    would; answers the upload's URL."""
    urls: list[str] = []

    def stop(done: int, _total: int) -> None:
        if done >= 7 * MIB:
            raise Interrupted

    with pytest.raises(Interrupted):
        sdk.upload_resumable(path, chunk_size=4 * MIB, progress=stop, on_created=urls.append)
    return urls[0]


def test_sdk_continues_an_interrupted_upload(sdk: Coffer, file_20: Path) -> None:
    url = _cut_at_7_mib(sdk, file_20)
    resumed: list[int] = []
    asset = sdk.upload_resumable(file_20, upload_url=url, progress=lambda d, _t: resumed.append(d))
    # The service kept the first chunk at least (and what arrived of the second).
    assert resumed[0] >= 4 * MIB
    assert asset.sha256 == sha256(file_20)


def test_async_sdk_uploads_resumably(stack: Any, tenant: Any, file_20: Path) -> None:
    async def main() -> Any:
        async with AsyncCoffer(stack.edge_url, tenant.key) as client:
            return await client.upload_resumable(file_20, chunk_size=6 * MIB + 1)

    asset = anyio.run(main)
    assert asset.sha256 == sha256(file_20) and asset.name == "twenty.bin"


def _screen(tmux: str, sock: str) -> str:
    return subprocess.run(
        [tmux, "-S", sock, "capture-pane", "-p", "-t", "t"], capture_output=True, text=True, check=True
    ).stdout


DONE = re.compile(r"(\d+(?:\.\d)?)/50\.0 MiB")


def _run_in_tmux(tmux: str, sock: str, env: dict[str, str], argv: list[str]) -> None:
    flags = [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
    command = f"{shlex.join(argv)}; echo EXIT=$?; sleep 600"
    subprocess.run(
        [tmux, "-S", sock, "new-session", "-d", "-s", "t", "-x", "160", "-y", "20", *flags, command],
        check=True,
    )


def _frames_until(tmux: str, sock: str, done: Any, timeout: float = 120) -> list[str]:
    frames: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frames.append(_screen(tmux, sock))
        if done(frames[-1]):
            return frames
        time.sleep(0.05)
    raise AssertionError("the terminal never showed it:\n" + frames[-1])


def _offset_when_above(url: str, key: str, least: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while True:
        answer = httpx.head(url, headers={"Tus-Resumable": "1.0.0", "x-api-key": key})
        offset = int(answer.headers["upload-offset"])
        if offset >= least:
            return offset
        assert time.monotonic() < deadline, f"the upload stayed at {offset} bytes"
        time.sleep(0.05)


def test_coffer_upload_killed_mid_way_resumes_where_it_stopped(
    own_stack_with: Any, admin_for: Any, cli_for: Any, tmp_path: Path
) -> None:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed for this test: apt-get install -y tmux (make test installs it)"
    # A slow link (12 MiB/s) between the command and the service, so the upload lasts a few seconds.
    proxy = TcpProxy("127.0.0.1", 1, upload_rate=12 * MIB).start()
    url = f"http://127.0.0.1:{proxy.port}"
    stack = own_stack_with(COFFER_BASE_URL=url)
    proxy.target = ("127.0.0.1", stack.ports.edge)
    admin = admin_for(stack)
    org = admin("create-org", "--name", "Train")["id"]
    key = admin("create-key", "--org", org)["key"]
    env = cli_for(url, key).env
    source = tmp_path / "fifty.bin"
    source.write_bytes(os.urandom(50 * MIB))
    exe = str(Path(sys.executable).parent / "coffer")
    sock = str(tmp_path / "tmux.sock")
    try:
        _run_in_tmux(tmux, sock, env, [exe, "upload", str(source)])
        frames = _frames_until(tmux, sock, lambda f: any(float(d) >= 15 for d in DONE.findall(f)))
        # The train enters a tunnel: the program dies (only it, not the terminal whose command
        # line names it too).
        subprocess.run(["pkill", "-KILL", "-f", rf"python\S* \S+/coffer upload {source}"], check=True)
        frames = _frames_until(tmux, sock, lambda f: "EXIT=" in f)
        assert "EXIT=137" in frames[-1], frames[-1]
        subprocess.run([tmux, "-S", sock, "kill-server"], check=False)

        (remembered,) = json.loads(
            (Path(env["XDG_CACHE_HOME"]) / "coffer" / "uploads.json").read_text()
        ).values()
        # The service keeps what arrived before the connection broke, once it has made it durable.
        stopped = _offset_when_above(remembered, key, 10 * MIB)

        _run_in_tmux(tmux, sock, env, [exe, "upload", str(source)])
        frames = _frames_until(tmux, sock, lambda f: "EXIT=" in f)
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], check=False)
        proxy.cut()
    assert "EXIT=0" in frames[-1], frames[-1]
    # The bar starts near where it stopped: from its first frame (0, before the service has
    # said where it is) straight to at least the bytes the service held.
    shown = [float(d) for f in frames for d in DONE.findall(f) if float(d) > 0]
    assert shown and shown[0] * MIB >= stopped - MIB, (shown[:3], stopped)
    assert json.loads((Path(env["XDG_CACHE_HOME"]) / "coffer" / "uploads.json").read_text()) == {}
    with Coffer(stack.edge_url, key) as client:
        (asset,) = client.list_assets()
    assert asset.sha256 == sha256(source) and asset.name == "fifty.bin"


def _cut_off(
    stack: Any, tenant: Any, cli_for: Any, rate: int, *args: str, then: Any = None
) -> tuple[Any, TcpProxy, Path]:
    """``coffer upload ARGS`` over a link slowed to ``rate`` bytes/s, killed once it has
    remembered its upload (and ``then(remembered)`` has returned): the CLI runner on that link,
    now at full speed (the caller cuts the proxy), and the file of remembered uploads."""
    edge = urlsplit(stack.edge_url)
    proxy = TcpProxy("127.0.0.1", edge.port or 80, upload_rate=rate).start()
    cli = cli_for(urlunsplit((edge.scheme, f"127.0.0.1:{proxy.port}", "", "", "")), tenant.key)
    remembered = Path(cli.env["XDG_CACHE_HOME"]) / "coffer" / "uploads.json"
    first = subprocess.Popen(
        [str(Path(sys.executable).parent / "coffer"), "upload", *args],
        env={**os.environ, **cli.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (remembered.exists() and json.loads(remembered.read_text())):  # (polled)
            assert first.poll() is None and time.monotonic() < deadline, "no upload was remembered"
            time.sleep(0.05)
        if then is not None:
            then(remembered)
    finally:
        first.kill()
        first.wait()
    proxy.upload_rate = None  # (the next connections at full speed)
    return cli, proxy, remembered


def test_an_upload_run_again_elsewhere_is_not_resumed_where_it_was_going(
    stack: Any, tenant: Any, cli_for: Any, file_20: Path
) -> None:
    """``coffer upload big.bin --to /a --private`` is killed mid-way; ``coffer upload big.bin
    --to /b --public`` continued the upload to /a, private (and printed /b). The remembered
    upload is for the same file to the same place only: this one starts anew."""
    for name in ("a", "b"):
        assert tenant.api.post("/api/folders", json={"name": name}).status_code == 201
    # Killed with the upload begun.
    cli, proxy, _ = _cut_off(stack, tenant, cli_for, 4 * MIB, str(file_20), "--to", "/a", "--private")
    try:
        again = cli("upload", str(file_20), "--to", "/b", "--public")
    finally:
        proxy.cut()
    assert again.exit_code == 0, again.stderr
    (asset,) = tenant.api.get("/api/assets").json()["assets"]
    folder = tenant.api.get(f"/api/folders/{asset['folderId']}").json()
    assert (folder["name"], asset["visibility"], asset["sha256"]) == ("b", "public", sha256(file_20))


def _change_in_place(path: Path) -> None:
    """Rewrite the file's first MiB, its size and modification time kept (as ``rsync --times``,
    ``touch -r`` or a restored backup leave a file): to the remembered upload, the same file."""
    before = path.stat()
    with path.open("r+b") as fh:
        fh.write(os.urandom(MIB))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)


def test_sdk_refuses_to_resume_an_upload_of_a_file_changed_since(sdk: Coffer, file_20: Path) -> None:
    """An upload resumed after its file changed was stored as the old start and the new end,
    and reported done: the asset's sha256 is now checked against the file's."""
    url = _cut_at_7_mib(sdk, file_20)
    _change_in_place(file_20)
    with pytest.raises(errors.CofferError) as refused:
        sdk.upload_resumable(file_20, upload_url=url)
    assert refused.value.code == "file_changed" and "twenty.bin" in str(refused.value)
    assert list(sdk.list_assets()) == []  # the mixed copy is gone (to the trash)
    assert sdk.upload_resumable(file_20).sha256 == sha256(file_20)  # and a new upload stores it


def test_coffer_upload_of_a_file_changed_since_it_was_cut_off_fails_and_starts_anew_after(
    stack: Any, tenant: Any, cli_for: Any, tmp_path: Path
) -> None:
    """``coffer upload`` killed after its first chunk; the file changed without its size or
    modification time changing; run again, it continued the upload and stored a file that is
    neither version. Now that run fails (exit 1, the copy deleted, the upload forgotten) and
    the next one uploads the file as it is."""
    source = tmp_path / "forty.bin"
    source.write_bytes(os.urandom(40 * MIB))  # two chunks: 32 MiB, then 8 MiB

    def first_chunk_stored(remembered: Path) -> None:
        (url,) = json.loads(remembered.read_text()).values()
        _offset_when_above(url, tenant.key, 32 * MIB, timeout=60)

    cli, proxy, remembered = _cut_off(stack, tenant, cli_for, 5 * MIB, str(source), then=first_chunk_stored)
    _change_in_place(source)
    try:
        again = cli("upload", str(source))
        assert again.exit_code == 1, again.stderr
        assert "Traceback" not in again.stderr and "[file_changed]" in again.stderr.splitlines()[-1]
        assert tenant.api.get("/api/assets").json()["assets"] == []
        assert json.loads(remembered.read_text()) == {}
        last = cli("upload", str(source))
    finally:
        proxy.cut()
    assert last.exit_code == 0, last.stderr
    (asset,) = tenant.api.get("/api/assets").json()["assets"]
    assert asset["sha256"] == sha256(source)


KEEP = """
import sys, threading
from pathlib import Path
from coffer_client._tus import Resumes

def run(t):
    for n in range(50):
        Resumes(Path(sys.argv[1])).put(f"{sys.argv[2]}-{t}-{n}", f"http://x/{t}/{n}")

threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_uploads_side_by_side_keep_every_resume_url(tmp_path: Path) -> None:
    """``coffer upload -j 8`` keeps each large file's upload URL through a Resumes of its own:
    each had its own lock and every thread the same temporary file, so 8 threads of 50 URLs kept
    5 and raised 190 FileExistsError/FileNotFoundError. Threads, and processes, keep them all."""
    import threading

    from coffer_client._tus import Resumes

    path = tmp_path / "cache" / "uploads.json"
    failures: list[BaseException] = []

    def run(t: int) -> None:
        try:
            for n in range(50):
                Resumes(path).put(f"{t}-{n}", f"http://x/{t}/{n}")
        except BaseException as exc:  # noqa: BLE001 - counted below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    kept = json.loads(path.read_text())
    assert len(kept) == 400 and kept["7-49"] == "http://x/7/49"
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)

    others = [
        subprocess.Popen([sys.executable, "-c", KEEP, str(path), f"p{p}"], stderr=subprocess.PIPE, text=True)
        for p in range(2)
    ]
    for other in others:
        _, stderr = other.communicate(timeout=120)
        assert other.returncode == 0, stderr
    assert len(json.loads(path.read_text())) == 400 + 2 * 4 * 50
    assert sorted(p.name for p in path.parent.iterdir() if p.name != "uploads.json.lock") == ["uploads.json"]
