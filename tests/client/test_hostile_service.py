"""The client against a service that answers what Coffer never would (a hostile server, or one
in the middle of plain HTTP): a real HTTP server in this process, answering as each test says.
The client must not write outside the place it was asked to, send its key to another host, fill
a disk past the asset's size, or loop for ever on a chunk that never counts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coffer_client import Coffer, errors
from coffer_client._options import RetryPolicy

Answer = tuple[int, dict[str, str], bytes]
KEY = "cof_org_" + "x" * 40  # (any key: the server here checks none)


@dataclass
class Hostile:
    """A server on a free loopback port: ``routes[(method, path)]`` answers; ``seen`` records
    (method, path, x-api-key) of every request."""

    routes: dict[tuple[str, str], Callable[[], Answer]] = field(default_factory=dict)
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)
    url: str = ""

    def json(self, method: str, path: str, body: Any, status: int = 200, **headers: str) -> None:
        self.routes[(method, path)] = lambda: (
            status,
            {"content-type": "application/json", **headers},
            json.dumps(body).encode(),
        )


@pytest.fixture
def hostile() -> Iterator[Callable[[], Hostile]]:
    servers: list[ThreadingHTTPServer] = []

    def start() -> Hostile:
        state = Hostile()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                while length > 0:
                    length -= len(self.rfile.read(min(length, 1 << 20)) or b"x" * length)
                path = self.path.split("?")[0]
                state.seen.append((self.command, path, self.headers.get("x-api-key")))
                found = state.routes.get((self.command, path))
                status, headers, body = (
                    found() if found else (404, {}, b'{"error":{"code":"not_found","message":"no"}}')
                )
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if headers.get("connection") != "close":  # (else: the body ends with the connection)
                    self.send_header("content-length", headers.get("content-length", str(len(body))))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_HEAD = _answer

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        state.url = f"http://127.0.0.1:{server.server_address[1]}"
        return state

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _asset(name: str, size: int) -> dict[str, Any]:
    return {
        **{"id": "ast_x", "organizationId": "org_x", "folderId": None, "key": "org_x/ast_x/f"},
        **{"name": name, "mimeType": "application/octet-stream", "size": size, "publicUrl": None},
        "createdAt": "2026-01-01T00:00:00Z",
    }


def _downloadable(server: Hostile, name: str, size: int, body: bytes) -> None:
    server.json("GET", "/api/assets/ast_x", _asset(name, size))
    signed = {"url": f"{server.url}/cdn/f?s=1", "expiresIn": 60, "asset": _asset(name, size)}
    server.json("GET", "/api/assets/ast_x/url", signed)
    server.routes[("GET", "/cdn/f")] = lambda: (200, {"content-type": "application/octet-stream"}, body)


@pytest.mark.parametrize("name", ["../../escaped.txt", "/tmp/escaped-absolute.txt", "a\\..\\..\\b.txt"])
def test_a_download_writes_only_where_it_was_asked(
    hostile: Any, cli_for: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    server = hostile()
    _downloadable(server, name, 5, b"hello")
    here, into = tmp_path / "work" / "here", tmp_path / "work" / "into"
    here.mkdir(parents=True)
    into.mkdir()
    monkeypatch.chdir(here)
    cli = cli_for(server.url, KEY)
    for argv in (("download", "ast_x", "-q"), ("download", "ast_x", "-o", str(into), "-q")):
        run = cli(*argv)
        assert run.exit_code == 0, run.stderr
    base = Path(name.replace("\\", "/")).name
    assert (here / base).read_bytes() == b"hello" and (into / base).read_bytes() == b"hello"
    assert sorted(p.name for p in (tmp_path / "work").rglob("*")) == sorted(["here", "into", base, base])
    assert not Path("/tmp/escaped-absolute.txt").exists()


def test_a_download_stops_at_the_assets_size(hostile: Any, tmp_path: Path) -> None:
    server = hostile()
    _downloadable(server, "f.bin", 5, b"A" * (3 * 1024 * 1024))  # 3 MiB for a 5-byte asset
    out = tmp_path / "f.bin"
    sdk = Coffer(server.url, KEY, retry=RetryPolicy(attempts=1))
    with sdk, pytest.raises(errors.CofferError) as refused:
        sdk.download("ast_x", out)
    assert refused.value.code == "bad_response"
    assert out.stat().st_size <= 5 if out.exists() else True


def test_the_key_never_follows_an_upload_url_to_another_host(hostile: Any, tmp_path: Path) -> None:
    server, elsewhere = hostile(), hostile()
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 1024)
    location = f"{elsewhere.url}/api/uploads/tus/tus_x"
    server.routes[("POST", "/api/uploads/tus")] = lambda: (
        201,
        {"location": location, "upload-offset": "0"},
        b"",
    )
    server.routes[("PATCH", "/api/uploads/tus/tus_x")] = lambda: (204, {"upload-offset": "0"}, b"")
    sdk = Coffer(server.url, KEY, retry=RetryPolicy(attempts=1))
    with sdk, pytest.raises(errors.CofferError) as refused:
        sdk.upload_resumable(big)
    assert elsewhere.seen == []  # the chunk went to the service's own origin, not to elsewhere
    assert ("PATCH", "/api/uploads/tus/tus_x", KEY) in server.seen
    # ...where a chunk that does not move the offset ends the upload, rather than send it again.
    assert refused.value.code == "bad_response"
    assert [s for s in server.seen if s[0] == "PATCH"] == [("PATCH", "/api/uploads/tus/tus_x", KEY)]


def test_an_answer_that_is_not_coffers_is_one_line_not_a_traceback(hostile: Any, cli_for: Any) -> None:
    """A captive portal's HTML page where JSON was due, a creation without Location: the
    documented one-line error (exit 1), and with --json an error object on stdout."""
    server = hostile()
    server.routes[("GET", "/api/folders")] = lambda: (
        200,
        {"content-type": "text/html"},
        b"<html>portal</html>",
    )
    cli = cli_for(server.url, KEY)
    run = cli("ls", "/")
    assert run.exit_code == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith("coffer: ") and "[bad_response]" in run.stderr
    assert json.loads(cli("ls", "/", "--json").stdout)["error"]["code"] == "bad_response"


def test_local_values_that_cannot_be_sent_are_usage_errors(
    hostile: Any, cli_for: Any, tmp_path: Path
) -> None:
    server = hostile()
    server.json("GET", "/api/assets/ast_x", _asset("a.txt", 1))
    server.json("PATCH", "/api/assets/ast_x", {**_asset("a.txt", 1), "metadata": {"n": "NaN"}, "tags": []})
    cli = cli_for(server.url, KEY)
    small = tmp_path / "small.txt"
    small.write_text("a")
    run = cli("upload", str(small), "--expires", "99999999999999d", "-q")
    assert run.exit_code == 2 and "Traceback" not in run.stderr  # was OverflowError, exit 1
    for value in ("NaN", "Infinity", "1e999"):  # kept as the text typed: JSON has no such number
        run = cli("meta", "set", "ast_x", f"n={value}")
        assert run.exit_code == 0, run.stderr


def test_ctrl_c_stops_at_once_with_a_request_in_flight(cli_for: Any, tmp_path: Path) -> None:
    """A server that takes the upload and never answers: Ctrl-C (SIGINT) ends ``coffer upload``
    at once, exit 130, where it waited for the request's 60 s timeout (and its retries)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(listener.accept()[0])  # (read nothing, answer nothing)

    threading.Thread(target=accept, daemon=True).start()
    source = tmp_path / "a.txt"
    source.write_bytes(b"hello")
    cli = cli_for(f"http://127.0.0.1:{listener.getsockname()[1]}", KEY)
    program = subprocess.Popen(
        [str(Path(sys.executable).parent / "coffer"), "upload", str(source)],
        env={**os.environ, **cli.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # As a terminal's foreground program has it (a test run in the background ignores it).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 30
        while not held:  # (polled: until its request is on the way)
            assert program.poll() is None and time.monotonic() < deadline, "no request came"
            time.sleep(0.05)
        program.send_signal(signal.SIGINT)
        _, stderr = program.communicate(timeout=10)
    finally:
        program.kill()
        listener.close()
        for conn in held:
            conn.close()
    assert (program.returncode, stderr.strip()) == (130, "coffer: interrupted")


@pytest.mark.parametrize(
    "location",
    ["@{host}/api/uploads/tus/tus_x", "//{host}/api/uploads/tus/tus_x", ".{host}/api/uploads/tus/tus_x"],
)
def test_a_location_that_names_a_host_by_a_trick_stays_on_the_services_origin(
    hostile: Any, tmp_path: Path, location: str
) -> None:
    """``base_url + Location`` made ``http://service@elsewhere/…`` of ``@elsewhere/…``: the key
    and the file went to elsewhere, and so did the next run's HEAD from the kept URL."""
    server, elsewhere = hostile(), hostile()
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 1024)
    named = location.format(host=elsewhere.url.removeprefix("http://"))
    server.routes[("POST", "/api/uploads/tus")] = lambda: (
        201,
        {"location": named, "upload-offset": "0"},
        b"",
    )
    kept: list[str] = []
    with Coffer(server.url, KEY, retry=RetryPolicy(attempts=1)) as sdk:
        with pytest.raises(errors.CofferError):
            sdk.upload_resumable(small, on_created=kept.append)
        with pytest.raises(errors.CofferError):
            sdk.upload_resumable(small, upload_url=named)  # a kept URL is pinned the same way
    assert elsewhere.seen == []
    assert kept and kept[0].startswith(server.url + "/")


def test_a_retry_after_past_the_clients_patience_is_answered_at_once(hostile: Any, cli_for: Any) -> None:
    server = hostile()
    for wait in ("999999", "inf"):
        server.routes[("GET", "/api/folders")] = lambda wait=wait: (
            429,
            {"content-type": "application/json", "retry-after": wait},
            b'{"error":{"code":"rate_limited","message":"later"}}',
        )
        server.seen.clear()
        started = time.monotonic()
        run = cli_for(server.url, KEY)("ls", "/", "--json")
        assert time.monotonic() - started < 30
        assert json.loads(run.stdout)["error"]["code"] == "rate_limited", run.stderr
        if wait == "999999":  # asked for 11 days: not waited for, not sent again
            assert len(server.seen) == 1


def test_a_key_with_a_character_no_key_has_is_refused_without_being_shown(hostile: Any, cli_for: Any) -> None:
    server = hostile()
    server.json("GET", "/api/folders", {"folders": []})
    with pytest.raises(errors.ConfigurationError) as refused:
        Coffer(server.url, KEY + "\u2019")  # a pasted quote
    assert KEY not in str(refused.value)
    run = cli_for(server.url, KEY[:10] + "\r" + KEY[10:])("ls", "/", "--json")
    assert run.exit_code != 0 and KEY not in run.stdout + run.stderr
    with Coffer(server.url, KEY + "\r\n") as sdk:  # a key file's line break (or a pasted space): trimmed
        sdk.list_folders()
    assert server.seen[-1][2] == KEY


def test_a_name_from_the_service_neither_replaces_a_file_nor_acts_on_the_terminal(
    hostile: Any, cli_for: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = hostile()
    _downloadable(server, ".bashrc", 5, b"PWNED")
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".bashrc").write_text("original rc")
    cli = cli_for(server.url, KEY)
    run = cli("download", "ast_x", "-q")
    assert run.exit_code != 0 and "exists" in run.stderr
    assert (tmp_path / ".bashrc").read_text() == "original rc"
    assert cli("download", "ast_x", "-q", "--force").exit_code == 0
    assert (tmp_path / ".bashrc").read_bytes() == b"PWNED"

    title = "\x1b]0;PWNED\x07\x1b[2Jevil.txt"
    _downloadable(server, title, 5, b"hello")
    shown = cli("info", "ast_x")
    assert "\x1b" not in shown.stdout and "\\x1b]0;PWNED\\x07" in shown.stdout
    refused = cli("download", "ast_x", "-q")  # no file named with escape sequences either
    assert refused.exit_code != 0 and "\x1b" not in refused.stderr
    server.routes[("GET", "/api/assets/ast_x")] = lambda: (
        400,
        {"content-type": "application/json"},
        json.dumps({"error": {"code": "invalid_request", "message": title}}).encode(),
    )
    assert "\x1b" not in cli("info", "ast_x").stderr


def test_a_listing_that_never_moves_on_or_has_no_shape_is_a_bad_response(hostile: Any, cli_for: Any) -> None:
    server = hostile()
    server.json(
        "GET",
        "/api/assets",
        {"assets": [_asset("a.txt", 1)], "limit": 100, "offset": 0, "nextCursor": "same"},
    )
    with Coffer(server.url, KEY) as sdk, pytest.raises(errors.CofferError) as looped:
        list(sdk.list_assets())
    assert looped.value.code == "bad_response"
    assert len([s for s in server.seen if s[1] == "/api/assets"]) == 2
    server.json("GET", "/api/folders", [])  # not the object Coffer answers
    run = cli_for(server.url, KEY)("ls", "/", "--json")
    assert json.loads(run.stdout)["error"]["code"] == "bad_response" and "Traceback" not in run.stderr


def test_an_answer_past_the_clients_bound_is_refused_without_being_held(hostile: Any) -> None:
    """A 200 MB JSON answer took 1 GB of the client's memory. Now one declared too large is
    refused unread, one of no declared length at the bound, and a gzip bomb (a quarter of a
    GiB of zeros in 256 KiB: the client asks for no content coding) before it is decoded."""
    import tracemalloc
    import zlib

    server = hostile()
    server.routes[("GET", "/api/assets/ast_big")] = lambda: (
        200,
        {"content-type": "application/json", "content-length": str(10 * 1024**3)},
        b"",
    )
    endless = b"[" + b"0," * (40 * 1024 * 1024)  # 80 MiB, made before memory is traced
    server.routes[("GET", "/api/assets/ast_long")] = lambda: (
        200,
        {"content-type": "application/json", "connection": "close"},
        endless,
    )
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing
    zeros = bytes(1 << 20)
    bomb = b"".join(packer.compress(zeros) for _ in range(256)) + packer.flush()
    assert len(bomb) < 1 << 20
    server.routes[("GET", "/api/assets/ast_bomb")] = lambda: (
        200,
        {"content-type": "application/json", "content-encoding": "gzip"},
        bomb,
    )
    with Coffer(server.url, KEY, retry=RetryPolicy(attempts=1)) as sdk:
        for asset, said in (
            ("ast_big", "larger than"),
            ("ast_long", "larger than"),
            ("ast_bomb", "gzip-encoded"),
        ):
            tracemalloc.start()
            try:
                with pytest.raises(errors.CofferError) as refused:
                    sdk.get_asset(asset)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert refused.value.code == "bad_response", asset
            assert said in str(refused.value), asset
            assert peak < 80 * 1024**2, (asset, peak)  # the bound, 64 MiB, and a chunk
