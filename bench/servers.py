"""The processes a benchmark run starts: Coffer's stack, nginx, the FastAPI reference, and for
``--production`` fresh PostgreSQL databases and a moto S3 server. All on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from load import USED_SERVERS

from coffer_stack.stack import Ports, Stack
from coffer_testkit.testing import free_port, wait_healthy

BENCH = Path(__file__).resolve().parent
NGINX_CANDIDATES = ("nginx", "/usr/sbin/nginx")


def find_tool(*names: str) -> str | None:
    for name in names:
        path = shutil.which(name) or (name if os.path.isabs(name) and os.access(name, os.X_OK) else None)
        if path:
            return path
    return None


def ensure_tools() -> tuple[str, str]:
    """nginx and wrk from Debian's packages, installed with apt-get when missing (root or sudo)."""
    nginx, wrk = find_tool(*NGINX_CANDIDATES), find_tool("wrk")
    if nginx and wrk:
        return nginx, wrk
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    print("bench: installing nginx and wrk from Debian's packages (apt-get)", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx", "wrk"],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    nginx, wrk = find_tool(*NGINX_CANDIDATES), find_tool("wrk")
    if not (nginx and wrk):
        raise SystemExit("bench: nginx and wrk are needed (apt-get install nginx wrk)")
    return nginx, wrk


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not listen on {port} in {timeout}s")


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 10) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 60s;
    keepalive_requests 10000000;
    default_type application/octet-stream;
    client_body_temp_path {root}/tmp/body;
    proxy_temp_path {root}/tmp/proxy;
    fastcgi_temp_path {root}/tmp/fastcgi;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root}/www;
        # Static files, sent with sendfile(2).
        location /static/ {{ }}
        # WebDAV PUT: the body goes to a temp file, then is renamed into place (no fsync).
        location /dav/ {{
            dav_methods PUT;
            create_full_put_path on;
            client_max_body_size 101m;
            client_body_buffer_size 128k;
        }}
    }}
}}
"""


@dataclass
class Nginx:
    """nginx in the foreground, one worker, as an unprivileged user, on a loopback port."""

    binary: str
    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def static(self, name: str) -> Path:
        return self.root / "www" / "static" / name

    def start(self) -> None:
        for sub in ("www/static", "www/dav", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        conf = self.root / "nginx.conf"
        conf.write_text(NGINX_CONF.format(root=self.root, port=self.port))
        user = group = None
        if os.geteuid() == 0:
            # Never serve as root: hand the tree to nobody and drop privileges before exec.
            nobody = pwd.getpwnam("nobody")
            user, group = nobody.pw_uid, nobody.pw_gid
            for path in [self.root, *self.root.rglob("*")]:
                os.chown(path, user, group)
        self.proc = subprocess.Popen(
            [self.binary, "-p", str(self.root), "-c", str(conf), "-e", str(self.root / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "stderr.log", "ab"),  # noqa: SIM115 - owned by the child
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
        )
        wait_port(self.port, self.proc, "nginx")

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def stop(self) -> None:
        stop_process(self.proc)


@dataclass
class ScriptServer:
    """A bench script serving on ``port`` (``python bench/SCRIPT PORT``), its output in ``log``."""

    port: int = field(default_factory=free_port)
    log: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # beside this process's own
    proc: subprocess.Popen[bytes] | None = None
    script: ClassVar[str]
    what: ClassVar[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / self.script), str(self.port)],
            stdout=out,
            stderr=out,
            env={**os.environ, **self.env},
        )
        wait_port(self.port, self.proc, self.what)

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc else []

    def stop(self) -> None:
        stop_process(self.proc)


@dataclass
class ReferenceApp(ScriptServer):
    """bench/reference_app.py: one FastAPI route, the same uvicorn settings as our services."""

    script: ClassVar[str] = "reference_app.py"
    what: ClassVar[str] = "reference app"

    def start(self) -> None:
        super().start()
        wait_healthy(self.url + "/healthz", timeout=30)


def _postmaster_of(backend: int) -> int | None:
    """The postmaster above one of this machine's PostgreSQL backends; None if ``backend`` is
    not a PostgreSQL process here (the server runs on another machine)."""
    try:
        with open(f"/proc/{backend}/stat") as fh:
            parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in (backend, parent)}
    except OSError:
        return None
    return parent if names == {"postgres"} else None


@dataclass
class Production:
    """PostgreSQL databases made for this run (dropped after it) and a moto S3 server."""

    admin_url: str
    auth_db: str = ""
    metadata_db: str = ""
    s3_port: int = field(default_factory=free_port)
    s3_proc: subprocess.Popen[bytes] | None = None
    bucket: str = field(default_factory=lambda: f"coffer-bench-{secrets.token_hex(4)}")
    access_key: str = field(default_factory=lambda: secrets.token_hex(8))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(16))

    def _db_url(self, name: str) -> str:
        from sqlalchemy.engine import make_url

        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def start(self, log: Path) -> dict[str, str]:
        from sqlalchemy import create_engine, text

        suffix = secrets.token_hex(4)
        self.auth_db, self.metadata_db = f"coffer_bench_auth_{suffix}", f"coffer_bench_metadata_{suffix}"
        admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                for name in (self.auth_db, self.metadata_db):
                    conn.execute(text(f'CREATE DATABASE "{name}"'))
                # The backends serving the stack are the postmaster's children: their CPU is
                # this run's, not another job's (load.USED_SERVERS). Read while this backend
                # lives; nothing is added when PostgreSQL runs elsewhere.
                postmaster = _postmaster_of(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
                if postmaster is not None:
                    USED_SERVERS.add(postmaster)
        finally:
            admin.dispose()
        self.s3_proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.s3_port)],
            stdout=open(log, "ab"),  # noqa: SIM115 - owned by the child
            stderr=subprocess.STDOUT,
        )
        wait_healthy(f"http://127.0.0.1:{self.s3_port}/moto-api/", timeout=60)
        import boto3

        boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{self.s3_port}",
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
        ).create_bucket(Bucket=self.bucket)
        return {
            "COFFER_AUTH_DATABASE_URL": self._db_url(self.auth_db),
            "COFFER_METADATA_DATABASE_URL": self._db_url(self.metadata_db),
            "COFFER_STORAGE": "s3",
            "COFFER_S3_ENDPOINT_URL": f"http://127.0.0.1:{self.s3_port}",
            "COFFER_S3_BUCKET": self.bucket,
            "COFFER_S3_REGION": "us-east-1",
            "COFFER_S3_FORCE_PATH_STYLE": "true",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def pids(self) -> list[int]:
        return [self.s3_proc.pid] if self.s3_proc else []

    def stop(self) -> None:
        stop_process(self.s3_proc)
        if not self.auth_db:
            return
        if os.environ.get("COFFER_BENCH_KEEP_DATABASES"):  # to look into afterwards (EXPLAIN)
            print(f"kept databases {self.auth_db} and {self.metadata_db}", file=sys.stderr)
            return
        from sqlalchemy import create_engine, text

        admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                for name in (self.auth_db, self.metadata_db):
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()


def coffer_stack(root: Path, extra_env: dict[str, str]) -> Stack:
    ports = Ports.drawn(free_port)
    env = {
        # The per-key limit would otherwise be what we measure.
        "COFFER_EDGE_RATE_LIMIT": "1000000/second",
        # No sweeper pass in the middle of a measurement.
        "COFFER_SWEEP_INTERVAL_SECONDS": "0",
        **extra_env,
    }
    return Stack(data_dir=root / "data", ports=ports, log_dir=root / "logs", extra_env=env)


def auth_cli(stack: Stack, *args: str) -> dict[str, object]:
    """Run ``coffer-auth`` against the stack's auth database; its one JSON object."""
    out = subprocess.run(
        [sys.executable, "-m", "coffer_auth.cli", *args],
        env=stack.env(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]


@contextlib.contextmanager
def started(*things: object) -> Iterator[None]:
    try:
        yield
    finally:
        for thing in reversed(things):
            with contextlib.suppress(Exception):
                thing.stop()  # type: ignore[attr-defined]


@dataclass
class OtlpSink(ScriptServer):
    """bench/otlp_sink.py: where a traced stack exports its spans (counted, then dropped)."""

    script: ClassVar[str] = "otlp_sink.py"
    what: ClassVar[str] = "OTLP sink"

    def spans(self) -> int:
        """Spans received so far."""
        import httpx

        return int(httpx.get(self.url, timeout=10).text)


def traced_stack(root: Path, stack: Stack, sink: OtlpSink, *, sampled: bool = True) -> Stack:
    """Another stack on ``stack``'s data (its databases, its files, its keys) with tracing on,
    exporting to ``sink``: every request traced, or (``sampled`` False) none, so that all the
    tracing code runs but no span is recorded. The same requests, measured beside tracing off."""
    ports = Ports.drawn(free_port)
    env = {**stack.extra_env, **tracing_env(sink, sampled=sampled)}
    logs = root / ("logs-traced" if sampled else "logs-unsampled")
    return Stack(data_dir=stack.data_dir, ports=ports, log_dir=logs, extra_env=env)


def tracing_env(sink: OtlpSink, *, sampled: bool = True) -> dict[str, str]:
    """Tracing on, exporting to ``sink``: every request traced, or (``sampled`` False) none."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on" if sampled else "always_off",
    }
