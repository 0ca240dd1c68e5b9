"""Shared helpers for tests: free ports, waiting for services."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import socket
import struct
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal, Self

import httpx

from coffer_kit.contract.ids import ASSET, new_id

# Ports handed to servers that bind them later. The kernel's bind(0) draws from its
# ephemeral range, where the same port can come back to another pytest worker (or to
# this one) before the server binds it, and a service then dies with "address already
# in use" while another answers its health check. Instead each process walks its own
# block below the ephemeral range (32768 and up on Linux), which the kernel never hands
# out by itself: one block per xdist worker, a random start against other test runs.
_BLOCK_BASE = 20_000
_BLOCK_SIZE = 1_500
_BLOCKS = 8  # 20,000 + 8 × 1,500 = 32,000: the main process and workers gw0..gw6

# One TLS context for the tests' HTTP clients: each new client would otherwise load the CA
# bundle again (17 ms of CPU; a test run makes hundreds of clients, to loopback http mostly).
TLS = httpx.create_ssl_context()


def _block() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    return _BLOCK_BASE + index * _BLOCK_SIZE if index < _BLOCKS else None


_next_offset = itertools.count(random.randrange(_BLOCK_SIZE))


# The connection budget of every service process the tests start (docs/operations.md, "The
# connection budget"): at most 2 + 1 + 1 connections each, so the whole suite fits PostgreSQL's
# default max_connections = 100. A worker keeps its session's in-process services (about 20
# connections at 2 + 1 + 1) while it runs end-to-end stacks (about 30): with 4 + 2 + 2 two
# workers reached 100 and were refused ("too many clients"). Production computes its own (the chart).
TEST_DATABASE_BUDGET = {
    "COFFER_DATABASE_POOL_SIZE": "2",
    "COFFER_DATABASE_READ_CONNECTIONS": "1",
    "COFFER_DATABASE_WRITE_CONNECTIONS": "1",
}


def free_port() -> int:
    """A loopback port nothing listens on, not handed out before by this process."""
    block = _block()
    if block is not None:
        for _ in range(_BLOCK_SIZE):
            port = block + next(_next_offset) % _BLOCK_SIZE
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, *, timeout: float = 30.0) -> None:
    """Poll ``url`` until it answers 200, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    # One client for every attempt: each new one builds a TLS context from the CA bundle
    # (tens of milliseconds of CPU, taken from the server that is starting).
    with httpx.Client(timeout=1) as client:
        while time.monotonic() < deadline:
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not become healthy in {timeout}s ({last!r})")


def metric(url: str, name: str, label: str = "") -> float:
    """A sample of the Prometheus metrics at ``url`` (a service's ``/metrics``): the first named
    ``name`` whose labels include ``label``; 0 when there is none yet."""
    text = httpx.get(url, timeout=10).text
    labels = rf"\{{[^}}]*{re.escape(label)}[^}}]*\}}" if label else r"(?:\{[^}]*\})?"
    found = re.search(rf"^{re.escape(name)}{labels} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert the response is the contract's error envelope with this status and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["requestId"] == response.headers["x-request-id"]
    return error  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def app_client(
    app: Any, base_url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client calling ``app`` in process, inside the app's lifespan; ``client.app``
    is the app, for tests that look at its state."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=base_url, headers=headers
        ) as client,
    ):
        client.app = app  # type: ignore[attr-defined]
        yield client


async def commit_asset(
    metadata: httpx.AsyncClient,
    org: str,
    /,
    *,
    size: int = 1,
    quota: int = 10**12,
    key_name: str = "file.bin",
    **fields: Any,
) -> httpx.Response:
    """An upload's two metadata calls, as edge makes them: the intent, then the commit.
    ``fields`` add to or replace the commit body (camelCase)."""
    asset_id = new_id(ASSET)
    intent = await metadata.post(f"/internal/v1/orgs/{org}/intents", json={"assetId": asset_id})
    assert intent.status_code == 201, intent.text
    body = {
        "id": asset_id,
        "key": f"{org}/{asset_id}/{key_name}",
        "filename": key_name,
        "mimeType": "application/octet-stream",
        "size": size,
        "sha256": "a" * 64,
        "quotaBytes": quota,
        **fields,
    }
    return await metadata.post(f"/internal/v1/orgs/{org}/assets", json=body)


def pattern_chunks(size: int, chunk: int = 1024 * 1024) -> Iterator[bytes]:
    """``size`` bytes of a repeating, position-dependent pattern, generated chunk by chunk."""
    block = bytes(range(256)) * (chunk // 256)
    sent = 0
    while sent < size:
        n = min(chunk, size - sent)
        yield block[:n]
        sent += n


def png_bytes(width: int = 24, height: int = 16) -> bytes:
    """A valid RGB PNG of a colour gradient, for tests where a browser must decode an image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\0" + bytes(c for x in range(width) for c in (x * 255 // width, y * 255 // height, 160))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    signature = b"\x89PNG\r\n\x1a\n"
    return signature + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def pattern_bytes(size: int) -> bytes:
    return b"".join(pattern_chunks(size))


def multipart_stream(
    *,
    size: int,
    filename: str = "data.bin",
    content_type: str | None = "application/octet-stream",
    before: dict[str, str] | None = None,
    after: dict[str, str] | None = None,
    boundary: str = "cofferboundary7MA4YWxkTrZu0gW",
) -> tuple[str, Iterator[bytes]]:
    """A multipart/form-data body with a generated file of ``size`` bytes, never held in memory.

    Returns (content type header, body iterator).
    """

    def field(name: str, value: str) -> bytes:
        return (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value.encode("utf-8")
            + b"\r\n"
        )

    def body() -> Iterator[bytes]:
        for name, value in (before or {}).items():
            yield field(name, value)
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        if content_type is not None:
            head += f"Content-Type: {content_type}\r\n"
        yield (head + "\r\n").encode("utf-8")
        yield from pattern_chunks(size)
        yield b"\r\n"
        for name, value in (after or {}).items():
            yield field(name, value)
        yield f"--{boundary}--\r\n".encode()

    return f"multipart/form-data; boundary={boundary}", body()


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def connections_to(pid: int, port: int) -> int:
    """How many established TCP connections process ``pid`` holds to ``port`` (any address),
    from /proc: the process's socket inodes matched against the namespace's TCP tables."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as fh:
            next(fh)  # the header
            for line in fh:
                fields = line.split()
                remote, state, inode = fields[2], fields[3], fields[9]
                established = state == "01"
                found += established and int(remote.rsplit(":", 1)[1], 16) == port and inode in inodes
    return found


class TcpProxy:
    """A loopback TCP proxy a test can cut and restore, to take a real server "down";
    ``upload_rate`` (bytes per second) slows what clients send, as a slow link would."""

    def __init__(self, target_host: str, target_port: int, *, upload_rate: float | None = None) -> None:
        import threading

        self.target = (target_host, target_port)
        self.upload_rate = upload_rate
        self.port = free_port()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def start(self) -> TcpProxy:
        import threading

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _accept(self, listener: socket.socket) -> None:
        import threading

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                # A connection accepted just before a cut, and joined to the server after it,
                # must not outlive the cut (a pool could keep it and the "dead" server answer).
                alive = self._listener is listener
                if alive:
                    self._conns += [client, upstream]
            if not alive:
                client.close()
                upstream.close()
                return
            for a, b, rate in ((client, upstream, self.upload_rate), (upstream, client, None)):
                threading.Thread(target=self._pump, args=(a, b, rate), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, rate: float | None = None) -> None:
        import time

        try:
            while data := src.recv(65536 if rate is None else 16384):
                dst.sendall(data)
                if rate is not None:
                    time.sleep(len(data) / rate)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Refuse new connections and reset every open one, as a dead server would."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def restore(self) -> None:
        self.start()


@contextlib.contextmanager
def serving(app: Any, *, lifespan: Literal["auto", "on", "off"] = "on") -> Iterator[str]:
    """Serve an ASGI app in a thread, exactly as ``coffer_kit.serve`` does; yields its base URL."""
    import threading

    from coffer_kit.serve import Listener, Server, server_config

    config = server_config(Listener(app, "127.0.0.1", free_port()))
    config.lifespan = lifespan
    server = Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.exit()
        thread.join(timeout=10)


def descendants(pid: int) -> list[int]:
    """A process and all its descendants (e.g. blob, its fork server and its transform workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def _summed_rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += rss_bytes(pid)
        except (OSError, RuntimeError):  # it ended meanwhile
            continue
    return total


def tree_rss_bytes(pid: int) -> int:
    """RSS of a process and all its descendants, summed, from /proc."""
    return _summed_rss(descendants(pid))


class _PeakSampler:
    """The most of some per-process figure, sampled every 10 ms in a background thread while
    the ``with`` block runs; subclasses read the figure (``_sample``)."""

    def __init__(self, peak: dict[str, int]) -> None:
        self.peak = peak
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, n: int) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        for n in itertools.count():
            if self._stop.is_set():
                return
            self._sample(n)
            time.sleep(0.01)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class PeakRss(_PeakSampler):
    """Samples the RSS of some processes from /proc in a background thread; with ``tree``,
    each process's RSS is that of its whole process tree (its members looked up every 50 ms,
    their RSS read every 10 ms: walking /proc costs the sampling process far more)."""

    def __init__(self, pids: dict[str, int], *, tree: bool = False) -> None:
        self.pids = pids
        self.tree = tree
        self._members = {name: descendants(pid) if tree else [pid] for name, pid in pids.items()}
        self.baseline = {name: _summed_rss(members) for name, members in self._members.items()}
        super().__init__(dict(self.baseline))

    def _sample(self, n: int) -> None:
        if self.tree and n % 5 == 0:
            self._members = {name: descendants(pid) for name, pid in self.pids.items()}
        for name, members in self._members.items():
            self.peak[name] = max(self.peak[name], _summed_rss(members))

    def growth(self) -> dict[str, float]:
        return {name: (self.peak[name] - self.baseline[name]) / (1024 * 1024) for name in self.pids}


class PeakConnections(_PeakSampler):
    """The most established TCP connections each process held to ``port`` (``connections_to``)."""

    def __init__(self, pids: dict[str, int], port: int) -> None:
        self.pids, self.port = pids, port
        super().__init__(dict.fromkeys(pids, 0))

    def _sample(self, _n: int) -> None:
        for name, pid in self.pids.items():
            self.peak[name] = max(self.peak[name], connections_to(pid, self.port))
