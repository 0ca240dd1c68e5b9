"""The client against a service that answers what Coffer never would (a hostile server, or one
in the middle of plain HTTP): a real HTTP server in this process, answering as each test says.
The client must not write outside the place it was asked to, send its key to another host, fill
a disk past the asset's size, or loop for ever on a chunk that never counts."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from coffer_client import AsyncCoffer, Coffer, errors
from coffer_client._options import RetryPolicy

Answer = tuple[int, dict[str, str], bytes]
KEY = "cof_org_" + "x" * 40  # (any key: the server here checks none)


@dataclass
class Hostile:
    """A server on a free loopback port: ``routes[(method, path)]`` answers (``(method, "*")``
    any other path); ``seen`` records (method, path, x-api-key) of every request."""

    routes: dict[tuple[str, str], Callable[[], Answer]] = field(default_factory=dict)
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # of every request with a declared length
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
            disable_nagle_algorithm = True  # (else each answer's body waits out a delayed ACK: 40 ms)

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length, body = int(self.headers.get("content-length") or 0), []
                while length > 0:
                    body.append(self.rfile.read(min(length, 1 << 20)) or b"x" * length)
                    length -= len(body[-1])
                state.bodies.append(b"".join(body))
                path = self.path.split("?")[0]
                state.seen.append((self.command, path, self.headers.get("x-api-key")))
                found = state.routes.get((self.command, path)) or state.routes.get((self.command, "*"))
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

            do_GET = do_POST = do_PATCH = do_HEAD = do_DELETE = _answer

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


def test_the_key_never_follows_a_redirect_through_the_callers_own_client(
    hostile: Any, tmp_path: Path
) -> None:
    """httpx drops only ``Authorization`` when it follows a redirect to another host: through an
    ``http_client=`` of the caller's that follows redirects, a 307 took ``x-api-key`` with it."""
    server, elsewhere = hostile(), hostile()
    elsewhere.json("GET", "/api/folders", {"folders": []})
    server.routes[("GET", "/api/folders")] = lambda: (307, {"location": f"{elsewhere.url}/api/folders"}, b"")
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 1024)
    server.routes[("POST", "/api/uploads/tus")] = lambda: (
        201,
        {"location": "/api/uploads/tus/tus_x", "upload-offset": "0"},
        b"",
    )
    server.routes[("PATCH", "/api/uploads/tus/tus_x")] = lambda: (
        307,
        {"location": f"{elsewhere.url}/api/uploads/tus/tus_x"},
        b"",
    )
    with httpx.Client(follow_redirects=True) as own:
        sdk = Coffer(server.url, KEY, retry=RetryPolicy(attempts=1), http_client=own)
        with pytest.raises(errors.CofferError) as refused:
            sdk.list_folders()
        assert refused.value.code == "bad_response" and "307" in str(refused.value)
        with pytest.raises(errors.CofferError):
            sdk.upload_resumable(small)

    async def from_asyncio() -> None:
        async with httpx.AsyncClient(follow_redirects=True) as own:
            client = AsyncCoffer(server.url, KEY, retry=RetryPolicy(attempts=1), http_client=own)
            with pytest.raises(errors.CofferError):
                await client.list_folders()

    anyio.run(from_asyncio)
    assert elsewhere.seen == []
    assert ("GET", "/api/folders", KEY) in server.seen


# Every kind of text the service sends: an OSC sequence (retitles a terminal) and rich markup.
HOSTILE = "[/oops]\x1b]0;PWNED\x07"
SHOWN = "[/oops]\\x1b]0;PWNED\\x07"
# What rich draws itself (colours, cursor moves for the bars), left out before the text is read.
CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def test_ids_and_fields_from_the_service_are_shown_never_obeyed(
    hostile: Any, cli_for: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names were escaped, but ids and the visibility went to rich as they came: ``mkdir``
    crashed on markup after creating the folder, and an escape sequence reached the terminal,
    from ``ls``, ``mkdir``, ``mv``, ``rm``, ``upload``, ``sync --dry-run`` and the download's bar."""
    server = hostile()
    folder = {
        **{"id": "fld_" + HOSTILE, "organizationId": "org_x", "parentId": None, "name": "x"},
        "createdAt": "2026-01-01T00:00:00Z",
    }
    asset = {**_asset("a.txt", 5), "id": "ast_" + HOSTILE, "visibility": HOSTILE}
    listed = {"assets": [asset], "limit": 100, "offset": 0, "nextCursor": None}
    answers = iter([{"folders": [folder]}])  # (then none: the walk of sync ends)
    server.routes[("GET", "/api/folders")] = lambda: (
        200,
        {"content-type": "application/json"},
        json.dumps(next(answers, {"folders": []})).encode(),
    )
    server.json("POST", "/api/folders", folder, status=201)
    server.json("GET", "/api/assets", listed)
    server.json("GET", "/api/assets/ast_x", asset)
    server.json("PATCH", "*", asset)
    server.json("POST", "/api/assets", asset, status=201)
    server.routes[("DELETE", "*")] = lambda: (204, {}, b"")
    local = tmp_path / "local"
    local.mkdir()
    (local / "a.txt").write_text("hello")
    monkeypatch.chdir(tmp_path)
    cli = cli_for(server.url, KEY)
    for argv in (
        ("sync", str(tmp_path / "local"), "/", "--dry-run", "--delete"),
        ("ls", "/"),
        ("mkdir", "/x"),
        ("mv", "ast_x", "/"),
        ("rm", "ast_x"),
        ("upload", str(local / "a.txt")),
    ):
        run = cli(*argv, FORCE_COLOR="1")  # (a terminal for rich: ls draws its table)
        shown = CSI.sub("", run.stdout + run.stderr)
        assert run.exit_code == 0, (argv, run.stderr)
        assert "\x1b" not in shown and f"_{SHOWN}" in shown, (argv, shown)
    _downloadable(server, HOSTILE + ".bin", 5, b"hello")
    run = cli("download", "ast_x", "-o", str(tmp_path / "f.bin"), FORCE_COLOR="1")  # with its bar
    assert run.exit_code == 0, run.stderr
    assert "\x1b" not in CSI.sub("", run.stderr) and SHOWN in CSI.sub("", run.stderr)


def test_a_listing_whose_cursors_go_round_or_bring_nothing_is_a_bad_response(
    hostile: Any, cli_for: Any
) -> None:
    """Only a cursor given twice in a row was caught: cursors going round three by three, or
    pages of nothing each with a new cursor, made ``ls`` list for ever."""
    server = hostile()
    server.json("GET", "/api/folders", {"folders": []})
    turn = itertools.cycle(["a", "b", "c"])
    server.routes[("GET", "/api/assets")] = lambda: (
        200,
        {"content-type": "application/json"},
        json.dumps({"assets": [_asset("a.txt", 1)], "limit": 100, "nextCursor": next(turn)}).encode(),
    )
    with Coffer(server.url, KEY) as sdk, pytest.raises(errors.CofferError) as looped:
        list(itertools.islice(sdk.list_assets(), 10))  # (ten: it went round three times)
    assert looped.value.code == "bad_response"
    run = cli_for(server.url, KEY)("ls", "/")
    assert run.exit_code == 1 and "[bad_response]" in run.stderr

    pages = itertools.count()

    def nothing() -> Answer:
        n = next(pages)
        if n >= 20:  # (the client would go on for ever: stop it with another answer)
            return 400, {"content-type": "application/json"}, b'{"error":{"code":"enough"}}'
        body = {"assets": [], "limit": 100, "nextCursor": f"c{n}"}
        return 200, {"content-type": "application/json"}, json.dumps(body).encode()

    server.routes[("GET", "/api/assets")] = nothing
    with Coffer(server.url, KEY) as sdk, pytest.raises(errors.CofferError) as empty:
        list(sdk.list_assets())
    assert empty.value.code == "bad_response"


@pytest.mark.parametrize("json_flag", [(), ("--json",)])
def test_ls_writes_a_listing_as_its_pages_come(
    hostile: Any, cli_for: Any, json_flag: tuple[str, ...]
) -> None:
    """A listing without end (a new cursor and a new asset on every page) was held whole before a
    line was written, in ever more memory. Piped, ``ls`` writes each page once it has it; with
    ``--json``, the one document's pieces."""
    server = hostile()
    server.json("GET", "/api/folders", {"folders": []})
    pages = itertools.count()

    def page() -> Answer:
        n = next(pages)
        body = {"assets": [{**_asset(f"a{n}.txt", 1), "id": f"ast_{n}"}], "limit": 1, "nextCursor": f"c{n}"}
        return 200, {"content-type": "application/json"}, json.dumps(body).encode()

    server.routes[("GET", "/api/assets")] = page
    cli = cli_for(server.url, KEY)
    program = subprocess.Popen(
        [str(Path(sys.executable).parent / "coffer"), "ls", "/", *json_flag],
        env={**os.environ, **cli.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert program.stdout is not None
        first, deadline = "", time.monotonic() + 60
        while len(first) < 60 and select.select([program.stdout], [], [], deadline - time.monotonic())[0]:
            if not (piece := os.read(program.stdout.fileno(), 4096)):
                break  # (it ended)
            first += piece.decode()
    finally:
        program.kill()
        program.wait()
    if json_flag:
        assert first.startswith('{"folders": [], "assets": [{"id": "ast_0", '), first
    else:
        assert first.startswith("a0.txt\t1 B\t"), first


def test_answers_and_ids_no_parser_or_url_takes_are_one_line_errors(
    hostile: Any, cli_for: Any, tmp_path: Path
) -> None:
    """JSON nested 100,000 deep raised RecursionError, and an id or a signed URL that httpx
    cannot put in a URL raised InvalidURL: tracebacks, where every other failure is one line."""
    server = hostile()
    deep = b"[" * 100_000 + b"]" * 100_000
    server.routes[("GET", "/api/folders")] = lambda: (
        200,
        {"content-type": "application/json"},
        b'{"folders": ' + deep + b"}",
    )
    cli = cli_for(server.url, KEY)
    run = cli("ls", "/")
    assert (run.exit_code, run.stderr.count("\n")) == (1, 1) and "[bad_response]" in run.stderr
    server.routes[("GET", "/api/assets/ast_deep")] = lambda: (
        400,
        {"content-type": "application/json"},
        b'{"error": ' + deep + b"}",
    )
    run = cli("info", "ast_deep")
    assert (run.exit_code, run.stderr.count("\n")) == (2, 1) and "HTTP 400" in run.stderr
    run = cli("info", "ast_x\t")  # (the id goes quoted: the service says there is none)
    assert (run.exit_code, run.stderr.count("\n")) == (3, 1), run.stderr
    assert server.seen[-1][1] == "/api/assets/ast_x%09"
    _downloadable(server, "f.bin", 5, b"hello")
    signed = {"url": "http://[::1/x", "expiresIn": 60, "asset": _asset("f.bin", 5)}
    server.json("GET", "/api/assets/ast_x/url", signed)
    run = cli("download", "ast_x", "-o", str(tmp_path / "f.bin"))
    assert (run.exit_code, run.stderr.count("\n")) == (1, 1) and "[bad_response]" in run.stderr
    assert not (tmp_path / "f.bin").exists()


def test_an_answer_trickled_a_byte_at_a_time_meets_a_deadline(cli_for: Any) -> None:
    """``--timeout`` bounded each read only: a server sending a byte every 0.25 s kept ``coffer
    ls`` waiting as long as it liked. A whole API answer now takes at most the timeout too."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    body = b'{"folders": []}' + b" " * 200  # 54 s at this pace

    def trickle(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)  # (the request: a GET, in one segment)
            head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
            conn.sendall(head.encode())
            for byte in body:
                if stop.wait(0.25):
                    return
                conn.sendall(bytes([byte]))

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                threading.Thread(target=trickle, args=(listener.accept()[0],), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    cli = cli_for(f"http://127.0.0.1:{listener.getsockname()[1]}", KEY)
    try:
        started = time.monotonic()
        run = cli.proc("--timeout", "1", "--retries", "0", "ls", "/", timeout=30)
        took = time.monotonic() - started
    finally:
        stop.set()
        listener.close()
    assert run.exit_code == 1 and run.stderr.count("\n") == 1, run.stderr
    assert "within 1 s" in run.stderr and took < 15, (took, run.stderr)


def test_a_download_without_output_never_writes_into_what_has_its_name(
    hostile: Any, cli_for: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``-o``, an asset named ``logs`` went into ``./logs/logs`` when ``./logs`` was a
    directory, or a link to one elsewhere. The name is refused when anything has it here (a
    link to nothing too); ``--force`` replaces a link, never writes where it points."""
    server = hostile()
    _downloadable(server, "logs", 5, b"hello")
    monkeypatch.chdir(tmp_path)
    cli = cli_for(server.url, KEY)
    elsewhere, here = tmp_path / "elsewhere", tmp_path / "logs"
    elsewhere.mkdir()
    here.mkdir()
    run = cli("download", "ast_x", "-q")
    assert run.exit_code == 1 and "exists" in run.stderr and list(here.iterdir()) == []
    here.rmdir()
    for target in (elsewhere, tmp_path / "nothing"):
        here.symlink_to(target)
        run = cli("download", "ast_x", "-q")
        assert run.exit_code == 1 and "exists" in run.stderr, run.stderr
        assert here.readlink() == target and list(elsewhere.iterdir()) == []
        here.unlink()
    here.symlink_to(elsewhere)
    run = cli("download", "ast_x", "-q", "--force")
    assert run.exit_code == 0, run.stderr
    assert not here.is_symlink() and here.read_bytes() == b"hello" and list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_a_downloaded_file_has_the_mode_the_umask_gives(
    hostile: Any, cli_for: Any, tmp_path: Path, umask: int
) -> None:
    """Every download was 0600 (the temporary file's mode), where ``cp`` or ``curl -o`` give
    0644 under the usual umask."""
    server = hostile()
    _downloadable(server, "f.bin", 5, b"hello")
    by_cli, by_sdk = tmp_path / "cli.bin", tmp_path / "sdk.bin"
    before = os.umask(umask)
    try:
        run = cli_for(server.url, KEY)("download", "ast_x", "-o", str(by_cli), "-q")
        with Coffer(server.url, KEY) as sdk:
            sdk.download("ast_x", by_sdk)
    finally:
        os.umask(before)
    assert run.exit_code == 0, run.stderr
    for path in (by_cli, by_sdk):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, (path, oct(path.stat().st_mode))


# ``coffer`` run by the interpreter, writing its peak RSS (VmHWM, in KiB) to $COFFER_TEST_HWM as
# it exits. VmHWM is the program's own: wait4's ru_maxrss also counts the forking process's
# resident set at the fork (960 MiB for a pytest worker late in a full run).
_MEASURED = """
import atexit, os, sys
def _peak():
    with open("/proc/self/status") as status, open(os.environ["COFFER_TEST_HWM"], "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")).split()[1])
atexit.register(_peak)
sys.argv[0] = "coffer"
from coffer_client.__main__ import main
main()
"""


def _run_measured(cli: Any, *argv: str, limit: int = 2 * 1024**3) -> tuple[int, str, str, int]:
    """``coffer ARGV`` as a program: its exit code, stdout, stderr and peak RSS in bytes (its
    own), its address space capped at ``limit`` so that a client gone wrong fails rather than
    take the machine's memory."""
    import resource
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".hwm") as peak:
        program = subprocess.run(
            [sys.executable, "-c", _MEASURED, *argv],
            env={**os.environ, **cli.env, "COFFER_TEST_HWM": peak.name},
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        )
        kib = peak.read().strip()
    assert kib, program.stderr[-2000:]  # (it ended without its exit handlers: killed)
    return program.returncode, program.stdout.decode(), program.stderr.decode(), int(kib) * 1024


def test_an_answer_of_many_broken_items_is_refused_in_little_memory(hostile: Any, cli_for: Any) -> None:
    """2 MiB of ``[{}, {}, …]`` where assets were due: pydantic kept an error per missing field of
    every item (6,291,459 of them, 4.5 GB), and the command line then wrote them all into its
    message. Now a list stops at its first bad item, and the message is one short line."""
    server = hostile()
    server.json("GET", "/api/folders", {"folders": []})
    items = b"[" + b"{}," * (2 * 1024 * 1024 // 3) + b"{}]"
    body = b'{"limit": 100, "nextCursor": null, "assets": ' + items + b"}"
    server.routes[("GET", "/api/assets")] = lambda: (200, {"content-type": "application/json"}, body)
    server.routes[("GET", "/api/trash")] = lambda: (
        200,
        {"content-type": "application/json"},
        b'{"total": 1, "limit": 100, "offset": 0, "assets": ' + items + b"}",
    )
    image = {"image": {f"k{n}": "x" for n in range(200_000)}}  # a dict of a typed value: the same
    server.json("GET", "/api/assets/ast_x", {**_asset("a.txt", 1), **image})
    cli = cli_for(server.url, KEY)
    for argv in (("ls", "/"), ("trash", "ls"), ("info", "ast_x")):
        code, _, stderr, peak = _run_measured(cli, *argv)
        assert code == 1 and stderr.count("\n") == 1 and len(stderr) < 400, (argv, code, stderr[:2000])
        assert "[bad_response]" in stderr, (argv, stderr)
        # Measured: 85 MiB for ls and trash ls, 116 MiB for info (its 200,000 keys parsed before
        # they are counted); the interpreter and its imports are ~50 of it. Before: 4.5 GB.
        assert peak < 200 * 1024**2, (argv, peak)


def test_json_output_keeps_every_character_of_a_name(hostile: Any, cli_for: Any) -> None:
    """A name with a C1 control character (U+0080-U+009F, which the service allows) came out of
    ``--json`` as the text ``\\x9b``: JSON no parser read, and not the name. JSON escapes it."""
    server = hostile()
    name = "a\u009b[2Jb\u0085c\x7f.txt"
    asset = {**_asset(name, 1), "id": "ast_x"}
    server.json("GET", "/api/folders", {"folders": []})
    server.json("GET", "/api/assets/ast_x", asset)
    server.json("GET", "/api/assets", {"assets": [asset], "limit": 100, "nextCursor": None})
    cli = cli_for(server.url, KEY)
    for argv, found in (
        (("info", "ast_x", "--json"), lambda doc: doc["name"]),
        (("ls", "/", "--json"), lambda doc: doc["assets"][0]["name"]),
    ):
        run = cli(*argv)
        assert run.exit_code == 0, run.stderr
        assert found(json.loads(run.stdout)) == name, run.stdout
        assert not set(run.stdout) & {"\u009b", "\u0085", "\x7f", "\x1b"}  # (escaped, never raw)


@pytest.mark.parametrize("command", ["upload", "sync"])
def test_a_file_swapped_for_a_link_after_the_scan_is_not_followed(
    hostile: Any, cli_for: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """``upload -r`` and ``sync`` leave symbolic links out when they scan, but opened each file
    later by its name, following a link put there since: the file it names was uploaded (a
    secret, from a directory someone else can write to). Each file is now opened without
    following a link, and must still be the regular file the scan found."""
    import coffer_client.cli as cli_module

    server = hostile()
    folder = {"id": "fld_s", "organizationId": "org_x", "parentId": None, "name": "site"}
    answers = iter([{"folders": [{**folder, "createdAt": "2026-01-01T00:00:00Z"}]}])  # (then none)
    server.routes[("GET", "/api/folders")] = lambda: (
        200,
        {"content-type": "application/json"},
        json.dumps(next(answers, {"folders": []})).encode(),
    )
    server.json("GET", "/api/assets", {"assets": [], "limit": 100, "nextCursor": None})
    server.json("POST", "/api/assets", _asset("b.txt", 4), status=201)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    site = tmp_path / "site"
    site.mkdir()
    (site / "a.txt").write_text("hello")
    (site / "b.txt").write_text("fine")
    ensure_folders = cli_module.ensure_folders

    def swapped(*args: Any) -> Any:  # (after the scan, before the uploads)
        (site / "a.txt").unlink()
        (site / "a.txt").symlink_to(secret)
        return ensure_folders(*args)

    monkeypatch.setattr(cli_module, "ensure_folders", swapped)
    argv = ("upload", "-r", str(site), "--to", "/") if command == "upload" else ("sync", str(site), "/site")
    run = cli_for(server.url, KEY)(*argv, "-q")
    assert run.exit_code == 1, run.stderr
    assert "a.txt" in run.stderr and "symbolic link" in run.stderr, run.stderr
    assert not any(b"TOPSECRET" in body for body in server.bodies)
    assert any(b"fine" in body for body in server.bodies)  # (the other file went)


def _trashed(n: int) -> dict[str, Any]:
    return {
        **_asset(f"t{n}.txt", 1),
        "id": f"ast_{n}",
        **{"trashedAt": "2026-01-01T00:00:00Z", "purgeAt": "2026-01-02T00:00:00Z"},
        **{"trashedBy": {"type": "key", "id": "key_x", "label": None}, "reason": "deleted"},
    }


def test_trash_ls_writes_its_pages_as_they_come_and_stops_at_the_offset_bound(
    hostile: Any, cli_for: Any
) -> None:
    """A trash that never ends (a total of a billion, each page new) was held whole, nothing
    written, until the service said the offset had reached the total. Now each page is written
    as it comes, and paging stops at the largest offset the service serves (100,000)."""
    server = hostile()
    pages, first_read = itertools.count(), threading.Event()

    def page() -> Answer:
        n = next(pages)
        if n == 1:
            first_read.wait(30)  # (the second page waits until the first line was read)
        body = {"assets": [_trashed(n * 100 + i) for i in range(100)], "total": 10**9, "limit": 100}
        return 200, {"content-type": "application/json"}, json.dumps({**body, "offset": n * 100}).encode()

    server.routes[("GET", "/api/trash")] = page
    cli = cli_for(server.url, KEY)
    program = subprocess.Popen(
        [str(Path(sys.executable).parent / "coffer"), "trash", "ls"],
        env={**os.environ, **cli.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert program.stdout is not None
        readable, _, _ = select.select([program.stdout], [], [], 20)
        first = program.stdout.readline() if readable else ""
        first_read.set()
        rest, stderr = program.communicate(timeout=120)
    finally:
        first_read.set()
        program.kill()
        program.wait()
    assert first.startswith("t0.txt\t1 B\t"), first
    assert program.returncode == 1 and stderr.count("\n") == 1 and "100,000" in stderr, stderr
    assert len(rest.splitlines()) + 1 <= 100_100
    assert next(pages) <= 1002  # (the pages up to offset 100,000, and no more)

    server.routes[("GET", "/api/trash")] = lambda: (  # the same page for ever: nothing new
        200,
        {"content-type": "application/json"},
        json.dumps({"assets": [_trashed(0)], "total": 10**9, "limit": 100, "offset": 0}).encode(),
    )
    server.seen.clear()
    run = cli("trash", "ls", "--json")
    assert run.exit_code == 1 and json.loads(run.stdout)["error"]["code"] == "bad_response", run.stdout
    assert len(server.seen) == 2


def test_emptying_a_trash_that_never_empties_stops(hostile: Any, cli_for: Any) -> None:
    """``empty_trash`` asked again while the service said something remained: a round that
    purges nothing now ends it, with ``bad_response``, rather than go round for ever."""
    server = hostile()
    server.json("DELETE", "/api/trash", {"purged": 0, "remaining": 5})
    with Coffer(server.url, KEY) as sdk, pytest.raises(errors.CofferError) as stuck:
        sdk.empty_trash()
    assert stuck.value.code == "bad_response" and len(server.seen) == 1
    run = cli_for(server.url, KEY)("trash", "purge", "--all")
    assert run.exit_code == 1 and "[bad_response]" in run.stderr, run.stderr


def test_ls_recursive_holds_a_bounded_listing(hostile: Any, cli_for: Any) -> None:
    """``ls -r`` sorts its listing, so it holds it: a listing without end was held until memory
    ran out. It holds at most 100,000 assets, then stops with a message."""
    server = hostile()
    pages = itertools.count()

    def page() -> Answer:
        n = next(pages)
        listed = [{**_asset(f"a{n}-{i}", 1), "id": f"ast_{n}_{i}"} for i in range(1000)]
        body = {"assets": listed, "limit": 1000, "nextCursor": f"c{n}"}
        return 200, {"content-type": "application/json"}, json.dumps(body).encode()

    server.routes[("GET", "/api/assets")] = page
    for json_flag in ((), ("--json",)):
        run = cli_for(server.url, KEY)("ls", "-r", "/", *json_flag)
        assert run.exit_code == 1 and "100,000" in run.stderr, run.stderr[-500:]
        assert run.stderr.count("\n") == 1
    assert next(pages) <= 2 * 101 + 1


def _answers(server: Hostile, path: str, key: str, *answers: list[dict[str, Any]], **more: Any) -> None:
    """``GET path`` answers ``{key: answers[0], **more}``, then the next, then empty lists."""
    given = iter(answers)
    server.routes[("GET", path)] = lambda: (
        200,
        {"content-type": "application/json"},
        json.dumps({key: next(given, []), **more}).encode(),
    )


def _folder(folder_id: str, name: str, parent: str | None) -> dict[str, Any]:
    return {
        **{"id": folder_id, "organizationId": "org_x", "parentId": parent, "name": name},
        "createdAt": "2026-01-01T00:00:00Z",
    }


def test_sync_delete_keeps_what_the_scan_left_out(hostile: Any, cli_for: Any, tmp_path: Path) -> None:
    """``sync --delete`` scanned without symbolic links and took the remote copies of what they
    hold for stale: ``photos -> ../external/photos`` cost /site/photos, without a word. Now it
    warns of what it left out, as ``upload -r`` does, and keeps what is remote under it."""
    server = hostile()
    _answers(
        server,
        "/api/folders",
        "folders",
        [_folder("fld_s", "site", None)],
        [_folder("fld_p", "photos", "fld_s")],
    )
    cat = {**_asset("cat.jpg", 3), "id": "ast_cat", "folderId": "fld_p"}
    _answers(server, "/api/assets", "assets", [], [cat], limit=100, nextCursor=None)
    server.routes[("DELETE", "*")] = lambda: (204, {}, b"")
    (tmp_path / "external" / "photos").mkdir(parents=True)
    (tmp_path / "external" / "photos" / "cat.jpg").write_text("cat")
    site = tmp_path / "site"
    site.mkdir()
    (site / "photos").symlink_to("../external/photos")
    run = cli_for(server.url, KEY)("sync", str(site), "/site", "--delete")
    assert run.exit_code == 0, run.stderr
    assert "left out 1 symbolic link" in run.stderr and "photos" in run.stderr, run.stderr
    assert [s for s in server.seen if s[0] == "DELETE"] == []


def test_sync_refuses_two_local_names_that_are_one_remotely(
    hostile: Any, cli_for: Any, tmp_path: Path
) -> None:
    """``café.txt`` written composed and decomposed are two files here and one name remotely
    (NFC): sync kept the last it met and left the other out. It now refuses, naming both."""
    server = hostile()
    _answers(server, "/api/folders", "folders", [_folder("fld_s", "site", None)])
    _answers(server, "/api/assets", "assets", limit=100, nextCursor=None)
    server.json("POST", "/api/assets", _asset("x", 1), status=201)
    site = tmp_path / "site"
    site.mkdir()
    (site / "caf\u00e9.txt").write_text("composed")
    (site / "cafe\u0301.txt").write_text("decomposed")
    run = cli_for(server.url, KEY)("sync", str(site), "/site")
    assert run.exit_code == 1 and "caf\u00e9.txt" in run.stderr and "cafe\u0301.txt" in run.stderr, run.stderr
    assert [s for s in server.seen if s[0] != "GET"] == []


def test_sync_stops_on_a_folder_tree_without_end(hostile: Any, cli_for: Any, tmp_path: Path) -> None:
    """Every folder with a subfolder of its own (a new one each time, or the same one again):
    sync's walk of the remote tree recursed until RecursionError, a traceback. Now a tree past
    256 folders deep, or with a folder met twice, is a one-line ``bad_response``."""
    server = hostile()
    made = itertools.count()
    server.routes[("GET", "/api/folders")] = lambda: (
        200,
        {"content-type": "application/json"},
        json.dumps({"folders": [_folder(f"fld_{next(made)}", "deeper", None)]}).encode(),
    )
    _answers(server, "/api/assets", "assets", limit=100, nextCursor=None)
    (tmp_path / "site").mkdir()
    cli = cli_for(server.url, KEY)
    run = cli("sync", str(tmp_path / "site"), "/deeper")
    assert run.exit_code == 1 and run.stderr.count("\n") == 1, run.stderr[-2000:]
    assert "[bad_response]" in run.stderr and "256" in run.stderr
    server.json("GET", "/api/folders", {"folders": [_folder("fld_same", "again", None)]})
    run = cli("sync", str(tmp_path / "site"), "/again")
    assert run.exit_code == 1 and "twice" in run.stderr and "[bad_response]" in run.stderr, run.stderr[-2000:]


def test_an_asset_with_a_long_name_downloads(hostile: Any, cli_for: Any, tmp_path: Path) -> None:
    """A name of 233 to 255 bytes is a valid file name, but the temporary file beside it
    (``.NAME.<16 hex>.part``) was longer than a file name may be: the download failed."""
    server = hostile()
    name = "n" * 251 + ".txt"
    _downloadable(server, name, 5, b"hello")
    into = tmp_path / "into"
    into.mkdir()
    run = cli_for(server.url, KEY)("download", "ast_x", "-o", str(into), "-q")
    assert run.exit_code == 0, run.stderr
    assert (into / name).read_bytes() == b"hello" and len(list(into.iterdir())) == 1


def test_emoji_codes_in_names_are_shown_as_written(hostile: Any, cli_for: Any, tmp_path: Path) -> None:
    """rich turns ``:warning:`` into ⚠ on a terminal: ``:warning:.txt`` was shown as ``⚠.txt``,
    a name that is not the asset's, in the table, the messages and the bars."""
    server = hostile()
    name = ":warning::smile:.txt"
    asset = {**_asset(name, 5), "id": "ast_x"}
    server.json("GET", "/api/folders", {"folders": []})
    server.json("GET", "/api/assets", {"assets": [asset], "limit": 100, "nextCursor": None})
    server.json("POST", "/api/assets", asset, status=201)
    local = tmp_path / name
    local.write_text("hello")
    cli = cli_for(server.url, KEY)
    for argv in (("ls", "/"), ("upload", str(local))):
        run = cli(*argv, FORCE_COLOR="1")  # (a terminal for rich)
        assert run.exit_code == 0, run.stderr
        shown = CSI.sub("", run.stdout + run.stderr)
        assert name in shown and "\u26a0" not in shown and "\U0001f604" not in shown, (argv, shown)
    _downloadable(server, name, 5, b"hello")
    run = cli("download", "ast_x", "-o", str(tmp_path / "f.bin"), FORCE_COLOR="1")  # with its bar
    assert run.exit_code == 0, run.stderr
    assert "\u26a0" not in run.stderr and name in CSI.sub("", run.stderr), run.stderr
