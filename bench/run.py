"""``make bench``: Coffer against nginx and a minimal FastAPI app, measured in the same run.

Starts, on free loopback ports in a temporary directory: the embedded default stack (or with
``--production`` the same stack on fresh PostgreSQL databases and a moto S3 server), nginx from
Debian (static files with sendfile, WebDAV PUT), and bench/reference_app.py (one FastAPI route
under uvicorn, configured like our services). Load comes from separate processes: wrk for
small requests, bench/client.py for 100 MiB transfers (httpx uploads, socket downloads).
Each figure has a warm-up, then ``--reps`` repetitions alternating Coffer and its reference;
the table shows medians and min–max. Writes bench/results/latest.{md,json}
(latest-production.* with ``--production``) and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import (
    IDLE_SECONDS,
    OthersMeter,
    RssSampler,
    Sample,
    Wrk,
    add_warm_memory,
    back_free_memory,
    cpu_seconds,
    idle_rss_mib,
    python_client,
)
from report import Figure, details, table, write
from seed import MOVING_ASSETS, Seeded, seed_assets
from servers import (
    Nginx,
    OtlpSink,
    Production,
    ReferenceApp,
    auth_cli,
    coffer_stack,
    ensure_tools,
    traced_stack,
    tracing_env,
)

from coffer_testkit.testing import free_port

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
BIG = 100 * MIB
SMALL = 4096
LIST_ASSETS = 100_000
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
# Figure groups, for --only.
GROUPS = (
    "disk",
    "idle-rss",
    "upload-big",
    "upload-small",
    "upload-token",
    "upload-tus",
    "download",
    "cdn-small",
    "asset-get",
    "asset-get-traced",
    "asset-get-scoped",
    "list",
    "search",
    "move",
    "webhooks",
    "transforms",
)
# Name searches over the seeded names (seed.py): one matching a handful of assets, one
# matching an eighth of them (every count then reads 12,500 matches).
SEARCH_RARE = "report-0421"
SEARCH_COMMON = "holiday"
# The even load of the traced figure: each of wrk's 32 connections waits this long after an
# answer (about 700 requests a second, well below what any of its sides can take).
TRACE_PAUSE_MS = 40
# Webhooks: the pace of the latency figure's uploads, and how long a delivery may take to count.
WEBHOOK_UPLOADS_PER_SECOND = 100
WEBHOOK_WAIT_SECONDS = 30.0
# The rate with an endpoint ÷ without is taken over this many times --reps pairs: one pair's
# ratio moves between 0.6 and 1.2 here (the disk's), five pairs' median by about ±0.06.
WEBHOOK_RATE_REPS_FACTOR = 3
# The stack lets webhooks reach the bench's receiver on loopback (an operator's allowlist).
WEBHOOK_ENV = {
    "COFFER_METADATA_WEBHOOK_ALLOW_HTTP": "true",
    "COFFER_METADATA_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
}
T = TypeVar("T")


# The S3 server of --production (moto, a local process), measured beside Coffer's processes.
S3_SERVER = "s3 (moto)"


def cpu_ms_per_request(sample: Sample, *, without: tuple[str, ...] = ()) -> float | None:
    """Server CPU milliseconds per request: every measured process's cores (but those named in
    ``without``) ÷ the rate."""
    if not sample.rate:
        return None
    return 1000 * sum(v for name, v in sample.server_cpu.items() if name not in without) / sample.rate


def alongside(run: Callable[..., Sample], extra: Callable[[], T]) -> tuple[Callable[..., Sample], list[T]]:
    """``run``, then ``extra`` in the same repetition; ``extra``'s results collect in the list."""
    results: list[T] = []

    def go(seconds: float | None = None) -> Sample:
        sample = run(seconds)
        results.append(extra())
        return sample

    return go, results


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({model or platform.machine()}), {mem:.0f} GiB, Linux {platform.release()}"
    )


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    sha = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return sha + (" (work tree has uncommitted changes)" if git("status", "--porcelain", "--", ".") else "")


def versions(nginx: str, wrk: str) -> str:
    n = subprocess.run([nginx, "-v"], capture_output=True, text=True).stderr.strip().split("/")[-1]
    w = subprocess.run([wrk, "-v"], capture_output=True, text=True).stdout.split()[1:2]
    return f"nginx {n}, wrk {''.join(w)}, Python {platform.python_version()}"


def disk_rate(directory: Path, *, reps: int) -> list[float]:
    """dd of 100 MiB with fdatasync: MB/s (10^6 bytes) the disk under the data dir sustains."""
    rates = []
    target = directory / "dd.bin"
    for _ in range(reps):
        started = time.perf_counter()
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=100", "conv=fdatasync"],
            check=True,
            capture_output=True,
        )
        rates.append(BIG / (time.perf_counter() - started) / 1e6)
        target.unlink()
    return rates


def small_fsync_rate(directory: Path, *, seconds: float) -> float:
    """One writer creating 4 KiB files with fsync of file and directory: files/s."""
    block = os.urandom(SMALL)
    work = directory / "fsync"
    work.mkdir()
    dir_fd = os.open(work, os.O_RDONLY)
    n, started = 0, time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            fd = os.open(work / f"f{n}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, block)
            os.fsync(fd)
            os.close(fd)
            os.fsync(dir_fd)
            n += 1
    finally:
        os.close(dir_fd)
    rate = n / (time.perf_counter() - started)
    shutil.rmtree(work)
    return rate


def multipart_body(path: Path, size: int) -> str:
    """A multipart/form-data file on disk for wrk's POSTs; returns its content type."""
    boundary = "benchboundary8Xq2LmP0"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="small.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    path.write_bytes(head + os.urandom(size) + f"\r\n--{boundary}--\r\n".encode())
    return f"multipart/form-data; boundary={boundary}"


class Bench:
    def __init__(self, args: argparse.Namespace, nginx_bin: str, wrk_bin: str, root: Path) -> None:
        self.args, self.root = args, root
        self.wrk = Wrk(wrk_bin, root / "wrk")
        self.wrk.workdir.mkdir()
        self.nginx = Nginx(nginx_bin, root / "nginx")
        self.reference = ReferenceApp(log=root / "logs" / "reference.log")
        self.production = Production(args.database_url) if args.production else None
        self.stack = None  # type: ignore[var-annotated]
        self.traced = self.unsampled = None  # type: ignore[var-annotated]
        self.traced_reference: ReferenceApp | None = None
        self.pricing_sink: OtlpSink | None = None  # the spans that price a span, counted apart
        self.sink: OtlpSink | None = None
        self.figures: list[Figure] = []
        self.key = ""
        self.list_key = ""
        self.seeded: Seeded | None = None
        self.through_blob: list[Figure] = []  # with --production, these measure moto's S3 too
        self.webhook_upload_rates: list[float] = []  # uploads/s the paced webhook runs reached

    # ---- setup ----------------------------------------------------------------------------

    def start(self) -> None:
        (self.root / "logs").mkdir(exist_ok=True)
        self.nginx.start()
        log(f"nginx on {self.nginx.url}")
        self.nginx.static("small.bin").write_bytes(os.urandom(SMALL))
        with open(self.nginx.static("big.bin"), "wb") as fh:
            block = os.urandom(MIB)
            for _ in range(BIG // MIB):
                fh.write(block)
        for name in ("small.bin", "big.bin"):
            os.chmod(self.nginx.static(name), 0o644)
        self.reference.start()
        log(f"reference FastAPI app on {self.reference.url}")
        extra: dict[str, str] = {}
        if self.production:
            log("production: fresh PostgreSQL databases and a moto S3 server")
            extra = self.production.start(self.root / "logs" / "moto.log")
        extra.update(WEBHOOK_ENV)
        extra.update(dict(item.split("=", 1) for item in self.args.stack_env))
        self.stack = coffer_stack(self.root, extra)
        self.stack.migrate()
        org = auth_cli(self.stack, "create-org", "--name", "bench", "--quota-bytes", str(2**40))
        self.key = str(auth_cli(self.stack, "create-key", "--org", str(org["id"]))["key"])
        list_org = auth_cli(self.stack, "create-org", "--name", "bench-list", "--quota-bytes", str(2**40))
        self.list_key = str(auth_cli(self.stack, "create-key", "--org", str(list_org["id"]))["key"])
        url = (
            extra.get("COFFER_METADATA_DATABASE_URL") or f"sqlite:///{(self.stack.data_dir / 'metadata.db')}"
        )
        if (self.args.only or set(GROUPS)) & {"list", "search", "move"}:
            self.seeded = seed_assets(url, org_id=str(list_org["id"]), count=LIST_ASSETS)
            log(
                f"seeded {LIST_ASSETS:,} asset rows into metadata's database in "
                f"{self.seeded.seconds:.1f}s (fixture)"
            )
        self.stack.start()
        log(f"Coffer stack up: edge {self.stack.edge_url}, CDN {self.stack.public_cdn_url}")

    def stop(self) -> None:
        things = (
            self.traced,
            self.unsampled,
            self.traced_reference,
            self.sink,
            self.pricing_sink,
            self.stack,
            self.reference,
            self.nginx,
            self.production,
        )
        for thing in things:
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.stop()

    def coffer_pids(self) -> dict[str, list[int]]:
        pids = {name: [proc.pid] for name, proc in self.stack.processes.items()}
        if self.production:
            pids[S3_SERVER] = self.production.pids()
        return pids

    def warm_auth(self) -> None:
        """One request per key first: edge's auth cache is then warm, as in steady state.

        (A cold edge hit by many concurrent requests for one key is another matter: see
        bench/results/journal.md, "Found on the way: a cold auth cache took edge down".)
        """
        for key in (self.key, self.list_key):
            httpx.get(
                self.stack.edge_url + "/api/folders", headers=self.headers(key), timeout=30
            ).raise_for_status()

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"x-api-key": key or self.key}

    # ---- measuring ----------------------------------------------------------------------

    def pair(
        self,
        figure: Figure,
        coffer: Callable[[], Sample],
        reference: Callable[[], Sample] | None,
        *,
        warmup: Callable[[], Any] | None = None,
        metric: Callable[[Sample], float | None] = lambda s: s.rate,
        also: list[tuple[Figure, Callable[[Sample], float | None]]] = (),  # type: ignore[assignment]
        reps: int | None = None,
    ) -> list[tuple[Sample, Sample | None]]:
        """Warm up, then alternate Coffer and reference ``reps`` times (``--reps``); fill the
        figure(s)."""
        log(f"measuring: {figure.name}")
        if warmup:
            warmup()
        runs: list[tuple[Sample, Sample | None]] = []
        for _ in range(reps or self.args.reps):
            c = coffer()
            r = reference() if reference else None
            runs.append((c, r))
        for fig, get in [(figure, metric), *also]:
            fig.samples = [v for c, _ in runs if (v := get(c)) is not None]
            fig.reference_samples = [v for _, r in runs if r is not None and (v := get(r)) is not None]
            fig.client_cpu = statistics.median(c.client_cpu for c, _ in runs)
            if reference:
                fig.reference_client_cpu = statistics.median(r.client_cpu for _, r in runs if r)
            fig.server_cpu = {
                name: statistics.median(c.server_cpu.get(name, 0.0) for c, _ in runs)
                for name in runs[0][0].server_cpu
            }
            refs = [sum(r.server_cpu.values()) for _, r in runs if r is not None]
            fig.reference_server_cpu = statistics.median(refs) if refs else None
            errors = sum(c.errors for c, _ in runs)
            requests = sum(c.requests for c, _ in runs)
            if requests and errors > 0.01 * requests:
                fig.error = f"{errors} of {requests} Coffer requests failed or were not 2xx"
            stalled = sum(1 for c, _ in runs if c.requests == 0 and c.rate == 0)
            if stalled:
                fig.error = f"{stalled} of {len(runs)} repetitions completed no request at all (a stall)"
            fig.others_cpu = max(max(c.others_cpu, r.others_cpu if r else 0.0) for c, r in runs)
            ref_errors = sum(r.errors for _, r in runs if r is not None)
            if ref_errors:
                fig.note += f" reference had {ref_errors} errors."
        return runs

    def wrk_get(
        self, url: str, pids: dict[str, list[int]], connections: int, **kw: Any
    ) -> Callable[[], Sample]:
        def run(seconds: float | None = None) -> Sample:
            return self.wrk.run(
                url, connections=connections, seconds=seconds or self.args.seconds, servers=pids, **kw
            )

        return run

    def warm(self, *runs: Callable[..., Sample]) -> Callable[[], None]:
        def go() -> None:
            for run in runs:
                run(self.args.warmup)

        return go

    # ---- the figures --------------------------------------------------------------------

    def upload_one(self, size: int) -> dict[str, Any]:
        """One upload from the harness itself (setup, not measured)."""
        content_type = "application/octet-stream"
        files = {"file": ("setup.bin", os.urandom(size), content_type)}
        response = httpx.post(
            self.stack.edge_url + "/api/assets", headers=self.headers(), files=files, timeout=120
        )
        if response.status_code != 201:
            raise RuntimeError(f"POST /api/assets answered {response.status_code}: {response.text[:300]}")
        return response.json()  # type: ignore[no-any-return]

    def big_uploads(self) -> dict[str, Any] | None:
        """100 MiB uploads (Python client), with edge's and blob's RSS sampled throughout."""
        up = Figure("upload one 100 MiB file", "MB/s", reference_name="nginx WebDAV PUT", goal="ratio >= 0.5")
        rss = {
            name: Figure(f"RSS growth of {name} during 100 MiB uploads", "MiB", goal="value <= 32")
            for name in ("edge", "blob")
        }
        up.client = "bench/client.py: httpx, 1 connection, streamed body"
        self.figures += [up, *rss.values()]
        self.through_blob += [up, rss["blob"]]
        log(f"measuring: {up.name}")
        pids = self.coffer_pids()
        job = {"size": BIG, "count": 1, "concurrency": 1}
        coffer_job = {
            **job,
            "url": self.stack.edge_url + "/api/assets",
            "mode": "multipart",
            "headers": self.headers(),
        }
        nginx_job = {**job, "url": self.nginx.url + "/dav/big", "mode": "put"}
        sampler_pids = {name: self.stack.processes[name].pid for name in rss}
        last: dict[str, Any] | None = None
        coffer: list[Sample] = []
        ref: list[Sample] = []
        with RssSampler(sampler_pids) as sampler:
            for rep in range(self.args.reps + 1):  # the first of each is the warm-up
                result, cpu = python_client(coffer_job, servers=pids)
                if result["statuses"] != {"201": 1}:
                    raise RuntimeError(f"Coffer upload failed: {result['statuses']} {result['errors']}")
                sample = Sample(
                    BIG / result["times"][0] / 1e6,
                    client_cpu=result["client_cpu_seconds"] / result["wall"],
                    server_cpu=cpu,
                    others_cpu=result["others_cpu"],
                )
                result, cpu = python_client(
                    {**nginx_job, "run": f"r{rep}"}, servers={"nginx": self.nginx.pids()}
                )
                if result["statuses"] != {"201": 1}:
                    raise RuntimeError(f"nginx PUT failed: {result['statuses']} {result['errors']}")
                ref_sample = Sample(
                    BIG / result["times"][0] / 1e6,
                    client_cpu=result["client_cpu_seconds"] / result["wall"],
                    server_cpu=cpu,
                    others_cpu=result["others_cpu"],
                )
                if rep:
                    coffer.append(sample)
                    ref.append(ref_sample)
        growth = sampler.growth()
        up.samples = [s.rate for s in coffer]
        up.reference_samples = [s.rate for s in ref]
        up.client_cpu = statistics.median(s.client_cpu for s in coffer)
        up.reference_client_cpu = statistics.median(s.client_cpu for s in ref)
        up.server_cpu = {n: statistics.median(s.server_cpu[n] for s in coffer) for n in pids}
        up.reference_server_cpu = statistics.median(sum(s.server_cpu.values()) for s in ref)
        up.others_cpu = max(s.others_cpu for s in coffer + ref)
        for name, fig in rss.items():
            fig.samples = [growth[name] / MIB]
            fig.note = (
                f"peak VmRSS minus VmRSS before the first of {self.args.reps + 1} sequential 100 MiB "
                f"uploads (sampled every 5 ms); baseline {sampler.baseline[name] / MIB:.0f} MiB"
            )
        shutil.rmtree(self.nginx.root / "www" / "dav" / "big", ignore_errors=True)
        listing = httpx.get(
            self.stack.edge_url + "/api/assets", params={"limit": 1}, headers=self.headers(), timeout=30
        ).json()
        last = listing["assets"][0] if listing.get("assets") else None
        return last

    def small_uploads(self) -> None:
        fig = Figure("upload 4 KiB files, 16 concurrent", "files/s", reference_name="nginx WebDAV PUT")
        durable = Figure(
            "upload 4 KiB files, 16 concurrent ÷ the disk's durable single-writer rate",
            "files/s",
            reference_name="disk: 4 KiB file + fsync, one writer, in the same repetitions",
            goal="ratio >= 0.5",
            derived=True,
        )
        cpu = Figure("4 KiB upload: CPU per upload, all services", "ms", goal="value <= 8", derived=True)
        fig.client = durable.client = cpu.client = "wrk, 16 connections (one new file per request)"
        durable.note = (
            "the rate of the row above ÷ one writer creating 4 KiB files with fsync of file and "
            "directory (the disk row's measure), 1 s of it after each nginx run"
        )
        cpu.note = (
            "CPU (utime + stime) of every Coffer process ÷ uploads completed, per repetition; with "
            f"--production the S3 server is not counted (its own process, `{S3_SERVER}` in the CPU "
            "table, measured apart)"
        )
        self.figures += [fig, durable, cpu]
        self.through_blob += [fig, durable, cpu]
        body = self.root / "wrk" / "small-multipart.bin"
        content_type = multipart_body(body, SMALL)
        raw = self.root / "wrk" / "small.bin"
        raw.write_bytes(os.urandom(SMALL))
        pids = self.coffer_pids()
        coffer = self.wrk_get(
            self.stack.edge_url + "/api/assets",
            pids,
            16,
            method="POST",
            body_file=body,
            headers={**self.headers(), "content-type": content_type},
        )
        nginx = self.wrk_get(
            self.nginx.url + "/dav/small/",
            {"nginx": self.nginx.pids()},
            16,
            method="PUT",
            body_file=raw,
            unique_path="/dav/small/",
            headers={"content-type": "application/octet-stream"},
        )
        data_dir = self.stack.data_dir
        nginx_then_disk, disk = alongside(nginx, lambda: small_fsync_rate(data_dir, seconds=1.0))
        runs = self.pair(fig, coffer, nginx_then_disk, warmup=self.warm(coffer, nginx))
        durable.samples = [c.rate for c, _ in runs]
        durable.reference_samples = disk
        cpu.samples = [v for c, _ in runs if (v := cpu_ms_per_request(c, without=(S3_SERVER,))) is not None]
        durable.error = cpu.error = fig.error

    def big_download(self, asset: dict[str, Any]) -> None:
        fig = Figure("download one 100 MiB file", "MB/s", reference_name="nginx static", goal="ratio >= 0.5")
        fig.client = "bench/client.py: one keep-alive socket, 1 MiB reads"
        self.figures.append(fig)
        self.through_blob.append(fig)

        def downloader(url: str, pids: dict[str, list[int]]) -> Callable[..., Sample]:
            def run(seconds: float | None = None) -> Sample:
                job = {"url": url, "mode": "get", "count": 1000, "duration": seconds or self.args.seconds}
                result, cpu = python_client(job, servers=pids)
                bad = sum(n for status, n in result["statuses"].items() if status != "200")
                return Sample(
                    result["bytes"] / sum(result["times"]) / 1e6,
                    client_cpu=result["client_cpu_seconds"] / result["wall"],
                    server_cpu=cpu,
                    errors=bad,
                    requests=len(result["times"]),
                    others_cpu=result["others_cpu"],
                )

            return run

        coffer = downloader(asset["publicUrl"], self.coffer_pids())
        nginx = downloader(self.nginx.url + "/static/big.bin", {"nginx": self.nginx.pids()})
        self.pair(fig, coffer, nginx, warmup=self.warm(coffer, nginx))

    def small_gets(self, asset: dict[str, Any]) -> None:
        rate = Figure("public GET of a 4 KiB file", "req/s", reference_name="nginx static")
        p99 = Figure(
            "public GET of a 4 KiB file, p99",
            "ms",
            reference_name="nginx static",
            lower_is_better=True,
            derived=True,
        )
        cpu = Figure(
            "public GET of a 4 KiB file: CPU per request",
            "ms",
            reference_name="minimal FastAPI route, in the same repetitions",
            goal="ratio <= 1.5",
            derived=True,
        )
        rate.client = p99.client = cpu.client = "wrk, 32 connections"
        cpu.note = (
            "CPU (utime + stime) of every Coffer process ÷ requests completed, per repetition; the "
            "minimal route's likewise, a wrk run of it after each nginx run; ratio Coffer ÷ route"
        )
        self.figures += [rate, p99, cpu]
        self.through_blob += [rate, p99, cpu]
        coffer = self.wrk_get(asset["publicUrl"], self.coffer_pids(), 32)
        nginx = self.wrk_get(self.nginx.url + "/static/small.bin", {"nginx": self.nginx.pids()}, 32)
        minimal = self.wrk_get(
            f"{self.reference.url}/api/assets/{asset['id']}",
            {"reference": self.reference.pids()},
            32,
            headers=self.headers(),
        )
        nginx_then_minimal, minimal_runs = alongside(nginx, minimal)
        runs = self.pair(
            rate,
            coffer,
            nginx_then_minimal,
            warmup=self.warm(coffer, nginx, minimal),
            also=[(p99, lambda s: s.p99_ms)],
        )
        cpu.samples = [v for c, _ in runs if (v := cpu_ms_per_request(c)) is not None]
        cpu.reference_samples = [v for m in minimal_runs if (v := cpu_ms_per_request(m)) is not None]
        cpu.error = rate.error

    def asset_gets(self, asset: dict[str, Any]) -> None:
        rate = Figure("GET /api/assets/:id", "req/s", reference_name="minimal FastAPI route")
        p99 = Figure(
            "GET /api/assets/:id, p99",
            "ms",
            reference_name="minimal FastAPI route",
            goal="ratio <= 5",
            derived=True,
        )
        cpu = Figure(
            "GET /api/assets/:id: CPU per request",
            "ms",
            reference_name="minimal FastAPI route",
            goal="ratio <= 5",
            derived=True,
        )
        rate.client = p99.client = cpu.client = "wrk, 32 connections, one key (auth answer cached)"
        p99.note = "at 32 connections; ratio Coffer ÷ route"
        cpu.note = (
            "CPU (utime + stime) of every Coffer process ÷ requests completed, per repetition; the "
            "route's likewise; ratio Coffer ÷ route"
        )
        self.figures += [rate, p99, cpu]
        coffer = self.wrk_get(
            f"{self.stack.edge_url}/api/assets/{asset['id']}", self.coffer_pids(), 32, headers=self.headers()
        )
        ref = self.wrk_get(
            f"{self.reference.url}/api/assets/{asset['id']}",
            {"reference": self.reference.pids()},
            32,
            headers=self.headers(),
        )
        self.pair(
            rate,
            coffer,
            ref,
            warmup=self.warm(coffer, ref),
            also=[(p99, lambda s: s.p99_ms), (cpu, cpu_ms_per_request)],
        )

    def scoped_asset_gets(self, asset: dict[str, Any]) -> None:
        """Issue 46: the asset GET with a limited key (read-only, client networks) beside a full
        key, alternating in the same run: the scope check (an action looked up in the matched
        route, an address in a network) costs no measurable time."""
        scoped = str(
            auth_cli(
                self.stack,
                "create-key",
                "--org",
                str(asset["organizationId"]),
                "--scope",
                "read-only",
                "--network",
                "127.0.0.0/8",
            )["key"]
        )
        httpx.get(
            self.stack.edge_url + "/api/folders", headers=self.headers(scoped), timeout=30
        ).raise_for_status()
        rate = Figure(
            "GET /api/assets/:id with a read-only key limited to 127.0.0.0/8",
            "req/s",
            reference_name="the same GET with a full key",
        )
        cpu = Figure(
            "GET /api/assets/:id with a read-only key limited to 127.0.0.0/8: CPU per request",
            "ms",
            reference_name="the same GET with a full key",
            goal="ratio <= 1.05",
            derived=True,
        )
        rate.client = cpu.client = "wrk, 32 connections, one key each (auth answers cached)"
        cpu.note = "CPU (utime + stime) of every Coffer process ÷ requests completed; ratio scoped ÷ full"
        self.figures += [rate, cpu]
        url = f"{self.stack.edge_url}/api/assets/{asset['id']}"
        limited = self.wrk_get(url, self.coffer_pids(), 32, headers=self.headers(scoped))
        full = self.wrk_get(url, self.coffer_pids(), 32, headers=self.headers())
        self.pair(rate, limited, full, warmup=self.warm(limited, full), also=[(cpu, cpu_ms_per_request)])

    def traced_asset_gets(self, asset: dict[str, Any]) -> None:
        """``GET /api/assets/:id`` with tracing on beside tracing off, alternating in the same
        run: two more stacks on the same data, exporting to bench/otlp_sink.py, one sampling
        every request, one none (all of tracing's code runs, no span is recorded). Issue 28:
        with tracing on, the route costs its spans and nothing more."""
        on = Figure(
            "GET /api/assets/:id with tracing on, every request traced: CPU per request",
            "ms",
            reference_name="tracing off",
            derived=True,
        )
        unsampled = Figure(
            "GET /api/assets/:id with tracing on, no span recorded: CPU per request",
            "ms",
            reference_name="tracing off",
            goal="ratio <= 1.1",
            derived=True,
        )
        beyond = Figure(
            "GET /api/assets/:id, every request traced: CPU per request beside tracing off and its spans",
            "ms",
            reference_name="tracing off + the spans",
            goal="ratio <= 1.1",
            derived=True,
        )
        on.client = unsampled.client = "wrk, 32 connections, one key (auth answer cached)"
        beyond.client = (
            f"wrk, 32 connections, each pausing {TRACE_PAUSE_MS} ms on average after an answer (an even "
            "load, the same for every side), one key (auth answer cached)"
        )
        self.figures += [on, beyond, unsampled]
        self.sink = OtlpSink(log=self.root / "logs" / "otlp-sink.log")
        self.sink.start()
        self.pricing_sink = OtlpSink(log=self.root / "logs" / "otlp-sink-pricing.log")
        self.pricing_sink.start()
        self.traced = traced_stack(self.root, self.stack, self.sink)
        self.unsampled = traced_stack(self.root, self.stack, self.sink, sampled=False)
        self.traced_reference = ReferenceApp(
            log=self.root / "logs" / "reference-traced.log", env=tracing_env(self.pricing_sink)
        )
        for server in (self.traced, self.unsampled, self.traced_reference):
            server.start()
        log(
            f"traced stacks up: edge {self.traced.edge_url} (every request), {self.unsampled.edge_url} (none)"
        )
        path = f"/api/assets/{asset['id']}"

        def load(stack: Any, **kw: Any) -> Callable[..., Sample]:
            pids = {name: [proc.pid] for name, proc in stack.processes.items()}
            return self.wrk_get(stack.edge_url + path, pids, 32, headers=self.headers(), **kw)

        def minimal(app: ReferenceApp) -> Callable[..., Sample]:
            pids = {"reference": app.pids()}
            return self.wrk_get(app.url + path, pids, 32, headers=self.headers(), pause_ms=TRACE_PAUSE_MS)

        traced, quiet, untraced = load(self.traced), load(self.unsampled), load(self.stack)
        # The same requests at an even load: CPU per request falls as a service gets busier
        # (reads share a pipeline, the loop wakes less often), so a slower traced stack at full
        # load would pay for its lower rate as well as for its spans.
        even = (
            load(self.traced, pause_ms=TRACE_PAUSE_MS),
            load(self.stack, pause_ms=TRACE_PAUSE_MS),
            minimal(self.traced_reference),
            minimal(self.reference),
        )
        for run in (traced, quiet, untraced, *even):
            run(self.args.warmup)
        before, requests = _settled(self.sink.spans), 0
        runs: list[tuple[Sample, Sample, Sample]] = []
        even_runs: list[list[Sample]] = []
        for _ in range(self.args.reps):
            t = traced()
            runs.append((t, quiet(), untraced()))
            even_runs.append([run() for run in even])
            requests += t.requests + even_runs[-1][0].requests
        spans = _settled(self.sink.spans) - before
        # Stopped at once: each runs a webhook dispatcher of its own on this stack's database,
        # and dispatchers that share an endpoint's queue hold it to its concurrency bound (the
        # webhook figures ran at 40 deliveries a second beside them, in every full run).
        for extra in (self.traced, self.unsampled, self.traced_reference):
            extra.stop()
        self.traced = self.unsampled = self.traced_reference = None
        per_request = spans / requests if requests else 0.0
        price_ms = span_price_ms(self.pricing_sink.url)
        client_ms = client_span_price_ms(self.pricing_sink.url, self.reference.url + path)
        # Per repetition: CPU ms a request of the traced stack, the untraced one, and a server
        # span as FastAPI's telemetry makes it (the minimal route traced, less untraced).
        even_ms = [
            (ms[0], ms[1], ms[2] - ms[3])
            for samples in even_runs
            if None not in (ms := [cpu_ms_per_request(sample) for sample in samples])
        ]
        for figure, index in ((on, 0), (unsampled, 1)):
            figure.samples = [v for r in runs if (v := cpu_ms_per_request(r[index])) is not None]
            figure.reference_samples = [v for r in runs if (v := cpu_ms_per_request(r[2])) is not None]
            figure.server_cpu = {
                name: statistics.median(r[index].server_cpu.get(name, 0.0) for r in runs)
                for name in runs[0][index].server_cpu
            }
            figure.others_cpu = max(max(s.others_cpu for s in r) for r in runs)
            errors = sum(r[index].errors + r[2].errors for r in runs)
            if errors > 0.01 * sum(r[index].requests + r[2].requests for r in runs):
                figure.error = f"{errors} requests failed or were not 2xx"

        # edge's server and client spans and metadata's server span, each priced in this run.
        beyond.samples = [traced_ms for traced_ms, _, _ in even_ms]
        beyond.reference_samples = [off_ms + 2 * server + client_ms for _, off_ms, server in even_ms]
        beyond.others_cpu = max(sample.others_cpu for samples in even_runs for sample in samples)
        if any(sample.errors for samples in even_runs for sample in samples):
            beyond.error = "requests failed or were not 2xx at the even load"

        def per_process(index: int) -> str:
            """Median CPU ms per request of each busy process, in the runs of one stack."""
            shares = []
            for name in runs[0][index].server_cpu:
                ms = [
                    1000 * r[index].server_cpu.get(name, 0.0) / r[index].rate for r in runs if r[index].rate
                ]
                if ms and statistics.median(ms) >= 0.01:
                    shares.append(f"{name} {statistics.median(ms):.2f}")
            return ", ".join(shares)

        on.note = (
            f"{per_request:.2f} spans per request reached the collector ({spans:,} for {requests:,} "
            f"traced requests); a server span costs {1000 * price_ms:.0f} µs of CPU to make, batch and "
            "export (priced in the harness in the same run); CPU ms per request by process, every "
            f"request traced: {per_process(0)}; no span recorded: {per_process(1)}; tracing off: "
            f"{per_process(2)}"
        )

        def median_of(index: int) -> float:
            return statistics.median(ms[index] for ms in even_ms) if even_ms else float("nan")

        rates = ", ".join(
            f"{name} {statistics.median(samples[i].rate for samples in even_runs):,.0f}"
            for i, name in enumerate(("traced", "off", "minimal route traced", "minimal route off"))
        )
        beyond.note = (
            f"every request traced against tracing off, both at the same even load (req/s: {rates}); "
            f"tracing off {median_of(1):.2f} ms a request, plus the spans a traced request makes "
            "(edge's server and client spans, metadata's server span), each priced as its "
            "instrumentation makes it, in this run: a server span as FastAPI's telemetry makes it, "
            "the minimal route traced less untraced at the same load "
            f"({1000 * median_of(2):.0f} µs), a client span as coffer_kit's aiohttp trace config "
            f"makes it, calls to the minimal route with it less without, in the harness "
            f"({1000 * client_ms:.0f} µs); ratio traced ÷ (tracing off + 2 server spans + 1 client "
            "span): 1.0 = the route costs its spans and nothing more"
        )
        unsampled.note = (
            "tracing on (FastAPI's server spans, coffer_kit's client spans, propagation, the exporter) "
            "with the sampler set to always_off, so no span is made: the tracing code's cost beside "
            "its spans; "
            "ratio ÷ tracing off, 1.0 = nothing but the spans costs"
        )

    def idle_rss(self) -> None:
        """VmRSS of each service after start and one 4 KiB upload, once idle (bench/footprint.py's
        measure)."""
        log("measuring: idle RSS")
        time.sleep(IDLE_SECONDS)
        rss = idle_rss_mib({name: proc.pid for name, proc in self.stack.processes.items()})
        client = f"none: VmRSS read after {IDLE_SECONDS:g}s without a request"
        for name, mib in rss.items():
            self.figures.append(Figure(f"idle RSS of {name}", "MiB", samples=[mib], client=client))
        # Issue 27's goal is the four services' (edge, auth, metadata, blob); the webhook
        # dispatcher, metadata's second role, came later and is summed in a row of its own.
        services = {name: mib for name, mib in rss.items() if name != "dispatcher"}
        four = Figure(
            f"idle RSS of the {len(services)} services, summed",
            "MiB",
            samples=[sum(services.values())],
            goal="value <= 250",
            client=client,
        )
        every = Figure(
            f"idle RSS of the {len(rss)} processes (the services and the webhook dispatcher"
            f"{'' if 'dispatcher' in rss else ', inside metadata'}), summed",
            "MiB",
            samples=[sum(rss.values())],
            client=client,
        )
        for total in (four, every):
            total.note = f"after start and one 4 KiB upload, then {IDLE_SECONDS:g}s idle; one reading"
            if self.production:
                total.note += "; moto's S3 server is not one of them"
        self.figures += [four, every]

    def listing(self) -> None:
        pids = self.coffer_pids()
        base = f"{self.stack.edge_url}/api/assets?limit=50"
        for label, query, connections, goal in (
            ("", "", 1, "value <= 25"),
            (", 16 connections", "", 16, None),
            (", offset 99,950", "&offset=99950", 1, "value <= 25"),
            # The deepest skip since pages past the middle are found from the oldest end.
            (", offset 49,975", "&offset=49975", 1, None),
        ):
            p50, p99, rate = self.latency_figures(
                f"GET /api/assets?limit=50 at 100k assets{label}",
                "req/s",
                f"wrk, {connections} connection{'s' if connections > 1 else ''}",
                goal=goal,
            )
            p99.note = (
                "" if connections > 1 else "one client, so the latency is the service's own, not queueing"
            )
            run = self.wrk_get(base + query, pids, connections, headers=self.headers(self.list_key))
            self.pair(
                p99,
                run,
                None,
                warmup=self.warm(run),
                metric=lambda s: s.p99_ms,
                also=[(p50, lambda s: s.p50_ms), (rate, lambda s: s.rate)],
            )
            if connections == 16:
                self.listing_against_asset_get(rate)

    def listing_against_asset_get(self, listing: Figure) -> None:
        """Issue 27's listing goal: pages of 50 at 16 connections against the asset GET at 32,
        requests a second, medians of the same run (asked for only when both groups run)."""
        asset_get = next((f for f in self.figures if f.name == "GET /api/assets/:id"), None)
        if asset_get is None or not asset_get.samples:
            return
        ratio = Figure(
            "GET /api/assets?limit=50 at 100k assets, 16 connections ÷ GET /api/assets/:id",
            "req/s",
            reference_name="GET /api/assets/:id, 32 connections, earlier in the same run",
            goal="ratio >= 0.25",
            derived=True,
        )
        ratio.samples, ratio.reference_samples = list(listing.samples), list(asset_get.samples)
        ratio.client = listing.client
        ratio.note = (
            "every asset of an organization holding 100,000, newest first; the total comes from the "
            "usage row, so the page costs the same at 10,000; ratio of the medians"
        )
        self.figures.append(ratio)

    def latency_figures(
        self, name: str, rate_unit: str, client: str, *, reference: str | None = None, goal: str | None = None
    ) -> tuple[Figure, Figure, Figure]:
        """The p50, p99 (which carries ``goal``) and rate figures of one load, added to the table."""
        p50, p99 = (
            Figure(
                f"{name}, {q}",
                "ms",
                reference_name=reference,
                goal=goal if q == "p99" else None,
                lower_is_better=True,
                derived=True,
            )
            for q in ("p50", "p99")
        )
        rate = Figure(name, rate_unit, reference_name=reference)
        for f in (p50, p99, rate):
            f.client = client
        self.figures += [p50, p99, rate]
        return p50, p99, rate

    def search(self) -> None:
        """Name search over the 100,000 seeded assets, newest first, one client, alternating
        with the plain first page of the same list (the reference: the same route, no ``q``)."""
        pids = self.coffer_pids()
        plain = self.wrk_get(
            f"{self.stack.edge_url}/api/assets?limit=50", pids, 1, headers=self.headers(self.list_key)
        )
        reference = "GET /api/assets?limit=50, no q"
        for label, q, goal in (
            ("a rare name", SEARCH_RARE, "value <= 25"),
            ("a common word", SEARCH_COMMON, None),
        ):
            base = f"{self.stack.edge_url}/api/assets?limit=50&q={q}"
            p50, p99, rate = self.latency_figures(
                f"search at 100k assets, {label} (q={q})",
                "req/s",
                "wrk, 1 connection",
                reference=reference,
                goal=goal,
            )
            p99.note = "page and total of GET /api/assets?limit=50&q=…; one client, so no queueing"
            run = self.wrk_get(base, pids, 1, headers=self.headers(self.list_key))
            self.pair(
                p99,
                run,
                plain,
                warmup=self.warm(run, plain),
                metric=lambda s: s.p99_ms,
                also=[(p50, lambda s: s.p50_ms), (rate, lambda s: s.rate)],
            )

    def timed_loop(
        self,
        call: Callable[[], httpx.Response],
        seconds: float,
        prepare: Callable[[], None] | None = None,
    ) -> Sample:
        """``call`` one after another for ``seconds``: rate, p50 and p99 of the calls alone
        (``prepare`` runs untimed before each)."""
        pids = self.coffer_pids()
        before = {name: cpu_seconds(p) for name, p in pids.items()}
        own = time.process_time()
        others = OthersMeter()
        times: list[float] = []
        errors = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            if prepare is not None:
                prepare()
            t0 = time.perf_counter()
            response = call()
            times.append(time.perf_counter() - t0)
            errors += not response.is_success
        wall = time.perf_counter() - started
        after = {name: cpu_seconds(p) for name, p in pids.items()}
        times.sort()
        return Sample(
            len(times) / sum(times),
            p50_ms=times[len(times) // 2] * 1000,
            p99_ms=times[min(len(times) - 1, int(len(times) * 0.99))] * 1000,
            client_cpu=(time.process_time() - own) / wall,
            server_cpu={name: (after[name] - before[name]) / wall for name in pids},
            errors=errors,
            requests=len(times),
            others_cpu=others.cores(),
        )

    def folder_move(self) -> None:
        """PATCH /api/folders/:id moving a folder that holds 10,000 assets, back and forth,
        alternating with the same moves of an empty folder (the reference)."""
        assert self.seeded is not None
        reference = "the same move of an empty folder"
        p50, p99, rate = self.latency_figures(
            f"move a folder holding {MOVING_ASSETS:,} assets",
            "moves/s",
            "the harness: httpx, 1 keep-alive connection, one move after another",
            reference=reference,
            goal="value <= 100",
        )
        p99.note = "one transaction; the assets keep their folder, so the move touches one row"
        seeded = self.seeded
        with httpx.Client(
            base_url=self.stack.edge_url, headers=self.headers(self.list_key), timeout=30
        ) as client:
            empty = client.post("/api/folders", json={"name": "empty", "parentId": seeded.parents[0]})
            empty.raise_for_status()

            def mover(folder_id: str) -> Callable[..., Sample]:
                # Both folders start in the first parent: every move changes the parent.
                parents = itertools.cycle(seeded.parents[::-1])

                def move() -> httpx.Response:
                    return client.patch(f"/api/folders/{folder_id}", json={"parentId": next(parents)})

                def run(seconds: float | None = None) -> Sample:
                    return self.timed_loop(move, seconds or self.args.seconds)

                return run

            full, bare = mover(self.seeded.moving_folder), mover(empty.json()["id"])
            self.pair(
                p99,
                full,
                bare,
                warmup=self.warm(full, bare),
                metric=lambda s: s.p99_ms,
                also=[(p50, lambda s: s.p50_ms), (rate, lambda s: s.rate)],
            )

    def tus_uploads(self) -> None:
        """100 MiB through tus in 5 MiB chunks beside the same file through POST /api/assets,
        alternating, and the services' CPU per chunk."""
        rate = Figure(
            "upload one 100 MiB file through tus, 5 MiB chunks",
            "MB/s",
            reference_name="the same file through POST /api/assets (multipart), same run",
            goal="ratio >= 0.8",
        )
        cpu = Figure("tus: CPU per 5 MiB chunk, all services", "ms", derived=True)
        rate.client = cpu.client = "bench/client.py: httpx, 1 connection, chunks one after another"
        cpu.note = "CPU (utime + stime) of every Coffer process over a tus upload ÷ its 20 chunks"
        self.figures += [rate, cpu]
        self.through_blob += [rate, cpu]
        log(f"measuring: {rate.name}")
        pids = self.coffer_pids()
        job = {"size": BIG, "count": 1, "concurrency": 1, "headers": self.headers()}
        tus_job = {**job, "url": self.stack.edge_url + "/api/uploads/tus", "mode": "tus", "chunk": 5 * MIB}
        post_job = {**job, "url": self.stack.edge_url + "/api/assets", "mode": "multipart"}
        chunks = -(-BIG // (5 * MIB))
        for rep in range(self.args.reps + 1):  # the first of each is the warm-up
            results = []
            for one, ok in ((tus_job, "204"), (post_job, "201")):
                result, server = python_client(one, servers=pids)
                if result["statuses"] != {ok: 1}:
                    raise RuntimeError(
                        f"{one['mode']} upload failed: {result['statuses']} {result['errors']}"
                    )
                results.append((result, server))
            if not rep:
                continue
            (tus_result, tus_cpu), (post_result, _) = results
            rate.samples.append(BIG / tus_result["times"][0] / 1e6)
            rate.reference_samples.append(BIG / post_result["times"][0] / 1e6)
            # server CPU is in cores over the client's window: back to seconds, per chunk.
            cpu.samples.append(sum(tus_cpu.values()) * tus_result["wall"] / chunks * 1000)
            rate.server_cpu = {name: tus_cpu.get(name, 0.0) for name in pids}

    def token_uploads(self) -> None:
        """A 4 KiB upload with an upload token (minted just before, not timed) beside a keyed one."""
        rate = Figure(
            "upload a 4 KiB file with an upload token, one client",
            "files/s",
            reference_name="the same upload with the key",
            goal="ratio >= 0.5",
        )
        p50 = Figure(
            "upload a 4 KiB file with an upload token, p50",
            "ms",
            reference_name="the same upload with the key",
            lower_is_better=True,
            derived=True,
        )
        for f in (rate, p50):
            f.client = "the harness: httpx, 1 keep-alive connection; minting the token is not timed"
        rate.note = (
            "the token costs two calls to auth (resolve, claim) where a key is answered from edge's"
            " cache; server CPU includes minting"
        )
        self.figures += [rate, p50]
        self.through_blob += [rate, p50]
        body = os.urandom(SMALL)
        with httpx.Client(base_url=self.stack.edge_url, timeout=30) as client:

            def keyed() -> httpx.Response:
                files = {"file": ("small.bin", body, "application/octet-stream")}
                return client.post("/api/assets", headers=self.headers(), files=files)

            def tokened() -> httpx.Response:
                return client.post(
                    tokens.pop(), files={"file": ("small.bin", body, "application/octet-stream")}
                )

            tokens: list[str] = []

            def mint() -> None:
                """A browser gets its token from its server before uploading: not timed."""
                minted = client.post("/api/upload-tokens", headers=self.headers(), json={})
                minted.raise_for_status()
                tokens.append(minted.json()["url"])

            def with_tokens(seconds: float | None = None) -> Sample:
                return self.timed_loop(tokened, seconds or self.args.seconds, prepare=mint)

            def with_key(seconds: float | None = None) -> Sample:
                return self.timed_loop(keyed, seconds or self.args.seconds)

            self.pair(
                rate,
                with_tokens,
                with_key,
                warmup=self.warm(with_tokens, with_key),
                also=[(p50, lambda s: s.p50_ms)],
            )

    def disk(self) -> None:
        fig = Figure("disk: dd 100 MiB, conv=fdatasync (ceiling on upload MB/s)", "MB/s")
        fig.client = "dd, on the data dir's file system"
        fig.samples = disk_rate(self.stack.data_dir, reps=self.args.reps)
        small = Figure("disk: 4 KiB file + fsync, one writer (ceiling on durable small writes)", "files/s")
        small.client = "the harness: write, fsync file and directory"
        small.samples = [small_fsync_rate(self.stack.data_dir, seconds=1.0) for _ in range(3)]
        self.figures += [fig, small]

    def run(self) -> None:
        want = self.args.only or set(GROUPS)
        if "disk" in want:
            self.disk()
        try:
            small_asset = self.upload_one(SMALL)
        except Exception as exc:  # noqa: BLE001 - the rest of the table is still worth having
            small_asset = None
            log(f"uploads do not work yet: {exc}")
        if "idle-rss" in want:
            self.idle_rss()  # before any load: "after start and one upload"
        self.warm_auth()
        big_asset = None
        if small_asset and want & {"upload-big", "download"}:
            try:
                big_asset = self.big_uploads()
            except Exception as exc:  # noqa: BLE001
                log(f"100 MiB uploads failed: {exc}")
                for f in self.figures:
                    if not f.samples:
                        f.error = str(exc)[:300]
        if small_asset and "upload-small" in want:
            self.small_uploads()
        if small_asset and "upload-token" in want:
            self.token_uploads()
        if small_asset and "upload-tus" in want:
            self.tus_uploads()
        if big_asset and "download" in want:
            self.big_download(big_asset)
        if small_asset and "cdn-small" in want:
            self.small_gets(small_asset)
        if "asset-get" in want:
            if small_asset:
                self.asset_gets(small_asset)
            else:
                # Without uploads, a seeded row still exercises edge → auth → metadata.
                listing = httpx.get(
                    self.stack.edge_url + "/api/assets",
                    params={"limit": 1},
                    headers=self.headers(self.list_key),
                    timeout=30,
                ).json()
                self.asset_gets_with_key(listing["assets"][0])
        if "asset-get-traced" in want and small_asset:
            self.traced_asset_gets(small_asset)
        if "asset-get-scoped" in want and small_asset:
            self.scoped_asset_gets(small_asset)
        if "list" in want:
            self.listing()
        if "search" in want:
            self.search()
        if "move" in want:
            self.folder_move()
        if small_asset and "webhooks" in want:
            self.webhooks()
        if small_asset and "transforms" in want:
            self.transforms()
        for f in self.figures:
            f.finish()

    def image_upload(self, data: bytes, name: str) -> dict[str, Any]:
        """One JPEG uploaded by the harness (setup, not measured)."""
        response = httpx.post(
            self.stack.edge_url + "/api/assets",
            headers=self.headers(),
            files={"file": (name, data, "image/jpeg")},
            timeout=120,
        )
        if response.status_code != 201:
            raise RuntimeError(f"POST /api/assets answered {response.status_code}: {response.text[:300]}")
        return response.json()  # type: ignore[no-any-return]

    def blob_setting(self, name: str) -> int:
        """A blob setting as the stack runs it: its environment, else the setting's default."""
        from coffer_blob.config import Settings

        value = self.stack.env().get(f"COFFER_{name.upper()}")
        return int(value) if value is not None else int(Settings.model_fields[name].default)

    def cdn_transform_threads(self) -> int:
        """libvips threads per render as the stack runs them (blob's CdnTuning, internal)."""
        from coffer_blob.config import CdnTuning

        value = self.stack.env().get("COFFER_CDN_TUNING")
        return (CdnTuning.model_validate_json(value) if value else CdnTuning()).transform_threads

    def transforms(self) -> None:
        """Image transforms (issue 26): a first ``thumb`` of a 12 MP JPEG against pyvips doing
        the same in the harness; a stored variant's CPU per request against an original of the
        same size; blob's peak memory (CDN process and its workers) while 50 variants of a 24 MP
        JPEG are asked for at once."""
        from transforms import (
            SIZE_12MP,
            SIZE_24MP,
            TreeMemory,
            bare_thumbnail_seconds,
            get_until_served,
            test_jpeg,
            timed_get,
        )

        from coffer_testkit.testing import descendants

        threads = self.cdn_transform_threads()
        workers = self.blob_setting("cdn_transform_workers")
        queue = self.blob_setting("cdn_transform_queue")
        memory_mb = self.blob_setting("cdn_transform_worker_memory_mb")
        first_ttfb = Figure(
            "first ?preset=thumb of a 12 MP JPEG: time to first byte",
            "ms",
            reference_name="pyvips thumbnail + webpsave of the same file, in the harness",
            goal="ratio <= 1.5",
        )
        first_whole = Figure(
            "first ?preset=thumb of a 12 MP JPEG: whole answer",
            "ms",
            reference_name="pyvips thumbnail + webpsave of the same file, in the harness",
            goal="ratio <= 1.5",
            derived=True,
        )
        cached = Figure(
            "public GET of a stored thumb variant",
            "req/s",
            reference_name="public GET of an original of the same size",
        )
        cached_cpu = Figure(
            "public GET of a stored thumb variant: CPU per request",
            "ms",
            reference_name="public GET of an original of the same size, in the same repetitions",
            goal="ratio <= 1.2",
            derived=True,
        )
        bound = 100 + workers * memory_mb
        peak = Figure(
            "blob's peak RSS (CDN + transform workers), 50 concurrent variants of a 24 MP JPEG",
            "MiB",
        )
        first_ttfb.client = first_whole.client = (
            "the harness: http.client, one request at a time on a new connection (connect untimed)"
        )
        cached.client = cached_cpu.client = "wrk, 32 connections"
        peak_pss = Figure(
            "blob's peak PSS (CDN + transform workers, shared pages once), the same run",
            "MiB",
            derived=True,
        )
        peak.client = peak_pss.client = (
            "the harness: 50 threads, one variant each, retrying 503s after Retry-After"
        )
        self.figures += [first_ttfb, first_whole, cached, cached_cpu, peak, peak_pss]
        self.through_blob += [first_ttfb, first_whole, cached, cached_cpu, peak, peak_pss]
        blob_pid = self.stack.processes["blob"].pid

        def pids() -> dict[str, list[int]]:
            return {**self.coffer_pids(), "blob": descendants(blob_pid)}

        # 1. First requests, each on an asset never transformed; the first of all (untimed)
        # starts the fork server and the workers.
        log("transforms: making and uploading 12 MP JPEGs")
        files, assets = [], []
        for rep in range(self.args.reps + 1):
            data = test_jpeg(*SIZE_12MP, seed=rep + 1)
            path = self.root / f"photo-12mp-{rep}.jpg"
            path.write_bytes(data)
            files.append(str(path))
            assets.append(self.image_upload(data, f"photo-12mp-{rep}.jpg"))
        log(f"measuring: {first_ttfb.name}")
        bodies: list[bytes] = []
        others = OthersMeter()
        for rep, (path, asset) in enumerate(zip(files, assets, strict=True)):
            status, ttfb, whole, body = timed_get(asset["publicUrl"] + "?preset=thumb")
            if status != 200:
                first_ttfb.error = first_whole.error = f"the CDN answered {status}: {body[:200]!r}"
                break
            bare = bare_thumbnail_seconds(path, threads=threads)
            if rep:  # the first is the warm-up
                first_ttfb.samples.append(1000 * ttfb)
                first_whole.samples.append(1000 * whole)
                first_ttfb.reference_samples.append(1000 * bare)
                first_whole.reference_samples.append(1000 * bare)
                bodies.append(body)
        first_ttfb.others_cpu = first_whole.others_cpu = others.cores()
        first_ttfb.note = (
            f"12 MP JPEGs, {len(first_ttfb.samples)} of them ({SIZE_12MP[0]}×{SIZE_12MP[1]}, "
            f"gradient + noise, q90, {len(bodies) and os.path.getsize(files[1]) / MIB:.1f} MiB), "
            "one first request each, after one untimed (workers start); the reference: "
            f"pyvips.Image.thumbnail(file, 256, height=256, crop=centre) + webpsave Q80 with {threads} "
            "libvips thread(s), as the CDN's workers run (blob's CdnTuning.transform_threads), right after "
            "each request; ratio Coffer ÷ pyvips"
        )
        first_whole.note = "the same requests, to their last byte"
        if not bodies:
            for fig in (cached, cached_cpu, peak, peak_pss):
                fig.error = "no variant was served"
            return

        # 2. A stored variant against an original of exactly its size.
        variant_url = assets[1]["publicUrl"] + "?preset=thumb"
        twin = self.upload_one(len(bodies[0]))
        variant = self.wrk_get(variant_url, pids(), 32)
        original = self.wrk_get(twin["publicUrl"], pids(), 32)
        self.pair(
            cached,
            variant,
            original,
            warmup=self.warm(variant, original),
            also=[(cached_cpu, cpu_ms_per_request)],
        )
        cached_cpu.note = (
            f"the thumb of one 12 MP JPEG above ({len(bodies[0]):,} bytes of webp), and random bytes "
            "of exactly that size uploaded as a file; CPU (utime + stime) of every Coffer process, "
            "blob's whole tree (fork server, workers) included, ÷ requests completed, per "
            "repetition; ratio variant ÷ original"
        )

        # 3. Memory under 50 concurrent first requests for 50 variants of one 24 MP JPEG.
        log(f"measuring: {peak.name}")
        big = self.image_upload(test_jpeg(*SIZE_24MP, seed=1000), "photo-24mp.jpg")
        urls = []
        for i in range(50):
            signed = httpx.get(
                f"{self.stack.edge_url}/api/assets/{big['id']}/url",
                params={"expiresIn": 3600, "w": 200 + 40 * i, "fmt": "webp"},
                headers=self.headers(),
                timeout=30,
            )
            signed.raise_for_status()
            urls.append(str(signed.json()["url"]))
        from concurrent.futures import ThreadPoolExecutor

        started = time.monotonic()
        others = OthersMeter()
        with TreeMemory(blob_pid) as memory, ThreadPoolExecutor(50) as pool:
            outcomes = list(pool.map(lambda url: get_until_served(url, started + 120), urls))
        wall = time.monotonic() - started
        statuses: dict[int, int] = {}
        for status, _ in outcomes:
            statuses[status] = statuses.get(status, 0) + 1
        retried = sum(n for _, n in outcomes)
        peak.samples = [memory.peak_rss / MIB]
        peak_pss.samples = [memory.peak_pss / MIB]
        peak.others_cpu = peak_pss.others_cpu = others.cores()
        if statuses != {200: 50}:
            peak.error = peak_pss.error = f"answers: {statuses}"
        peak_pss.note = (
            "PSS from /proc/PID/smaps_rollup, summed over the same tree in the same samples: pages "
            "the fork server's children share are counted once, as the pod's memory limit counts them"
        )
        peak.note = (
            f"summed VmRSS of blob's process tree (at most {memory.most_processes} processes), sampled "
            f"every 10 ms: {memory.baseline_rss / MIB:.0f} MiB before, peak {memory.peak_rss / MIB:.0f} "
            f"MiB (PSS, shared pages counted once: peak {memory.peak_pss / MIB:.0f} MiB); 50 signed "
            f"URLs, w=200…2160 webp of one {SIZE_24MP[0]}×{SIZE_24MP[1]} JPEG, all asked at once; "
            f"{retried} answers were 503 (the bound: {workers} workers + {queue} queued) and asked "
            f"again after Retry-After; served in {wall:.1f} s; the largest one process (a worker) "
            f"peaked at {memory.peak_child_rss / MIB:.0f} MiB. For context, the configured bound: "
            f"{workers} workers × COFFER_CDN_TRANSFORM_WORKER_MEMORY_MB {memory_mb} MiB + about "
            f"100 MiB for the CDN process = {bound} MiB (docs/operations.md's sizing rule; libvips's "
            "cache gets a quarter of a worker's memory, nothing else enforces it)"
        )

    def webhooks(self) -> None:
        """Webhooks (issue 25): 4 KiB uploads at a fixed 100/s into an organization with one
        endpoint subscribed to ``asset.created``; the time from each upload's 201 (as the client
        reads it) to its delivery, verified by a receiver process with the ``standardwebhooks``
        library. Then the 4 KiB upload rate of that organization against one with no endpoint,
        alternating in the same run."""
        p50 = Figure(
            f"webhook: an upload's 201 → its verified delivery, {WEBHOOK_UPLOADS_PER_SECOND} uploads/s, p50",
            "ms",
        )
        p99 = Figure(
            f"webhook: an upload's 201 → its verified delivery, {WEBHOOK_UPLOADS_PER_SECOND} uploads/s, p99",
            "ms",
            goal="value <= 1000",
        )
        rate = Figure(
            "upload 4 KiB files, 16 concurrent, one webhook endpoint subscribed",
            "files/s",
            reference_name="the same, into an organization with no endpoint",
            goal="ratio >= 0.9",
        )
        p50.client = p99.client = (
            f"the harness: httpx, {WEBHOOK_UPLOADS_PER_SECOND} uploads/s on a schedule (16 threads); "
            "bench/webhook_receiver.py verifies each delivery"
        )
        p50.note = p99.note = (
            "per repetition, the percentile over its uploads; CLOCK_MONOTONIC read by the client on "
            "the 201 and by the receiver once the signature verified; a delivery missing after "
            f"{WEBHOOK_WAIT_SECONDS:g} s fails the figure"
        )
        rate.client = "wrk, 16 connections (one new file per request)"
        rate_reps = WEBHOOK_RATE_REPS_FACTOR * self.args.reps
        rate.note = (
            "the dispatcher's backlog is drained between repetitions, untimed; its CPU while wrk "
            f"runs is counted; {rate_reps} pairs ({WEBHOOK_RATE_REPS_FACTOR} times --reps: one "
            "pair's ratio moves by ±30 % on this machine's disk)"
        )
        self.figures += [p50, p99, rate]
        self.through_blob += [p50, p99, rate]
        key, receiver = self.hooked_org("bench-hooks")
        try:
            latencies: list[list[float]] = []
            for _ in range(self.args.reps):
                got = self.paced_uploads(key, receiver)
                if isinstance(got, str):
                    p50.error = p99.error = got
                    break
                latencies.append(got)
            if self.webhook_upload_rates:
                reached = ", ".join(f"{r:.0f}" for r in self.webhook_upload_rates)
                p99.note += f"; the uploads reached {reached} per second (of {WEBHOOK_UPLOADS_PER_SECOND})"
            p50.samples = [_percentile(x, 0.5) for x in latencies]
            p99.samples = [_percentile(x, 0.99) for x in latencies]
            body = self.root / "wrk" / "hook-multipart.bin"
            content_type = multipart_body(body, SMALL)
            pids = self.coffer_pids()

            def uploads(with_key: str) -> Callable[..., Sample]:
                return self.wrk_get(
                    self.stack.edge_url + "/api/assets",
                    pids,
                    16,
                    method="POST",
                    body_file=body,
                    headers={**self.headers(with_key), "content-type": content_type},
                )

            hooked, plain = uploads(key), uploads(self.key)

            def hooked_then_drained(seconds: float | None = None) -> Sample:
                before = receiver.count()
                sample = hooked(seconds)
                receiver.wait_for(before + sample.requests - sample.errors, WEBHOOK_WAIT_SECONDS * 4)
                return sample

            self.pair(
                rate, hooked_then_drained, plain, warmup=self.warm(hooked_then_drained, plain), reps=rate_reps
            )
            if receiver.bad:
                rate.error = p50.error = p99.error = f"{receiver.bad} deliveries failed verification"
        finally:
            receiver.stop()

    def hooked_org(self, name: str) -> tuple[str, Receiver]:
        """A key of a new organization with one endpoint (asset.created), and the receiver,
        bench/webhook_receiver.py, that answers it (``stop`` it when done)."""
        org = auth_cli(self.stack, "create-org", "--name", name, "--quota-bytes", str(2**40))
        key = str(auth_cli(self.stack, "create-key", "--org", str(org["id"]))["key"])
        port = free_port()
        made = httpx.post(
            self.stack.edge_url + "/api/webhooks",
            headers=self.headers(key),
            json={"url": f"http://127.0.0.1:{port}/coffer-hook", "events": ["asset.created"]},
            timeout=30,
        )
        made.raise_for_status()
        return key, Receiver(port, made.json()["secret"], self.root / "logs" / "webhook-receiver.log")

    def paced_uploads(self, key: str, receiver: Receiver) -> list[float] | str:
        """``args.seconds`` of 4 KiB uploads started on a fixed schedule; each one's delay from
        its 201 to its verified delivery, in ms (or why the repetition failed)."""
        from concurrent.futures import ThreadPoolExecutor

        count = int(self.args.seconds * WEBHOOK_UPLOADS_PER_SECOND)
        created: dict[str, float] = {}
        failures: list[str] = []
        body = os.urandom(SMALL)
        with httpx.Client(base_url=self.stack.edge_url, headers=self.headers(key), timeout=30) as client:

            def upload() -> None:
                files = {"file": ("hook.bin", body, "application/octet-stream")}
                answer = client.post("/api/assets", files=files)
                at = time.monotonic()
                if answer.status_code != 201:
                    failures.append(f"POST /api/assets answered {answer.status_code}")
                    return
                created[answer.json()["id"]] = at

            with ThreadPoolExecutor(16) as pool:
                start = time.monotonic()
                for i in range(count):
                    delay = start + i / WEBHOOK_UPLOADS_PER_SECOND - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)  # the schedule of the load, not a wait for a condition
                    pool.submit(upload)
        if failures:
            return f"{len(failures)} of {count} uploads failed: {failures[0]}"
        missing = receiver.wait_for_ids(set(created), WEBHOOK_WAIT_SECONDS)
        if missing:
            return f"{len(missing)} of {count} deliveries did not arrive within {WEBHOOK_WAIT_SECONDS:g} s"
        self.webhook_upload_rates.append(count / (max(created.values()) - start))
        return [(receiver.arrived[asset] - at) * 1000 for asset, at in created.items()]

    def asset_gets_with_key(self, asset: dict[str, Any]) -> None:
        key, self.key = self.key, self.list_key
        try:
            self.asset_gets(asset)
        finally:
            self.key = key


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


class Receiver:
    """bench/webhook_receiver.py on ``port``, and what it printed: when each asset's event
    arrived (verified), and how many failed verification."""

    def __init__(self, port: int, secret: str, log_path: Path) -> None:
        self.arrived: dict[str, float] = {}
        self.bad = 0
        self._lock = threading.Lock()
        self._count = 0
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "bench" / "webhook_receiver.py"), str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(secret + "\n")
        self.proc.stdin.close()
        self.proc.stdout.readline()  # {"listening": port}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            what, _, at = line.strip().partition(" ")
            with self._lock:
                self._count += 1
                if what == "BAD":
                    self.bad += 1
                else:
                    self.arrived[what] = float(at)

    def count(self) -> int:
        with self._lock:
            return self._count

    def wait_for(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < count and time.monotonic() < deadline:
            time.sleep(0.05)

    def wait_for_ids(self, ids: set[str], timeout: float) -> set[str]:
        """Poll until every id arrived; the ones still missing at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                missing = ids - self.arrived.keys()
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._log.close()


def _settled(count: Callable[[], int], quiet: float = 1.0, timeout: float = 30.0) -> int:
    """``count()`` once it has stopped growing for ``quiet`` seconds (the services export in
    batches, a few hundred milliseconds after the spans end)."""
    deadline = time.monotonic() + timeout
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


def _exporting_provider(endpoint: str) -> Any:
    """A tracer provider of this process's own, batching its spans to ``endpoint`` over
    OTLP/HTTP, as a service's provider does."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint + "/v1/traces")))
    return provider


def span_price_ms(endpoint: str, spans: int = 20_000) -> float:
    """CPU milliseconds one span costs in this process: started with a server span's
    attributes, ended, batched and exported over OTLP/HTTP to ``endpoint`` (the export runs
    in the SDK's own thread, counted too), as a service's spans are."""
    from opentelemetry.trace import SpanKind

    provider = _exporting_provider(endpoint)
    tracer = provider.get_tracer("bench")
    attributes = {
        "http.request.method": "GET",
        "url.scheme": "http",
        "url.path": "/api/assets/ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9",
        "server.address": "127.0.0.1",
        "server.port": 8080,
        "network.protocol.version": "1.1",
    }
    started = time.process_time()
    for done in range(1, spans + 1):
        span = tracer.start_span("GET", kind=SpanKind.SERVER, attributes=attributes)
        span.set_attributes({"http.route": "/api/assets/{asset_id}", "http.response.status_code": 200})
        span.end()
        if done % 512 == 0:  # in batches the queue holds (2,048): none dropped, every one exported
            provider.force_flush()
    provider.shutdown()  # exports what is still queued, in this process's time
    return 1000 * (time.process_time() - started) / spans


def client_span_price_ms(endpoint: str, url: str, calls: int = 400, rounds: int = 12) -> float:
    """CPU milliseconds the kit's client span adds to one call from this process to ``url``
    (coffer_kit.tracing.client_trace_config, as edge's calls to the other services make it,
    against the empty trace config an untraced session has), under a sampled parent, exported
    over OTLP/HTTP to ``endpoint``: ``calls`` calls with it and as many without, alternating,
    ``rounds`` times (so a drift of the machine's speed falls on both alike)."""
    import asyncio

    import aiohttp

    from coffer_kit.tracing import client_trace_config

    provider = _exporting_provider(endpoint)
    tracer = provider.get_tracer("bench")

    async def cpu(session: aiohttp.ClientSession) -> float:
        started = time.process_time()
        for _ in range(calls):
            async with session.get(url) as response:
                await response.read()
        provider.force_flush()  # fewer than the queue holds (2,048): every span exported
        return time.process_time() - started

    async def both() -> tuple[float, float]:
        # Untraced, edge's session still has a trace config (its hooks tell a pooled connection
        # from a new one), so aiohttp's trace signals run either way: only the span is priced.
        async with (
            aiohttp.ClientSession(trace_configs=[client_trace_config(str, tracer)]) as traced,
            aiohttp.ClientSession(trace_configs=[aiohttp.TraceConfig()]) as untraced,
        ):
            with tracer.start_as_current_span("parent"):
                await cpu(traced), await cpu(untraced)  # warm: connections, code paths
                on = off = 0.0
                for _ in range(rounds):
                    on += await cpu(traced)
                    off += await cpu(untraced)
        return on, off

    on, off = asyncio.run(both())
    provider.shutdown()
    return 1000 * (on - off) / (calls * rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--production", action="store_true", help="PostgreSQL + S3 (moto) instead of SQLite + disk"
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("COFFER_BENCH_DATABASE_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL maintenance database with rights to create databases",
    )
    parser.add_argument("--reps", type=int, default=5, help="repetitions per figure (default 5)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per wrk repetition (default 3)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up per target (default 2)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="where results go")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, data)")
    add_warm_memory(parser)
    parser.add_argument(
        "--only",
        type=lambda v: set(v.split(",")),
        default=None,
        help=f"comma-separated figure groups: {','.join(GROUPS)} (results go to experiment.*)",
    )
    parser.add_argument(
        "--stack-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for Coffer's services, to try a change (results go to experiment.*)",
    )
    args = parser.parse_args(argv)
    if args.only and not args.only <= set(GROUPS):
        parser.error(f"--only takes {','.join(GROUPS)}")

    nginx_bin, wrk_bin = ensure_tools()
    started = time.monotonic()
    warmed = back_free_memory(args.warm_memory)
    root = Path(tempfile.mkdtemp(prefix="coffer-bench-"))
    os.chmod(root, 0o755)  # nginx runs as nobody and must reach its own subdirectory
    bench = Bench(args, nginx_bin, wrk_bin, root)
    mode = "production (PostgreSQL + S3 via moto)" if args.production else "embedded default (SQLite + disk)"
    others = OthersMeter()
    try:
        bench.start()
        bench.run()
    finally:
        bench.stop()
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    meta = {
        "mode": mode,
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "method": (
            f"{args.reps} repetitions per figure after a warm-up ({args.warmup:g}s per target), wrk runs of "
            f"{args.seconds:g}s, Coffer and reference alternating; medians, min–max in brackets; "
            f"{versions(nginx_bin, wrk_bin)}; everything on one machine, load included; {warmed}"
        ),
        "runtime_seconds": round(time.monotonic() - started),
        "other_jobs_cores": round(others.cores(), 2),
    }
    if args.production:
        meta["method"] += (
            "; the machine's PostgreSQL is this run's (its backends serve the stack): its CPU is not "
            "another job's, and not Coffer's either"
        )
    if args.production and bench.through_blob:
        meta["s3"] = (
            "blob stores in moto's S3 server (one local process, counted in Coffer's CPU as "
            "`s3 (moto)`), so these figures measure moto's S3 as much as Coffer: "
            + "; ".join(f.name for f in bench.through_blob)
        )
    stem = "latest-production" if args.production else "latest"
    if args.only or args.stack_env:
        stem = "experiment" + ("-production" if args.production else "")
        meta["method"] += (
            f"; partial or modified run: only={sorted(args.only or GROUPS)}, env={args.stack_env}"
        )
    md, js = write(args.out, stem, meta, bench.figures)
    print(f"\nCoffer benchmark, {mode}, {meta['date']}, commit {meta['commit']}")
    print(f"other jobs on the machine used {meta['other_jobs_cores']:.2f} cores on average during the run\n")
    if meta.get("s3"):
        print(f"S3: {meta['s3']}\n")
    print(table(bench.figures))
    print()
    print(details(bench.figures))
    print(
        f"\nwritten: {md.relative_to(REPO) if md.is_relative_to(REPO) else md}, "
        f"{js.relative_to(REPO) if js.is_relative_to(REPO) else js} ({meta['runtime_seconds']}s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
