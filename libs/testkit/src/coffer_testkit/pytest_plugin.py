"""Shared pytest fixtures: real PostgreSQL databases and a real S3 API server.

Tests take real services from the environment (``COFFER_TEST_DATABASE_URL``,
``COFFER_TEST_S3_ENDPOINT_URL``). Without them: PostgreSQL is the machine's server on
127.0.0.1:5432, else a testcontainers container where Docker runs; S3 is moto's standalone
server started on loopback, or MinIO through testcontainers where Docker runs. Nothing is
mocked, and nothing is skipped for lack of a server: a missing server fails the test.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from coffer_testkit.testing import free_port, wait_healthy

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0


def _reachable(url: str) -> bool:
    try:
        engine = create_engine(url)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:  # noqa: BLE001 - any failure means "not this one"
        return False


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """URL of a PostgreSQL server's maintenance database, with rights to create databases."""
    url = os.environ.get("COFFER_TEST_DATABASE_URL", DEFAULT_POSTGRES)
    if _reachable(url):
        yield url
        return
    if _docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver="psycopg") as pg:
            yield pg.get_connection_url()
        return
    pytest.fail(f"no PostgreSQL at {url} and no Docker to start one (set COFFER_TEST_DATABASE_URL)")


# A test database's name says who made it: this machine (a short hash of its name) and the
# session's process, set in the CREATE itself. A session killed before its teardown (an
# interrupted make test) leaves its databases behind; the next session on the same machine
# drops those whose process is gone.
PREFIX = "coffer_test_"


def _machine() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def database_name(label: str) -> str:
    name = f"{PREFIX}{label}_{_machine()}_{os.getpid()}_{secrets.token_hex(4)}"
    assert len(name) <= 63, f"{name}: PostgreSQL would cut it short"  # its identifiers' limit
    return name


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def drop_orphaned_databases(admin: Engine) -> list[str]:
    """Drop the test databases that a session on this machine made and never dropped (its
    process is gone); those of live sessions, of other machines and of other names stay."""
    query = text("SELECT datname FROM pg_database WHERE datname LIKE 'coffer\\_test\\_%'")
    with admin.connect() as conn:
        found = conn.scalars(query).all()
    dropped = []
    for name in found:
        parts = name.rsplit("_", 3)
        if len(parts) != 4 or parts[1] != _machine() or not parts[2].isdigit() or _alive(int(parts[2])):
            continue
        # Another session starting meanwhile may be dropping it too.
        with contextlib.suppress(DBAPIError), admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            dropped.append(name)
    return dropped


@pytest.fixture(scope="session")
def fresh_database(postgres_server_url: str) -> Iterator[object]:
    """A factory of new, empty databases on the server; all dropped at the end of the session
    (and, if it is killed first, by the next session on this machine)."""
    admin = create_engine(postgres_server_url, isolation_level="AUTOCOMMIT", pool_size=8)
    drop_orphaned_databases(admin)
    made: list[str] = []

    def make(label: str) -> str:
        name = database_name(label)
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        made.append(name)
        return make_url(postgres_server_url).set(database=name).render_as_string(hide_password=False)

    yield make

    def drop(name: str) -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    # Each DROP waits for the server's checkpoint, about 1 s on a busy machine; at once they
    # share it (6 databases: 2.2 s instead of 6 s).
    with ThreadPoolExecutor(max(1, min(len(made), 8))) as pool:
        list(pool.map(drop, made))
    admin.dispose()


def new_database_url(request: pytest.FixtureRequest, backend: str, directory: Path, label: str) -> str:
    """A new, empty database on ``backend``: a SQLite file ``label.db`` under ``directory``,
    or a fresh PostgreSQL database (``fresh_database``, asked for only then, so that a run on
    SQLite alone needs no server)."""
    if backend == "sqlite":
        return f"sqlite:///{directory / f'{label}.db'}"
    return str(request.getfixturevalue("fresh_database")(label))


def migrated_database_url(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    label: str,
    migrate: Callable[[str], object],
) -> str:
    """A session-wide database on the backend ``request.param`` names, migrated once."""
    url = new_database_url(request, request.param, tmp_path_factory.mktemp(label), label)
    migrate(url)
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A Redis server: COFFER_TEST_REDIS_URL, or the machine's on 127.0.0.1:6379."""
    import socket

    url = os.environ.get("COFFER_TEST_REDIS_URL", "redis://127.0.0.1:6379")
    host_port = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = host_port.partition(":")
    try:
        with socket.create_connection((host, int(port or 6379)), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            assert sock.recv(16).startswith(b"+PONG")
    except (OSError, AssertionError):
        pytest.fail(f"no Redis at {url} (set COFFER_TEST_REDIS_URL)")
    return url


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def client(self) -> Any:
        """A boto3 client for this server, made once (each new one costs 25 to 600 ms)."""
        return _s3_client(self.endpoint_url, self.access_key, self.secret_key, self.region)

    def new_bucket(self) -> str:
        name = f"coffer-test-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name

    def env(self, bucket: str) -> dict[str, str]:
        """Settings that point blob's S3 driver at this server and bucket."""
        return {
            "COFFER_STORAGE": "s3",
            "COFFER_S3_ENDPOINT_URL": self.endpoint_url,
            "COFFER_S3_BUCKET": bucket,
            "COFFER_S3_REGION": self.region,
            "COFFER_S3_FORCE_PATH_STYLE": "true",
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }


@functools.cache
def _s3_client(endpoint_url: str, access_key: str, secret_key: str, region: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
    )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A real S3 API server on loopback (or the one named by COFFER_TEST_S3_ENDPOINT_URL)."""
    endpoint = os.environ.get("COFFER_TEST_S3_ENDPOINT_URL")
    if endpoint:
        yield S3Server(
            endpoint,
            os.environ.get("AWS_ACCESS_KEY_ID", "test"),
            os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
        )
        return
    # moto accepts any credentials; generate them rather than writing any down.
    access, secret = secrets.token_hex(8), secrets.token_hex(16)
    try:
        import moto.server  # noqa: F401
    except ImportError:
        moto_installed = False
    else:
        moto_installed = True
    if not moto_installed and _docker_available():
        from testcontainers.minio import MinioContainer

        with MinioContainer(access_key=access, secret_key=secret) as minio:
            host, port = minio.get_container_host_ip(), minio.get_exposed_port(9000)
            yield S3Server(f"http://{host}:{port}", access, secret)
        return
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}/moto-api/", timeout=30)
        yield S3Server(f"http://127.0.0.1:{port}", access, secret)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def pgbouncer(postgres_server_url: str) -> Iterator[Any]:
    """A real PgBouncer in transaction mode in front of the test PostgreSQL
    (:mod:`coffer_testkit.pgbouncer`): ``pgbouncer.url_for(direct_url)``."""
    from coffer_testkit.pgbouncer import running_pgbouncer

    with running_pgbouncer(postgres_server_url) as bouncer:
        yield bouncer


# `make test-fast`: the in-process tests on the embedded default's own backends -------------
# SQLite and the disk store need no server; PostgreSQL, S3 (moto's server) and Redis are
# production's, and so are the tests that start processes of their own (transform workers,
# clamd). `make test` runs them all.
PRODUCTION_PARAMS = frozenset({"postgresql", "s3", "redis"})
PRODUCTION_FIXTURES = frozenset(
    {"postgres_server_url", "fresh_database", "s3_server", "s3_settings", "redis_url", "pgbouncer"}
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--embedded-only",
        action="store_true",
        help="leave out the tests on PostgreSQL, S3 or Redis and those marked `processes`",
    )


def _production(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    values = callspec.params.values() if callspec is not None else ()
    if any(isinstance(v, str) and v in PRODUCTION_PARAMS for v in values):
        return True
    return bool(PRODUCTION_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("embedded_only"):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if item.get_closest_marker("processes") or _production(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
