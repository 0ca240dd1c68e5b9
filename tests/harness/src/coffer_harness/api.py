"""Fixtures over a running stack, in process or of processes: the admin CLI, tenants, clients.

A test directory provides a ``stack`` fixture (``tests/e2e``: the services as processes;
``services/edge/tests/api``: the apps in the test process) and gets these on top of it.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from coffer_testkit.testing import TLS


class StackLike(Protocol):
    @property
    def edge_url(self) -> str: ...

    data_dir: Path
    extra_env: dict[str, str]


@dataclass
class Admin:
    """Runs ``coffer-auth`` admin commands (the real CLI code) against the stack's database."""

    settings: Any
    engine: Any = None  # kept across commands: a new engine per command compiles every statement anew

    def __call__(self, *argv: str) -> dict[str, Any]:
        from coffer_auth.cli import main as auth_cli

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = auth_cli(list(argv), settings=self.settings, engine=self.engine)
            finally:
                if self.engine is not None:
                    # No connection kept between commands (the session's stacks would hold one
                    # each, past PostgreSQL's 100); the engine keeps its compiled statements.
                    self.engine.dispose()
        if code != 0:
            raise AssertionError(f"coffer-auth {' '.join(argv)} failed: {err.getvalue()}")
        return json.loads(out.getvalue())  # type: ignore[no-any-return]


@dataclass
class Tenant:
    """An organization with an organization key, and a client that sends it."""

    org_id: str
    key: str
    key_id: str
    api: httpx.Client


@pytest.fixture(scope="session")
def admin_for() -> Iterator[Any]:
    """An Admin for any stack, with one engine per database for the whole session."""
    from coffer_auth.config import Settings as AuthSettings
    from coffer_kit.db import make_engine

    engines: dict[tuple[str, str], Any] = {}

    def make(s: StackLike) -> Admin:
        url = s.extra_env.get("COFFER_AUTH_DATABASE_URL", "")
        pooler = s.extra_env.get("COFFER_DATABASE_POOLER", "none")
        settings = AuthSettings(data_dir=s.data_dir, auth_database_url=url, database_pooler=pooler)
        key = (settings.auth_database_url, pooler)
        if key not in engines:
            engines[key] = make_engine(settings.auth_database_url, pool_size=1, pooler=pooler)
        return Admin(settings, engines[key])

    yield make
    for engine in engines.values():
        engine.dispose()


# Per test, not per session: several directories define their own ``stack`` (in process,
# end to end, client), and a session-scoped ``admin`` would stay bound to the first one.
@pytest.fixture
def admin(stack: StackLike, admin_for: Any) -> Admin:
    return admin_for(stack)  # type: ignore[no-any-return]


@pytest.fixture
def new_tenant(stack: StackLike, admin: Admin) -> Iterator[Any]:
    clients: list[httpx.Client] = []

    def make(name: str = "Acme", quota_bytes: int | None = None) -> Tenant:
        args = ["create-org", "--name", name]
        if quota_bytes is not None:
            args += ["--quota-bytes", str(quota_bytes)]
        org = admin(*args)
        key = admin("create-key", "--org", org["id"], "--name", "test")
        api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key["key"]}, timeout=60, verify=TLS)
        clients.append(api)
        return Tenant(org_id=org["id"], key=key["key"], key_id=key["id"], api=api)

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def tenant(new_tenant: Any) -> Tenant:
    return new_tenant()  # type: ignore[no-any-return]


@pytest.fixture
def anon(stack: StackLike) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.edge_url, timeout=60, verify=TLS) as client:
        yield client


def upload_zeros(api: httpx.Client, size: int) -> httpx.Response:
    """Upload ``size`` zero bytes as an octet-stream file."""
    return api.post("/api/assets", files={"file": ("f.bin", b"\0" * size, "application/octet-stream")})


def used_bytes(api: httpx.Client) -> int:
    """The bytes the tenant's assets take (at most 100 assets)."""
    listed = api.get("/api/assets", params={"limit": 100}).json()
    assert listed["total"] <= 100
    return sum(a["size"] for a in listed["assets"])
