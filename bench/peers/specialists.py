"""Coffer beside the specialists (issue 49), all in one run: tus-node-server for resumable
uploads, thumbor for thumbnails, Directus for the one-shot upload and idle memory.

Installs, on the first run, tus-node-server (@tus/server + @tus/file-store) with ``npm ci`` as
bench/peers/tus-node/package-lock.json pins it, thumbor into its own virtual environment as
bench/peers/thumbor/requirements.txt pins it (``uv pip``; it never enters the project's lock),
and Directus as bench/peers/directus.py does; all under ~/.cache/coffer-bench/. Then starts
Coffer's embedded default stack and the three peers on 127.0.0.1, under one temporary directory,
and measures, each figure alternating Coffer and its peer, ``--reps`` times after a warm-up:

- idle memory: Coffer's processes summed against Directus's (after start, idle);
- one 100 MiB file, one-shot: Coffer ``POST /api/assets`` against Directus ``POST /files``;
- one 100 MiB file through tus in 5 MiB chunks: Coffer ``/api/uploads/tus`` against
  tus-node-server, and against Coffer's own one-shot upload of the same repetition;
- 4 KiB tus uploads (creation + one PATCH), 8 at a time: uploads/s;
- a first 256×256 WebP thumbnail of a 12 MP JPEG never asked for before (Coffer's ``thumb``
  preset against thumbor's ``/unsafe/256x256/filters:format(webp):quality(80)/``);
- a stored variant's throughput: wrk, 32 connections, on the thumbnail already made.

Writes bench/results/peers.{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench/
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/peers/

import directus as directus_peer
from load import IDLE_SECONDS, OthersMeter, Wrk, add_warm_memory, back_free_memory, rss_bytes
from report import Figure, details, table, write
from run import BIG, DEFAULT_POSTGRES, MIB, REPO, commit, log, machine
from servers import auth_cli, coffer_stack, ensure_tools, stop_process, wait_port

from coffer_testkit.testing import descendants, free_port, wait_healthy

PEERS = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "coffer-bench"
TUS_PINS = PEERS / "tus-node"
THUMBOR_PINS = PEERS / "thumbor" / "requirements.txt"
CHUNK = 5 * MIB
SMALL = 4096
SMALL_COUNT = 100
SMALL_CONCURRENCY = 8
THUMBOR_CONF = """\
# As thumbor's documentation configures a file-backed deployment: originals from a directory
# (file_loader), originals kept by file storage, and every result kept by the file result
# storage (results of unsafe URLs too), so a repeated request is answered from disk.
LOADER = 'thumbor.loaders.file_loader'
FILE_LOADER_ROOT_PATH = {images!r}
STORAGE = 'thumbor.storages.file_storage'
FILE_STORAGE_ROOT_PATH = {storage!r}
RESULT_STORAGE = 'thumbor.result_storages.file_storage'
RESULT_STORAGE_FILE_STORAGE_ROOT_PATH = {results!r}
RESULT_STORAGE_STORES_UNSAFE = True
RESULT_STORAGE_EXPIRATION_SECONDS = 0
ALLOW_UNSAFE_URL = True
QUALITY = 80
"""


def _stamp(*files: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


def install_tus() -> Path:
    """tus-node-server in the cache, exactly as the lock file pins it."""
    home = CACHE / "tus-node"
    pins = [TUS_PINS / "package.json", TUS_PINS / "package-lock.json", TUS_PINS / "server.mjs"]
    stamp = home / ".installed"
    if stamp.exists() and stamp.read_text() == _stamp(*pins):
        return home
    log(f"installing tus-node-server into {home} (npm ci)")
    home.mkdir(parents=True, exist_ok=True)
    for path in pins:
        shutil.copy(path, home / path.name)
    npm = ["npm", "--no-audit", "--no-fund", "--loglevel=error"]
    subprocess.run([*npm, "ci", "--ignore-scripts"], cwd=home, check=True)
    stamp.write_text(_stamp(*pins))
    return home


def install_thumbor() -> Path:
    """thumbor in a virtual environment of its own in the cache, as requirements.txt pins it."""
    home = CACHE / "thumbor"
    stamp = home / ".installed"
    if stamp.exists() and stamp.read_text() == _stamp(THUMBOR_PINS):
        return home
    log(f"installing thumbor into {home} (uv venv + uv pip install, Python 3.11)")
    shutil.rmtree(home, ignore_errors=True)
    uv = shutil.which("uv") or "uv"
    subprocess.run([uv, "venv", "-q", "-p", "3.11", str(home)], check=True)
    env = dict(os.environ, VIRTUAL_ENV=str(home))
    subprocess.run([uv, "pip", "install", "-q", "-r", str(THUMBOR_PINS)], env=env, check=True)
    stamp.write_text(_stamp(THUMBOR_PINS))
    return home


@dataclass
class Peer:
    """A peer server started as one command on a loopback port."""

    what: str
    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self, cmd: list[str], cwd: Path) -> None:
        logs = open(self.root / f"{self.what}.log", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=logs, stderr=logs)
        wait_port(self.port, self.proc, self.what, timeout=60)

    def pids(self) -> list[int]:
        return descendants(self.proc.pid) if self.proc else []

    def stop(self) -> None:
        stop_process(self.proc)


def start_tus(home: Path, root: Path) -> Peer:
    peer = Peer("tus-node-server", root)
    (root / "tus-files").mkdir(parents=True)
    peer.launch(["node", str(home / "server.mjs"), str(peer.port), str(root / "tus-files")], home)
    return peer


def start_thumbor(home: Path, root: Path) -> Peer:
    peer = Peer("thumbor", root)
    dirs = {name: root / f"thumbor-{name}" for name in ("images", "storage", "results")}
    for d in dirs.values():
        d.mkdir(parents=True)
    conf = root / "thumbor.conf"
    conf.write_text(THUMBOR_CONF.format(**{k: str(v) for k, v in dirs.items()}))
    cmd = [str(home / "bin" / "thumbor"), "--port", str(peer.port), "--ip", "127.0.0.1", "--conf", str(conf)]
    cmd += ["--log-level", "warning"]
    peer.launch(cmd, root)
    wait_healthy(peer.url + "/healthcheck", timeout=60)
    return peer


def wait_for_directus(seconds: float) -> Path:
    """Directus installed: waits up to ``seconds`` for an install under way (another run's)
    to finish before installing it here."""
    stamp = directus_peer.CACHE / ".installed"
    deadline = time.monotonic() + seconds
    while not stamp.exists() and time.monotonic() < deadline:
        time.sleep(5)
    return directus_peer.install()


def version_of(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()


def client(job: dict[str, Any], servers: dict[str, list[int]], ok: str) -> tuple[dict[str, Any], float]:
    """bench/client.py once; its result, and the servers' CPU seconds over it."""
    from load import cpu_seconds, python_client

    before = sum(cpu_seconds(p) for p in servers.values())
    result, _ = python_client(job, servers=servers)
    if result["statuses"] != {ok: job["count"]}:
        raise RuntimeError(f"{job['url']}: {result['statuses']} {result['errors']}")
    return result, sum(cpu_seconds(p) for p in servers.values()) - before


def measure(args: argparse.Namespace, root: Path) -> tuple[list[Figure], dict[str, Any]]:
    from transforms import SIZE_12MP, test_jpeg, timed_get

    _, wrk_bin = ensure_tools()
    tus_home, thumbor_home = install_tus(), install_thumbor()
    stack = coffer_stack(root, {})
    directus: directus_peer.Directus | None = None
    tus: Peer | None = None
    thumbor: Peer | None = None
    figures: list[Figure] = []
    info: dict[str, Any] = {}
    try:
        stack.migrate()
        org = auth_cli(stack, "create-org", "--name", "bench", "--quota-bytes", str(2**40))
        key = str(auth_cli(stack, "create-key", "--org", str(org["id"]))["key"])
        stack.start(timeout=300)  # a loaded machine imports slowly
        headers = {"x-api-key": key}
        httpx.get(stack.edge_url + "/api/folders", headers=headers, timeout=30).raise_for_status()
        tus, thumbor = start_tus(tus_home, root), start_thumbor(thumbor_home, root)
        if not args.no_directus:
            # Last, so that an install still under way elsewhere may end meanwhile.
            directus_home = wait_for_directus(args.directus_wait)
            directus = directus_peer.Directus(directus_home, root / "directus", args.database_url)
            directus.start()
        tus_version = "tus-node-server (@tus/server {}, @tus/file-store {}) on Node.js {}".format(
            *(
                __import__("json").loads(
                    (tus_home / "node_modules" / "@tus" / p / "package.json").read_text()
                )["version"]
                for p in ("server", "file-store")
            ),
            version_of(["node", "--version"]).lstrip("v"),
        )
        thumbor_version = version_of([str(thumbor_home / "bin" / "thumbor"), "--version"])
        directus_version = directus.version() if directus else "Directus (not run)"
        info["peers"] = [tus_version, thumbor_version, directus_version]
        log(f"up: Coffer {stack.edge_url}; {'; '.join(info['peers'])}")
        coffer_pids = {name: [proc.pid] for name, proc in stack.processes.items()}

        def coffer_tree() -> dict[str, list[int]]:
            return {name: descendants(proc.pid) for name, proc in stack.processes.items()}

        # 1. Idle memory, before any load (one small upload each first, as run.py does).
        httpx.post(
            stack.edge_url + "/api/assets",
            headers=headers,
            files={"file": ("a.bin", b"x" * SMALL)},
            timeout=30,
        ).raise_for_status()
        if directus:
            httpx.post(
                directus.url + "/files",
                headers=directus.headers(),
                files={"file": ("a.bin", b"x" * SMALL)},
                timeout=30,
            ).raise_for_status()
        idle = Figure(
            f"idle RSS, all processes summed (Coffer: the {len(stack.processes)} of the embedded default)",
            "MiB",
            reference_name=directus_version + " (its one process)",
            goal="ratio <= 1.0",
        )
        idle.client = f"none: VmRSS read after {IDLE_SECONDS:g}s without a request"
        for _ in range(3):
            time.sleep(IDLE_SECONDS)
            idle.samples.append(sum(rss_bytes(p) for pids in coffer_tree().values() for p in pids) / 2**20)
            if directus:
                idle.reference_samples.append(sum(rss_bytes(p) for p in directus.pids()) / 2**20)
        split = {n: sum(rss_bytes(p) for p in pids) / 2**20 for n, pids in coffer_tree().items()}
        idle.note = (
            "Coffer's processes: "
            + ", ".join(f"{n} {v:.0f}" for n, v in split.items())
            + (
                "; Directus's PostgreSQL backends not counted (Coffer's SQLite is in its processes); "
                "three readings 3 s apart"
            )
        )
        figures.append(idle)

        # 2. 100 MiB: Coffer one-shot, Coffer tus, tus-node tus, Directus one-shot, alternating.
        big = {"size": BIG, "count": 1, "concurrency": 1}
        jobs = {
            "coffer-post": (
                {**big, "mode": "multipart", "url": stack.edge_url + "/api/assets", "headers": headers},
                coffer_pids,
                "201",
            ),
            "coffer-tus": (
                {
                    **big,
                    "mode": "tus",
                    "chunk": CHUNK,
                    "url": stack.edge_url + "/api/uploads/tus",
                    "headers": headers,
                },
                coffer_pids,
                "204",
            ),
            "tus-node": (
                {**big, "mode": "tus", "chunk": CHUNK, "url": tus.url + "/files", "done_header": None},
                {"tus": tus.pids()},
                "204",
            ),
        }
        if directus:
            jobs["directus"] = (
                {**big, "mode": "multipart", "url": directus.url + "/files", "headers": directus.headers()},
                {"directus": directus.pids()},
                "200",
            )
        rates: dict[str, list[float]] = {name: [] for name in jobs}
        cpu_mb: dict[str, list[float]] = {name: [] for name in jobs}
        others = OthersMeter()
        log(f"measuring: 100 MiB uploads, {args.reps} repetitions after a warm-up, alternating")
        for rep in range(args.reps + 1):
            line = []
            for name, (job, pids, ok) in jobs.items():
                result, cpu = client(job, pids, ok)
                rate = BIG / result["times"][0] / 1e6
                line.append(f"{name} {rate:.0f}")
                if rep:
                    rates[name].append(rate)
                    cpu_mb[name].append(1000 * cpu / (BIG / 1e6))
            log(f"  {f'rep {rep}' if rep else 'warm-up'} MB/s: {', '.join(line)}")
        big_others = others.cores()
        ms = {n: statistics.median(v) for n, v in cpu_mb.items()}
        tus_fig = Figure(
            "upload one 100 MiB file through tus, 5 MiB chunks",
            "MB/s",
            reference_name=tus_version,
            goal="ratio >= 1.0",
            samples=rates["coffer-tus"],
            reference_samples=rates["tus-node"],
        )
        tus_fig.client = "bench/client.py: httpx, 1 connection, creation then 20 PATCHes"
        tus_fig.note = (
            f"server CPU per MB: Coffer {ms['coffer-tus']:.2f} ms, tus-node-server {ms['tus-node']:.2f} ms; "
            "Coffer fsyncs each chunk before answering it and makes an asset at the end; "
            "@tus/file-store appends to a file with fs.createWriteStream, never fsynced"
        )
        own = Figure(
            "the same ÷ Coffer's one-shot POST /api/assets of the same repetition",
            "MB/s",
            reference_name="Coffer POST /api/assets, 100 MiB",
            goal="ratio >= 0.8",
            samples=rates["coffer-tus"],
            reference_samples=rates["coffer-post"],
        )
        own.client = tus_fig.client
        figures += [tus_fig, own]
        if directus:
            up = Figure(
                "upload one 100 MiB file, one-shot",
                "MB/s",
                reference_name=directus_version + ", POST /files",
                goal="ratio >= 1.0",
                samples=rates["coffer-post"],
                reference_samples=rates["directus"],
            )
            up.client = "bench/client.py: httpx, 1 connection, streamed multipart body"
            up.note = (
                f"server CPU per MB: Coffer {ms['coffer-post']:.2f} ms, Directus {ms['directus']:.2f} ms "
                "(its PostgreSQL backends not counted). " + directus_peer.DIRECTUS_PROMISE
            )
            figures.append(up)
        for f in figures[1:]:
            f.others_cpu = big_others

        # 3. 4 KiB tus uploads, 8 at a time.
        small = {
            "size": SMALL,
            "count": SMALL_COUNT,
            "concurrency": SMALL_CONCURRENCY,
            "mode": "tus",
            "chunk": SMALL,
        }
        small_jobs = {
            "coffer": (
                {**small, "url": stack.edge_url + "/api/uploads/tus", "headers": headers},
                coffer_pids,
            ),
            "tus-node": ({**small, "url": tus.url + "/files", "done_header": None}, {"tus": tus.pids()}),
        }
        creations = Figure(
            "4 KiB uploads through tus (creation + one PATCH), 8 at a time",
            "uploads/s",
            reference_name=tus_version,
            goal="ratio >= 1.0",
        )
        creations.client = "bench/client.py: httpx, 8 connections, 100 uploads a repetition"
        others = OthersMeter()
        log(f"measuring: {creations.name}")
        for rep in range(args.reps + 1):
            for name, (job, pids) in small_jobs.items():
                result, _ = client(job, pids, "204")
                if rep:
                    (creations.samples if name == "coffer" else creations.reference_samples).append(
                        SMALL_COUNT / result["wall"]
                    )
        creations.others_cpu = others.cores()
        creations.note = (
            "Coffer makes an asset (row, quota, event) per upload; "
            "tus-node-server writes a file and its .json"
        )
        figures.append(creations)

        # 4. Thumbnails: a first 256x256 WebP of a 12 MP JPEG, then a stored one under load.
        log("thumbnails: making and uploading 12 MP JPEGs")
        images = root / "thumbor-images"
        pairs = []
        for rep in range(args.reps + 1):
            data = test_jpeg(*SIZE_12MP, seed=rep + 1)
            name = f"photo-12mp-{rep}.jpg"
            (images / name).write_bytes(data)
            r = httpx.post(
                stack.edge_url + "/api/assets",
                headers=headers,
                files={"file": (name, data, "image/jpeg")},
                timeout=120,
            )
            r.raise_for_status()
            pairs.append(
                (
                    r.json()["publicUrl"] + "?preset=thumb",
                    f"{thumbor.url}/unsafe/256x256/filters:format(webp):quality(80)/{name}",
                )
            )
        first = Figure(
            "first 256×256 WebP thumbnail of a 12 MP JPEG: whole answer",
            "ms",
            reference_name=thumbor_version,
            goal="ratio <= 1.0",
        )
        first.client = "the harness: http.client, one request at a time on a new connection (connect untimed)"
        others = OthersMeter()
        log(f"measuring: {first.name}")
        refused = {"Coffer": 0, "thumbor": 0}
        for rep, (coffer_url, thumbor_url) in enumerate(pairs):
            for side, url, into in (
                ("Coffer", coffer_url, first.samples),
                ("thumbor", thumbor_url, first.reference_samples),
            ):
                # Until the thumbnail arrives: a 503 (a render past its time limit on a loaded
                # machine) is asked again at once, as a client would, and its time counts.
                started = time.perf_counter()
                while True:
                    status, _, _, body = timed_get(url)
                    if status != 503 or time.perf_counter() - started > 120:
                        break
                    refused[side] += rep > 0
                whole = time.perf_counter() - started
                if status != 200 or not body.startswith(b"RIFF"):
                    raise RuntimeError(f"{url}: {status} {body[:100]!r}")
                if rep:  # the first is the warm-up (Coffer's transform workers start)
                    into.append(1000 * whole)
        first.others_cpu = others.cores()
        first.note = (
            "each request for an image never asked for before; Coffer's thumb preset is 256×256 cover, "
            "WebP q80 (libvips in a transform worker); thumbor's URL 256x256 crops to fill, "
            "format(webp), quality(80) (Pillow); thumbor reads the file from its file_loader's directory, "
            "Coffer from its blob store; 503s asked again at once (their time counted): "
            f"Coffer {refused['Coffer']}, thumbor {refused['thumbor']}"
        )
        figures.append(first)

        wrk = Wrk(wrk_bin, root)
        stored = Figure(
            "GET of a stored 256×256 WebP thumbnail, 32 connections",
            "req/s",
            reference_name=thumbor_version + ", file result storage",
            goal="ratio >= 3.0",
        )
        stored.client = "wrk, 1 thread, 32 connections"
        coffer_url, thumbor_url = pairs[1]
        log(f"measuring: {stored.name}")
        c_cpu, t_cpu, oth = [], [], []
        for rep in range(args.reps + 1):
            c = wrk.run(coffer_url, connections=32, seconds=args.seconds, servers=coffer_tree())
            t = wrk.run(
                thumbor_url, connections=32, seconds=args.seconds, servers={"thumbor": thumbor.pids()}
            )
            if c.errors or t.errors:
                raise RuntimeError(f"wrk errors: Coffer {c.errors}, thumbor {t.errors}")
            if rep:
                stored.samples.append(c.rate)
                stored.reference_samples.append(t.rate)
                c_cpu.append(1000 * sum(c.server_cpu.values()) / c.rate)
                t_cpu.append(1000 * sum(t.server_cpu.values()) / t.rate)
                oth.append(max(c.others_cpu, t.others_cpu))
        stored.others_cpu = max(oth)
        stored.note = (
            f"server CPU per request: Coffer {statistics.median(c_cpu):.2f} ms (every process), "
            f"thumbor {statistics.median(t_cpu):.2f} ms (one process, as `thumbor` starts); "
            "thumbor's result storage: thumbor.result_storages.file_storage with "
            "RESULT_STORAGE_STORES_UNSAFE (its docs' file-backed setup), no proxy cache in front"
        )
        figures.append(stored)
    finally:
        for thing in (thumbor, tus, directus):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.stop()
        stack.stop()
    return [f.finish() for f in figures], info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/peers/specialists.py", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions after the warm-up (default 5)")
    parser.add_argument("--seconds", type=float, default=5, help="seconds per wrk run (default 5)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="where results go")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("COFFER_BENCH_DATABASE_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL maintenance database with rights to create databases (for Directus)",
    )
    parser.add_argument(
        "--no-directus", action="store_true", help="leave Directus out (its install takes ~6 min)"
    )
    parser.add_argument(
        "--directus-wait", type=float, default=0, help="seconds to wait for an install of Directus under way"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, data)")
    add_warm_memory(parser)
    args = parser.parse_args(argv)
    started = time.monotonic()
    warmed = back_free_memory(args.warm_memory)
    whole_run = OthersMeter()
    root = Path(tempfile.mkdtemp(prefix="coffer-peers-"))
    try:
        figures, info = measure(args, root)
    finally:
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()
    meta = {
        "mode": "peers run: Coffer embedded default (SQLite + disk) beside " + "; ".join(info["peers"]),
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "method": (
            f"{args.reps} repetitions after a warm-up, Coffer and each peer alternating; medians, "
            f"min–max in brackets; all on one machine, one temporary directory; {warmed}"
        ),
        "load_average_at_end": [round(x, 1) for x in load],
        "other_jobs_cores": round(whole_run.cores(), 2),
        "runtime_seconds": round(time.monotonic() - started),
        **info,
    }
    md, js = write(args.out, "peers", meta, figures)
    print(
        f"\n{meta['mode']}, {meta['date']}, commit {meta['commit']}, "
        f"load average {meta['load_average_at_end']}\n"
    )
    print(table(figures))
    print()
    print(details(figures))
    with contextlib.suppress(ValueError):
        md, js = md.relative_to(REPO), js.relative_to(REPO)
    print(f"\nwritten: {md}, {js} ({meta['runtime_seconds']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
