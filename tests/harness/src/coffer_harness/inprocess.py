"""The four services' apps in the test process: the middle of the test pyramid.

Each app is the real one (``create_app`` with real settings), on a real database (SQLite
file or PostgreSQL, migrated once), served by uvicorn on loopback ports from one background
thread, so edge reaches auth, metadata and blob over real HTTP as in production. Only the
processes are missing: starting them, and the migrations on every start, are what made the
end-to-end suite slow. What needs real processes (crashes, outages, traces, memory) stays in
``tests/e2e``.

A test sees the same surface as an end-to-end test (``edge_url``, ``public_cdn_url``,
``url(service)``, ``data_dir``, ``extra_env``), so the fixtures built on a stack (tenants,
the admin CLI) serve both.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from sqlalchemy import MetaData, create_engine, text
from sqlalchemy.engine import Engine

from coffer_kit.serve import Listener, Server, server_config
from coffer_testkit.testing import TEST_DATABASE_BUDGET, free_port

SERVICES = ("edge", "cdn", "auth", "metadata", "blob")
IDLE_SECONDS = 5.0
# The settings of the API tests' stacks (services/edge/tests/api). No sweeper: a test's half-done
# uploads are its own to look at. A 0.25 s auth cache: tests of revoked access wait for it (the
# default 5 s bound is tested end to end, tests/e2e/test_flow.py). Every request comes from
# 127.0.0.1: failed authentications are not limited here (tested end to end,
# tests/e2e/test_bounds.py), nor are the dashboard's sign-ups (tests sign up a user per caller;
# the per-IP throttle is tested end to end, tests/e2e/test_dashboard_security.py). An upload body
# that sends nothing for 5 s is stopped (60 s by default), which test_quota.py waits for.
API_TEST_SETTINGS: dict[str, Any] = {
    "sweep_interval_seconds": 0,
    "edge_tuning": {"client_idle_timeout_seconds": IDLE_SECONDS},
    "edge_rate_limit": "10000/second",
    "edge_auth_cache_seconds": 0.25,
    "edge_auth_failure_limit": "1000000/minute",
    "dashboard_ip_limit": "1000000/minute",
}


@dataclass
class InProcessStack:
    """Addresses of the in-process services, and the databases they share with the test."""

    data_dir: Path
    ports: dict[str, int]
    auth_database_url: str
    metadata_database_url: str
    host: str = "127.0.0.1"
    extra_env: dict[str, str] = field(default_factory=dict)
    # Behind a pooler: the services' URLs (through PgBouncer) and COFFER_DATABASE_POOLER; the
    # test's own reads and truncations go straight to the databases above.
    service_urls: dict[str, str] = field(default_factory=dict)
    pooler: str = "none"
    # One engine per database for truncating, kept for the session (a connection per test
    # would cost more than the truncation).
    _engines: dict[str, Engine] = field(default_factory=dict)

    @property
    def edge_url(self) -> str:
        return self.url("edge")

    @property
    def public_cdn_url(self) -> str:
        return self.url("cdn")

    def url(self, service: str) -> str:
        return f"http://{self.host}:{self.ports[service]}"

    def _engine(self, url: str) -> Engine:
        if url not in self._engines:
            self._engines[url] = create_engine(url)
        return self._engines[url]

    def truncate(self) -> None:
        """Empty every table of both databases (between tests), keeping the schema."""
        for url in (self.auth_database_url, self.metadata_database_url):
            truncate_all(self._engine(url))

    @property
    def metadata_engine(self) -> Engine:
        """metadata's database, for a test that waits for a state no API shows, or holds a lock
        to stop a write for a while; never for what it asserts."""
        return self._engine(self.metadata_database_url)

    def metadata_scalar(self, sql: str, **params: Any) -> Any:
        """One value from metadata's database (see ``metadata_engine``)."""
        with self.metadata_engine.connect() as connection:
            return connection.execute(text(sql), params).scalar()

    def close(self) -> None:
        for engine in self._engines.values():
            engine.dispose()
        self._engines.clear()


# Per database URL: its tables, children before parents.
_LAYOUTS: dict[str, list[str]] = {}


def answered(service: str, method: str, route: str, status: int = 200) -> float:
    """How many ``method route`` requests ``service`` has answered with ``status`` in this
    process (``coffer_http_requests_total``: the in-process services share its registry)."""
    from prometheus_client import REGISTRY

    labels = {"service": service, "route": route, "method": method, "status": str(status)}
    return REGISTRY.get_sample_value("coffer_http_requests_total", labels) or 0.0


def _layout(engine: Engine) -> list[str]:
    key = engine.url.render_as_string(hide_password=False)
    if key not in _LAYOUTS:
        virtual: list[str] = []
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                virtual = list(
                    conn.execute(
                        text("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")
                    ).scalars()
                )

        # A full-text index (a virtual table and its shadow tables) follows its content table
        # through triggers: emptying it by hand would break it.
        def emptied(name: str, _schema: object) -> bool:
            return name != "alembic_version" and not any(
                name == v or name.startswith(v + "_") for v in virtual
            )

        schema = MetaData()
        schema.reflect(bind=engine, only=emptied)
        _LAYOUTS[key] = [t.name for t in reversed(schema.sorted_tables)]
    return _LAYOUTS[key]


def truncate_all(engine: Engine) -> None:
    """Empty every table but Alembic's, keeping the schema: what a test leaves is gone.

    DELETE, children first: a test leaves a few rows, and PostgreSQL's TRUNCATE makes new files
    for every table, 130 to 210 ms a database against 5 to 7 ms for the DELETEs (measured on the
    test machine). Sequences go on counting: a write still in flight from the test before (edge's
    audit relay, say) may land after the DELETE, and a sequence set back to 1 would hand its id
    out again (a duplicate key in CI's run of 84a4009).
    """
    with engine.begin() as conn:
        for table in _layout(engine):
            conn.execute(text(f'DELETE FROM "{table}"'))


def _apps(stack: InProcessStack, token: str, **edge_settings: Any) -> dict[str, Any]:
    from coffer_auth.config import Settings as AuthSettings
    from coffer_auth.main import create_app as auth_app
    from coffer_blob.config import Settings as BlobSettings
    from coffer_blob.main import create_app as blob_app
    from coffer_blob.main import create_cdn_app
    from coffer_edge.config import Settings as EdgeSettings
    from coffer_edge.main import create_app as edge_app
    from coffer_metadata.config import Settings as MetadataSettings
    from coffer_metadata.main import create_app as metadata_app

    common: dict[str, Any] = {
        # The tests' connection budget (coffer_testkit.testing.TEST_DATABASE_BUDGET).
        **{k.removeprefix("COFFER_").lower(): int(v) for k, v in TEST_DATABASE_BUDGET.items()},
        "data_dir": stack.data_dir,
        "internal_token": SecretStr(token),
        "base_url": stack.edge_url,
        "cdn_url": stack.public_cdn_url,
        "database_pooler": stack.pooler,
    }
    blob = BlobSettings(**common, signing_secret=SecretStr(token + "-signing"), storage="fs")
    return {
        "auth": auth_app(
            AuthSettings(**common, auth_database_url=stack.service_urls.get("auth", stack.auth_database_url))
        ),
        "metadata": metadata_app(
            MetadataSettings(
                **common,
                metadata_database_url=stack.service_urls.get("metadata", stack.metadata_database_url),
            )
        ),
        "blob": blob_app(blob, api=True),
        "cdn": create_cdn_app(blob),
        "edge": edge_app(
            EdgeSettings(
                **common,
                auth_url=stack.url("auth"),
                metadata_url=stack.url("metadata"),
                blob_url=stack.url("blob"),
                **edge_settings,
            )
        ),
    }


@contextlib.contextmanager
def serving(stack: InProcessStack, token: str, **edge_settings: Any) -> Iterator[InProcessStack]:
    """Serve the five listeners of ``stack`` from one background thread until the block ends."""
    apps = _apps(stack, token, **edge_settings)
    configs = [
        # As coffer_kit.serve serves them; keep-alive connections between the apps would
        # otherwise hold the stop.
        server_config(Listener(apps[name], stack.host, stack.ports[name]), graceful_seconds=1)
        for name in SERVICES
    ]
    for config in configs:
        config.lifespan = "on"  # a start-up failure fails the test
    servers = [Server(config) for config in configs]
    failure: list[BaseException] = []

    def run() -> None:
        async def main() -> None:
            await asyncio.gather(*(server.serve() for server in servers))

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            failure.append(exc)

    thread = threading.Thread(target=run, name="coffer-inprocess", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not all(server.started for server in servers):
        if failure or not thread.is_alive():
            raise RuntimeError(f"the in-process services did not start: {failure!r}")
        if time.monotonic() > deadline:
            raise TimeoutError("the in-process services did not start in 60 s")
        time.sleep(0.02)
    try:
        yield stack
    finally:
        stack.close()
        for server in servers:
            server.exit()
        thread.join(timeout=30)


def new_stack(
    root: Path, *, auth_database_url: str, metadata_database_url: str, pgbouncer: Any = None
) -> InProcessStack:
    """Addresses for a stack on free loopback ports, its databases migrated; with ``pgbouncer``
    (coffer_testkit.pgbouncer) the services reach them through it, in transaction mode."""
    from coffer_auth.migrations import migrate as migrate_auth
    from coffer_metadata.migrations import migrate as migrate_metadata

    migrate_auth(auth_database_url)
    migrate_metadata(metadata_database_url)
    stack = InProcessStack(
        data_dir=root,
        ports={name: free_port() for name in SERVICES},
        auth_database_url=auth_database_url,
        metadata_database_url=metadata_database_url,
        extra_env={
            "COFFER_AUTH_DATABASE_URL": auth_database_url,
            "COFFER_METADATA_DATABASE_URL": metadata_database_url,
        },
    )
    if pgbouncer is not None:
        stack.service_urls = {
            "auth": pgbouncer.url_for(auth_database_url),
            "metadata": pgbouncer.url_for(metadata_database_url),
        }
        stack.pooler = "transaction"
    return stack
