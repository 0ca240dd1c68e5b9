"""Load generator for large transfers, run as its own process so its CPU is not the servers'.

Reads one JSON job from argv[1], writes one JSON result to stdout:

    {"url": "...", "mode": "multipart" | "put" | "get", "size": bytes, "count": n,
     "concurrency": c, "headers": {...}, "duration": seconds (stop starting transfers after it)}

``multipart`` POSTs ``file`` as multipart/form-data (Coffer's ``POST /api/assets``); ``tus``
creates a resumable upload at ``url`` (``/api/uploads/tus``) and PATCHes it in ``chunk``-byte
pieces, one after another (the transfer's time covers the creation and every chunk; success is
a last 204 carrying ``done_header``, Coffer's ``coffer-asset-id`` unless the job sets it, null
for any tus server); ``put``
PUTs the raw bytes to ``url`` + ``/{run}-{n}.bin`` (nginx WebDAV). Upload bodies stream from
one preallocated block with an explicit Content-Length, through httpx. ``get`` downloads
``url`` over one keep-alive socket into a 1 MiB buffer (plain HTTP/1.1 with Content-Length):
wrk reads in 8 KiB pieces and would be the bottleneck at GB/s. The result holds each
transfer's seconds, status counts, and the client's own CPU time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import resource
import socket
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx

CHUNK = 1024 * 1024
BOUNDARY = "benchboundary8Xq2LmP0"
BLOCK = (bytes(range(256)) * (CHUNK // 256))[:CHUNK]


async def _body(head: bytes, size: int, tail: bytes) -> AsyncIterator[bytes]:
    yield head
    view = memoryview(BLOCK)
    sent = 0
    while sent < size:
        n = min(CHUNK, size - sent)
        yield view[:n]
        sent += n
    yield tail


def _request(job: dict[str, Any], n: int) -> tuple[str, dict[str, str], bytes, bytes]:
    """URL, headers, and the bytes before and after the file's bytes, for upload ``n``."""
    headers = dict(job.get("headers") or {})
    if job["mode"] == "multipart":
        head = (
            f"--{BOUNDARY}\r\n"
            f'Content-Disposition: form-data; name="file"; filename="bench-{n}.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        tail = f"\r\n--{BOUNDARY}--\r\n".encode()
        headers["content-type"] = f"multipart/form-data; boundary={BOUNDARY}"
        return job["url"], headers, head, tail
    headers["content-type"] = "application/octet-stream"
    return f"{job['url'].rstrip('/')}/{job.get('run', 'r')}-{n}.bin", headers, b"", b""


def download(job: dict[str, Any]) -> dict[str, Any]:
    """GET ``url`` again and again on one connection, reading into one reusable buffer."""
    url = urlsplit(job["url"])
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    request = f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAccept: */*\r\n\r\n".encode()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    count, deadline = int(job["count"]), time.monotonic() + float(job.get("duration", 1e9))
    times: list[float] = []
    statuses: Counter[str] = Counter()
    total = 0
    cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with socket.create_connection((url.hostname, url.port or 80), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while len(times) < count and time.monotonic() < deadline:
            started = time.perf_counter()
            sock.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                n = sock.recv_into(view)
                if not n:
                    raise ConnectionError("server closed the connection")
                head += view[:n]
            head, _, rest = head.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            statuses[lines[0].split()[1]] += 1
            fields = dict(line.split(":", 1) for line in lines[1:])
            length = int(next(v for k, v in fields.items() if k.strip().lower() == "content-length"))
            remaining = length - len(rest)
            while remaining > 0:
                n = sock.recv_into(view, min(CHUNK, remaining))
                if not n:
                    raise ConnectionError("server closed the connection mid-body")
                remaining -= n
            times.append(time.perf_counter() - started)
            total += length
    cpu1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    return {
        "times": times,
        "statuses": dict(statuses),
        "errors": [],
        "wall": wall,
        "bytes": total,
        "client_cpu_seconds": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
        "pid": os.getpid(),
    }


async def _tus(client: httpx.AsyncClient, job: dict[str, Any], size: int, n: int) -> str:
    """One resumable upload: creation, then PATCHes of ``job["chunk"]`` bytes; the last
    answer's status (204 once the asset exists), or the first failure's."""
    headers = {**job.get("headers", {}), "Tus-Resumable": "1.0.0"}
    name = base64.b64encode(f"bench-{n}.bin".encode()).decode()
    created = await client.post(
        job["url"], headers={**headers, "Upload-Length": str(size), "Upload-Metadata": f"filename {name}"}
    )
    if created.status_code != 201:
        return str(created.status_code)
    location, offset, chunk = created.headers["location"], 0, int(job["chunk"])
    while offset < size:
        length = min(chunk, size - offset)
        patch_headers = {
            **headers,
            "Upload-Offset": str(offset),
            "Content-Type": "application/offset+octet-stream",
            "Content-Length": str(length),
        }
        answer = await client.patch(location, headers=patch_headers, content=_body(b"", length, b""))
        if answer.status_code != 204:
            return str(answer.status_code)
        offset = int(answer.headers["upload-offset"])
    # Coffer's last answer names the asset it made; a plain tus server's only ends the upload.
    done = job.get("done_header", "coffer-asset-id")
    return "204" if done is None or done in answer.headers else "no asset"


async def main(job: dict[str, Any]) -> dict[str, Any]:
    size, count, concurrency = int(job["size"]), int(job["count"]), int(job.get("concurrency", 1))
    deadline = time.monotonic() + float(job.get("duration", 1e9))
    times: list[float] = []
    statuses: Counter[str] = Counter()
    errors: list[str] = []
    next_n = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(300.0, connect=10.0)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:

        async def worker() -> None:
            nonlocal next_n
            while next_n < count and time.monotonic() < deadline:
                n, next_n = next_n, next_n + 1
                if job["mode"] == "tus":
                    started = time.perf_counter()
                    try:
                        status = await _tus(client, job, size, n)
                    except httpx.HTTPError as exc:
                        status = "error"
                        if len(errors) < 3:
                            errors.append(repr(exc))
                    if status == "204":
                        times.append(time.perf_counter() - started)
                    statuses[status] += 1
                    continue
                url, headers, head, tail = _request(job, n)
                headers["content-length"] = str(len(head) + size + len(tail))
                started = time.perf_counter()
                try:
                    response = await client.request(
                        "POST" if job["mode"] == "multipart" else "PUT",
                        url,
                        headers=headers,
                        content=_body(head, size, tail),
                    )
                except httpx.HTTPError as exc:
                    statuses["error"] += 1
                    if len(errors) < 3:
                        errors.append(repr(exc))
                    continue
                times.append(time.perf_counter() - started)
                statuses[str(response.status_code)] += 1
                if response.status_code >= 300 and len(errors) < 3:
                    errors.append(f"{response.status_code} {response.text[:300]}")

        cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        cpu1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - wall0
    return {
        "times": times,
        "statuses": dict(statuses),
        "errors": errors,
        "wall": wall,
        "bytes": size * len(times),
        "client_cpu_seconds": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
        "pid": os.getpid(),
    }


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    if job["mode"] == "get":
        print(json.dumps(download(job)))
    else:
        try:
            from uvloop import run
        except ImportError:
            run = asyncio.run  # type: ignore[assignment]
        print(json.dumps(run(main(job))))
