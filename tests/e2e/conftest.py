"""End-to-end fixtures: the four services as real processes on free loopback ports."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from coffer_auth.cli import main as auth_cli
from coffer_auth.config import Settings as AuthSettings
from coffer_kit.testing import free_port
from coffer_stack.stack import Ports, Stack


@contextlib.contextmanager
def running_stack(root: Path, **env: str) -> Iterator[Stack]:
    """Start the four services on free loopback ports with data under ``root``; stop them after."""
    ports = Ports(
        edge=free_port(),
        cdn=free_port(),
        auth=free_port(),
        metadata=free_port(),
        blob=free_port(),
        edge_internal=free_port(),
    )
    s = Stack(data_dir=root / "data", ports=ports, log_dir=root / "logs", extra_env=env)
    s.migrate()
    s.start()
    try:
        yield s
    finally:
        s.stop()
        if os.environ.get("COFFER_TEST_SHOW_LOGS"):
            for log in sorted((root / "logs").glob("*.log")):
                print(f"--- {log.name}\n{log.read_text()[-5000:]}")


@pytest.fixture(scope="session")
def running_stack_factory() -> Any:
    """``running_stack`` for tests that wire a stack of their own."""
    return running_stack


BACKENDS = ["embedded", "production"]


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Every end-to-end test runs on both configurations."""
    return str(request.param)


@pytest.fixture(scope="session")
def backend_env(request: pytest.FixtureRequest, backend: str) -> Any:
    """A factory of settings for a fresh backend: nothing for the embedded default;
    new PostgreSQL databases and a new bucket on a real S3 server for production."""
    if backend == "embedded":
        return lambda: {}
    fresh_database = request.getfixturevalue("fresh_database")
    s3 = request.getfixturevalue("s3_server")
    redis_url = request.getfixturevalue("redis_url")

    def make() -> dict[str, str]:
        return {
            "COFFER_AUTH_DATABASE_URL": fresh_database("auth"),
            "COFFER_METADATA_DATABASE_URL": fresh_database("metadata"),
            **s3.env(s3.new_bucket()),
            "COFFER_REDIS_URL": redis_url,
        }

    return make


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, backend: str, backend_env: Any) -> Iterator[Stack]:
    """The stack on this backend, started once for the session."""
    with running_stack(tmp_path_factory.mktemp(f"stack-{backend}"), **backend_env()) as s:
        yield s


@dataclass
class Admin:
    """Runs ``coffer-auth`` admin commands (the real CLI code) against the stack's database."""

    settings: AuthSettings

    def __call__(self, *argv: str) -> dict[str, Any]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = auth_cli(list(argv), settings=self.settings)
        if code != 0:
            raise AssertionError(f"coffer-auth {' '.join(argv)} failed: {err.getvalue()}")
        return json.loads(out.getvalue())  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def admin_for() -> Any:
    """An Admin for any stack."""

    def make(s: Stack) -> Admin:
        url = s.extra_env.get("COFFER_AUTH_DATABASE_URL", "")
        return Admin(AuthSettings(data_dir=s.data_dir, auth_database_url=url))

    return make


@pytest.fixture(scope="session")
def admin(stack: Stack, admin_for: Any) -> Admin:
    return admin_for(stack)  # type: ignore[no-any-return]


@dataclass
class Tenant:
    """An organization with an organization key, and a client that sends it."""

    org_id: str
    key: str
    key_id: str
    api: httpx.Client


@pytest.fixture
def new_tenant(stack: Stack, admin: Admin) -> Iterator[Any]:
    clients: list[httpx.Client] = []

    def make(name: str = "Acme", quota_bytes: int | None = None) -> Tenant:
        args = ["create-org", "--name", name]
        if quota_bytes is not None:
            args += ["--quota-bytes", str(quota_bytes)]
        org = admin(*args)
        key = admin("create-key", "--org", org["id"], "--name", "test")
        api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key["key"]}, timeout=60)
        clients.append(api)
        return Tenant(org_id=org["id"], key=key["key"], key_id=key["id"], api=api)

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def tenant(new_tenant: Any) -> Tenant:
    return new_tenant()  # type: ignore[no-any-return]


@pytest.fixture
def anon(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.edge_url, timeout=60) as client:
        yield client


@pytest.fixture
def own_stack_with(tmp_path_factory: pytest.TempPathFactory, backend_env: Any) -> Iterator[Any]:
    """Start a stack for one test alone (to kill or reconfigure), with extra settings."""
    with contextlib.ExitStack() as stacks:

        def make(**settings: str) -> Stack:
            env = {**backend_env(), "COFFER_SWEEP_INTERVAL_SECONDS": "0", **settings}
            return stacks.enter_context(running_stack(tmp_path_factory.mktemp("own-stack"), **env))

        yield make


@pytest.fixture
def own_stack(own_stack_with: Any) -> Stack:
    return own_stack_with()  # type: ignore[no-any-return]
