"""Fixtures for the client tests: the e2e stack (tests/e2e/conftest.py, reused as it is), on the
embedded backend unless a test asks for ``production`` with indirect parametrization, a tenant,
the SDK on its key, and the ``coffer`` command line in process or as a real program."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coffer_client import Coffer
from coffer_client.cli import app
from coffer_testkit.testing import free_port


def _load_e2e() -> Any:
    """tests/e2e/conftest.py as a module, so the stack fixtures have one definition."""
    path = Path(__file__).resolve().parent.parent / "e2e" / "conftest.py"
    spec = importlib.util.spec_from_file_location("coffer_tests_e2e_fixtures", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_e2e = _load_e2e()
backend_env = _e2e.backend_env
stack = _e2e.stack
running_stack_factory = _e2e.running_stack_factory
own_stack_with = _e2e.own_stack_with
until = _e2e.until


@pytest.fixture(scope="session")
def commands() -> tuple[str, ...]:
    """Every command `coffer --help` must list (issue 15)."""
    return (
        *("ls", "mkdir", "upload", "download", "url", "presets"),
        *("mv", "rm", "rmdir", "sync", "usage", "configure", "info", "keys", "trash", "tag", "meta"),
    )


@pytest.fixture(scope="session")
def backend() -> str:
    """The embedded default: ``production_stack`` runs the whole flow once on PostgreSQL + S3."""
    return "embedded"


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()


# One production stack for the client tests, apart from ``stack`` so that the embedded one is not
# stopped and started again around the test that uses it. Its rate limit is low enough for a burst
# to meet 429s (the retry test) and each tenant has a key of its own, so a limit per key.
PRODUCTION_RATE_LIMIT = "20/second"


@pytest.fixture(scope="session")
def production_stack(
    tmp_path_factory: pytest.TempPathFactory, fresh_database: Any, s3_server: Any, redis_url: str
) -> Iterator[Any]:
    env = {
        "COFFER_AUTH_DATABASE_URL": fresh_database("auth"),
        "COFFER_METADATA_DATABASE_URL": fresh_database("metadata"),
        **s3_server.env(s3_server.new_bucket()),
        "COFFER_REDIS_URL": redis_url,
        "COFFER_EDGE_RATE_LIMIT": PRODUCTION_RATE_LIMIT,
    }
    with _e2e.running_stack(tmp_path_factory.mktemp("client-production"), **env) as s:
        yield s


@pytest.fixture
def production_key(production_stack: Any, admin_for: Any) -> str:
    """The key of a new organization on the production stack."""
    admin = admin_for(production_stack)
    org = admin("create-org", "--name", "client-production")
    return str(admin("create-key", "--org", org["id"])["key"])


@pytest.fixture
def sdk(stack: Any, tenant: Any) -> Iterator[Coffer]:
    with Coffer(stack.edge_url, tenant.key) as c:
        yield c


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str


@dataclass
class Cli:
    """``coffer`` with the tenant's key in the environment and a private config directory."""

    env: dict[str, str]

    def __call__(self, *argv: str, input: str | None = None, **env: str) -> Run:
        """In process (fast): the real command code through typer's runner."""
        r = CliRunner().invoke(app, list(argv), env={**self.env, **env}, input=input, catch_exceptions=False)
        return Run(r.exit_code, r.stdout, r.stderr)

    def proc(self, *argv: str, timeout: float = 120, stdout: int | None = None, **env: str) -> Run:
        """As a real program, the way a person or a script runs it; ``stdout``: a file descriptor
        to write to instead of a captured pipe (``Run.stdout`` is then empty)."""
        exe = shutil.which("coffer", path=str(Path(sys.executable).parent))
        assert exe, "the coffer command is not installed in this environment"
        r = subprocess.run(
            [exe, *argv],
            env={**os.environ, **self.env, **env},
            stdout=subprocess.PIPE if stdout is None else stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        return Run(r.returncode, r.stdout or "", r.stderr)


@pytest.fixture
def cli_for(tmp_path: Path) -> Any:
    """``cli_for(url, key)``: a Cli on that service and key with a private config directory."""
    config, cache = tmp_path / "config", tmp_path / "cache"
    config.mkdir()

    def make(url: str, key: str) -> Cli:
        return Cli(
            {
                "COFFER_URL": url,
                "COFFER_API_KEY": key,
                "XDG_CONFIG_HOME": str(config),
                "XDG_CACHE_HOME": str(cache),
                "COFFER_PROFILE": "default",
                "COLUMNS": "200",
            }
        )

    return make


@pytest.fixture
def cli(stack: Any, tenant: Any, cli_for: Any) -> Cli:
    return cli_for(stack.edge_url, tenant.key)  # type: ignore[no-any-return]


@dataclass
class BigFile:
    path: Path
    sha256: str
    size: int


@pytest.fixture(scope="session")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> BigFile:
    """100 MiB of random bytes (the largest file the service accepts), written once per session."""
    import hashlib

    path = tmp_path_factory.mktemp("big") / "big-100MiB.bin"
    h = hashlib.sha256()
    with path.open("wb") as fh:
        for _ in range(100):
            chunk = os.urandom(1024 * 1024)
            h.update(chunk)
            fh.write(chunk)
    return BigFile(path, h.hexdigest(), 100 * 1024 * 1024)
