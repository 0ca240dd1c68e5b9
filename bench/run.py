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
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import OthersMeter, RssSampler, Sample, Wrk, python_client  # noqa: E402
from report import Figure, details, table, write  # noqa: E402
from seed import seed_assets  # noqa: E402
from servers import Nginx, Production, ReferenceApp, auth_cli, coffer_stack, ensure_tools  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
BIG = 100 * MIB
SMALL = 4096
LIST_ASSETS = 100_000
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
# Figure groups, for --only.
GROUPS = ("disk", "upload-big", "upload-small", "download", "cdn-small", "asset-get", "list")


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
        self.figures: list[Figure] = []
        self.key = ""
        self.list_key = ""

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
        seconds = seed_assets(url, org_id=str(list_org["id"]), count=LIST_ASSETS)
        log(f"seeded {LIST_ASSETS:,} asset rows into metadata's database in {seconds:.1f}s (fixture)")
        self.stack.start()
        log(f"Coffer stack up: edge {self.stack.edge_url}, CDN {self.stack.public_cdn_url}")

    def stop(self) -> None:
        for thing in (self.stack, self.reference, self.nginx, self.production):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.stop()

    def coffer_pids(self) -> dict[str, list[int]]:
        pids = {name: [proc.pid] for name, proc in self.stack.processes.items()}
        if self.production:
            pids["s3 (moto)"] = self.production.pids()
        return pids

    def warm_auth(self) -> None:
        """One request per key first: edge's auth cache is then warm, as in steady state.

        (A cold edge hit by many concurrent requests for one key is another matter: see
        docs/performance.md, "cold auth cache".)
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
    ) -> list[tuple[Sample, Sample | None]]:
        """Warm up, then alternate Coffer and reference ``reps`` times; fill the figure(s)."""
        log(f"measuring: {figure.name}")
        if warmup:
            warmup()
        runs: list[tuple[Sample, Sample | None]] = []
        for _ in range(self.args.reps):
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
        fig = Figure(
            "upload 4 KiB files, 16 concurrent",
            "files/s",
            reference_name="nginx WebDAV PUT",
            goal="ratio >= 0.2",
        )
        fig.client = "wrk, 16 connections (one new file per request)"
        self.figures.append(fig)
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
        self.pair(fig, coffer, nginx, warmup=self.warm(coffer, nginx))

    def big_download(self, asset: dict[str, Any]) -> None:
        fig = Figure("download one 100 MiB file", "MB/s", reference_name="nginx static", goal="ratio >= 0.5")
        fig.client = "bench/client.py: one keep-alive socket, 1 MiB reads"
        self.figures.append(fig)

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
        rate = Figure(
            "public GET of a 4 KiB file", "req/s", reference_name="nginx static", goal="ratio >= 0.15"
        )
        p99 = Figure(
            "public GET of a 4 KiB file, p99",
            "ms",
            reference_name="nginx static",
            lower_is_better=True,
            derived=True,
        )
        rate.client = p99.client = "wrk, 32 connections"
        self.figures += [rate, p99]
        coffer = self.wrk_get(asset["publicUrl"], self.coffer_pids(), 32)
        nginx = self.wrk_get(self.nginx.url + "/static/small.bin", {"nginx": self.nginx.pids()}, 32)
        self.pair(rate, coffer, nginx, warmup=self.warm(coffer, nginx), also=[(p99, lambda s: s.p99_ms)])

    def asset_gets(self, asset: dict[str, Any]) -> None:
        rate = Figure(
            "GET /api/assets/:id", "req/s", reference_name="minimal FastAPI route", goal="ratio >= 0.5"
        )
        p99 = Figure(
            "GET /api/assets/:id, p99",
            "ms",
            reference_name="minimal FastAPI route",
            lower_is_better=True,
            derived=True,
        )
        rate.client = p99.client = "wrk, 32 connections, one key (auth answer cached)"
        self.figures += [rate, p99]
        coffer = self.wrk_get(
            f"{self.stack.edge_url}/api/assets/{asset['id']}", self.coffer_pids(), 32, headers=self.headers()
        )
        ref = self.wrk_get(
            f"{self.reference.url}/api/assets/{asset['id']}",
            {"reference": self.reference.pids()},
            32,
            headers=self.headers(),
        )
        self.pair(rate, coffer, ref, warmup=self.warm(coffer, ref), also=[(p99, lambda s: s.p99_ms)])

    def listing(self) -> None:
        pids = self.coffer_pids()
        base = f"{self.stack.edge_url}/api/assets?limit=50"
        for label, query, connections, goal in (
            ("", "", 1, "value <= 25"),
            (", 16 connections", "", 16, None),
            (", offset 99,950", "&offset=99950", 1, None),
        ):
            p50 = Figure(f"GET /api/assets?limit=50 at 100k assets{label}, p50", "ms", derived=True)
            p99 = Figure(
                f"GET /api/assets?limit=50 at 100k assets{label}, p99", "ms", goal=goal, derived=True
            )
            rate = Figure(f"GET /api/assets?limit=50 at 100k assets{label}", "req/s")
            for f in (p50, p99, rate):
                f.client = f"wrk, {connections} connection{'s' if connections > 1 else ''}"
            p99.note = (
                "" if connections > 1 else "one client, so the latency is the service's own, not queueing"
            )
            self.figures += [p50, p99, rate]
            run = self.wrk_get(base + query, pids, connections, headers=self.headers(self.list_key))
            self.pair(
                p99,
                run,
                None,
                warmup=self.warm(run),
                metric=lambda s: s.p99_ms,
                also=[(p50, lambda s: s.p50_ms), (rate, lambda s: s.rate)],
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
        self.warm_auth()
        try:
            small_asset = self.upload_one(SMALL)
        except Exception as exc:  # noqa: BLE001 - the rest of the table is still worth having
            small_asset = None
            log(f"uploads do not work yet: {exc}")
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
        if "list" in want:
            self.listing()
        for f in self.figures:
            f.finish()

    def asset_gets_with_key(self, asset: dict[str, Any]) -> None:
        key, self.key = self.key, self.list_key
        try:
            self.asset_gets(asset)
        finally:
            self.key = key


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
            f"{versions(nginx_bin, wrk_bin)}; everything on one machine, load included"
        ),
        "runtime_seconds": round(time.monotonic() - started),
        "other_jobs_cores": round(others.cores(), 2),
    }
    stem = "latest-production" if args.production else "latest"
    if args.only or args.stack_env:
        stem = "experiment" + ("-production" if args.production else "")
        meta["method"] += (
            f"; partial or modified run: only={sorted(args.only or GROUPS)}, env={args.stack_env}"
        )
    md, js = write(args.out, stem, meta, bench.figures)
    print(f"\nCoffer benchmark, {mode}, {meta['date']}, commit {meta['commit']}")
    print(f"other jobs on the machine used {meta['other_jobs_cores']:.2f} cores on average during the run\n")
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
