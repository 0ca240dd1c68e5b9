"""End-to-end fixtures: the four services as real processes on free loopback ports."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from coffer_auth.cli import main as auth_cli
from coffer_auth.config import Settings as AuthSettings
from coffer_kit.testing import free_port
from coffer_stack.stack import Ports, Stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The embedded default stack, started once for the session."""
    root = tmp_path_factory.mktemp("stack")
    ports = Ports(
        edge=free_port(), cdn=free_port(), auth=free_port(), metadata=free_port(),
        blob=free_port(), edge_internal=free_port(),
    )
    s = Stack(data_dir=root / "data", ports=ports, log_dir=root / "logs")
    s.migrate()
    s.start()
    try:
        yield s
    finally:
        s.stop()
        if os.environ.get("COFFER_TEST_SHOW_LOGS"):
            for log in sorted((root / "logs").glob("*.log")):
                print(f"--- {log.name}\n{log.read_text()[-5000:]}")


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
def admin(stack: Stack) -> Admin:
    return Admin(AuthSettings(data_dir=stack.data_dir))


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
