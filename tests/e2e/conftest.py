"""End-to-end fixtures: the four services as real processes on free loopback ports."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from coffer_stack.stack import SERVICE_IMPORTS, Ports, Stack
from coffer_stack.zygote import Zygote
from coffer_testkit.otlp import OtlpReceiver
from coffer_testkit.testing import TEST_DATABASE_BUDGET, free_port


@contextlib.contextmanager
def running_stack(root: Path, **env: str) -> Iterator[Stack]:
    """Start the four services on free loopback ports with data under ``root``; stop them after."""
    ports = Ports.drawn(free_port)
    # Every test client comes from 127.0.0.1, and Redis keeps counters across stacks: the limit
    # on failed authentications per address is lifted, but where a test sets it (test_bounds.py).
    # Every stack keeps to the tests' connection budget, unless a test sets its own.
    env = {"COFFER_EDGE_AUTH_FAILURE_LIMIT": "1000000/minute", **TEST_DATABASE_BUDGET, **env}
    s = Stack(data_dir=root / "data", ports=ports, log_dir=root / "logs", extra_env=env, zygote=zygote())
    migrate_here(s)
    s.start()
    failed = False
    try:
        yield s
    except BaseException:
        failed = True
        raise
    finally:
        s.stop()
        # A failing test prints the end of each service's log: CI keeps only its output.
        if failed or os.environ.get("COFFER_TEST_SHOW_LOGS"):
            for log in sorted((root / "logs").glob("*.log")):
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-5000:]}")


@functools.cache
def zygote() -> Zygote:
    """This test process's zygote, which forks the services of every stack it starts: a stack
    then costs about 1 s of CPU instead of 6.5 s (its four interpreters importing everything).
    It ends with the test process."""
    return Zygote(SERVICE_IMPORTS)


def migrate_here(stack: Stack) -> None:
    """What ``Stack.migrate`` does (each service's ``migrate`` command on the stack's
    settings), in this process: the same migrations on the same databases, without starting
    two interpreters that import everything first (3.8 s of CPU a stack, 0.2 s here; a test
    session starts about 45 stacks). ``Stack.migrate`` itself is what ``make run`` uses,
    and the images' test runs the commands in their containers."""
    from coffer_auth.config import Settings as AuthSettings
    from coffer_auth.migrations import migrate as migrate_auth
    from coffer_metadata.config import Settings as MetadataSettings
    from coffer_metadata.migrations import migrate as migrate_metadata

    env = stack.extra_env
    # Behind a pooler, straight to PostgreSQL: a migration holds a session's advisory lock.
    auth = AuthSettings(
        data_dir=stack.data_dir,
        auth_database_url=env.get(
            "COFFER_TEST_DIRECT_AUTH_DATABASE_URL", env.get("COFFER_AUTH_DATABASE_URL", "")
        ),
    )
    metadata = MetadataSettings(
        data_dir=stack.data_dir,
        metadata_database_url=env.get(
            "COFFER_TEST_DIRECT_METADATA_DATABASE_URL", env.get("COFFER_METADATA_DATABASE_URL", "")
        ),
    )
    migrate_auth(auth.auth_database_url)
    migrate_metadata(metadata.metadata_database_url)


@pytest.fixture(scope="session")
def running_stack_factory() -> Any:
    """``running_stack`` for tests that wire a stack of their own."""
    return running_stack


BACKENDS = ["embedded", "production"]


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """An end-to-end test runs on both configurations unless it names one beside it (where the
    other adds nothing: README, "What is tested"); the conformance tests (test_flow.py,
    test_fuzz.py) on "pooled": production behind PgBouncer in transaction mode."""
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

    if backend == "production":
        return make
    # "pooled": the same, with every service's connections through PgBouncer in transaction
    # mode (docs/operations.md, "Behind PgBouncer"); the migrations go straight to PostgreSQL.
    bouncer = request.getfixturevalue("pgbouncer")

    def pooled() -> dict[str, str]:
        env = make()
        for name in ("COFFER_AUTH_DATABASE_URL", "COFFER_METADATA_DATABASE_URL"):
            env[f"COFFER_TEST_DIRECT_{name.removeprefix('COFFER_')}"] = env[name]
            env[name] = bouncer.url_for(env[name])
        # The per-key rate limit is tested on "production" (test_bounds.py); here it would only
        # pace the conformance tests' fuzzer (test_fuzz.py), which keeps under it.
        return {**env, "COFFER_DATABASE_POOLER": "transaction", "COFFER_EDGE_RATE_LIMIT": "1000/second"}

    return pooled


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory, backend: str, backend_env: Any) -> Iterator[Stack]:
    """The stack on this backend, started once for the session."""
    with running_stack(tmp_path_factory.mktemp(f"stack-{backend}"), **backend_env()) as s:
        yield s


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


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    """A trace receiver for a test's own stack. Ask for it before ``own_stack_with``: fixtures
    end in the reverse order, so the stack stops (and flushes its spans) while it still answers."""
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


# The dashboard in a real browser ---------------------------------------------------------
# Playwright (PyPI) drives Debian's chromium; no browser is downloaded. Without chromium the
# browser tests skip, except under CI=true where that is a failure.

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The dashboard tests sign in many times from one address: the per-IP limit of 20 a minute is
# tested on a stack of its own.
DASHBOARD_ENV = {
    "COFFER_DASHBOARD_IP_LIMIT": "10000/minute",
    "COFFER_DASHBOARD_EXTRA_KEY_EXPIRY_SECONDS": "3",
}


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    import shutil

    found = os.environ.get("COFFER_CHROMIUM") or shutil.which("chromium")
    if not found:
        message = "Debian's chromium is missing (apt-get install chromium, or set COFFER_CHROMIUM)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def browser(chromium_executable: str) -> Iterator[Any]:
    """One chromium per test module. Not per session: Playwright's sync API keeps its event
    loop marked as running while it is open, and the async tests collected after the browser
    tests would then fail to start theirs."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_executable, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def dashboard_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The embedded stack the dashboard tests share."""
    with running_stack(tmp_path_factory.mktemp("dashboard"), **DASHBOARD_ENV) as s:
        yield s


@dataclass
class Person:
    email: str
    password: str


@dataclass
class Dashboard:
    """A browser on one stack, with the steps the scenarios share (through the pages themselves)."""

    stack: Stack
    browser: Any
    contexts: list[Any]

    @property
    def url(self) -> str:
        return self.stack.edge_url + "/dashboard"

    def context(self, **options: Any) -> Any:
        ctx = self.browser.new_context(base_url=self.stack.edge_url, **options)
        ctx.set_default_timeout(15_000)
        self.contexts.append(ctx)
        return ctx

    def page(self, **options: Any) -> Any:
        return self.context(**options).new_page()

    @staticmethod
    def person(name: str = "user") -> Person:
        import secrets

        return Person(f"{name}-{secrets.token_hex(4)}@example.com", "pw-" + secrets.token_urlsafe(18))

    def register(self, page: Any, who: Person) -> None:
        page.goto("/dashboard/register")
        page.fill("#email", who.email)
        page.fill("#password", who.password)
        # Wait for the answer to the post itself, so that a refusal fails here with what the
        # page said instead of as a timeout waiting for a URL.
        with page.expect_navigation(timeout=30_000) as navigation:
            page.click("button[type=submit]")
        answer = navigation.value
        assert page.url.endswith("/dashboard/orgs/new"), (
            f"registration answered {answer.status if answer else None} at {page.url}: "
            + page.inner_text("main")[:500]
        )

    def login(self, page: Any, who: Person, next_path: str | None = None) -> None:
        page.goto("/dashboard/login" + (f"?next={next_path}" if next_path else ""))
        page.fill("#email", who.email)
        page.fill("#password", who.password)
        page.click("form[action='/dashboard/login'] button[type=submit]")
        page.wait_for_load_state()

    def create_org(self, page: Any, name: str) -> str:
        page.goto("/dashboard/orgs/new")
        page.fill("#name", name)
        page.click("main button[type=submit]")
        page.wait_for_url("**/dashboard/o/org_*")
        return str(page.url.rstrip("/").rsplit("/", 1)[-1])

    def create_key(
        self, page: Any, org_id: str, *, kind: str = "organization", name: str = "", expiry: str = "90d"
    ) -> str:
        page.goto(f"/dashboard/o/{org_id}/keys")
        page.select_option("#kind", kind)
        page.fill("#name", name)
        page.select_option("#expiry", expiry)
        page.click("#create button[type=submit]")
        page.wait_for_selector("#new-key")
        return str(page.input_value("#new-key"))

    def signup_with_org(
        self, name: str = "owner", org: str = "Acme", **options: Any
    ) -> tuple[Any, Person, str]:
        page = self.page(**options)
        who = self.person(name)
        self.register(page, who)
        return page, who, self.create_org(page, org)

    def api(self, key: str, org_id: str | None = None) -> httpx.Client:
        headers = {"x-api-key": key}
        if org_id:
            headers["x-organization-id"] = org_id
        return httpx.Client(base_url=self.stack.edge_url + "/api", headers=headers, timeout=30)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Any:
    """Keep each phase's report on the test item, for fixtures that act on failures."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def dashboard_for(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A Dashboard on any stack; its browser contexts close after the test. When the test
    failed and COFFER_BROWSER_ARTIFACTS names a directory, every open page is saved there
    first (a full-page PNG and its HTML), for CI to keep."""
    made: list[Dashboard] = []

    def make(s: Stack) -> Dashboard:
        d = Dashboard(s, browser, [])
        made.append(d)
        return d

    yield make
    report = getattr(request.node, "report_call", None)
    artifacts = os.environ.get("COFFER_BROWSER_ARTIFACTS")
    if artifacts and report is not None and report.failed:
        folder = Path(artifacts) / request.node.name.replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        pages = [p for d in made for ctx in d.contexts for p in ctx.pages]
        for n, page in enumerate(pages):
            with contextlib.suppress(Exception):  # a page may be closed or mid-navigation
                page.screenshot(path=str(folder / f"page-{n}.png"), full_page=True)
                (folder / f"page-{n}.html").write_text(page.content())
    for d in made:
        for ctx in d.contexts:
            ctx.close()


@pytest.fixture
def dashboard(dashboard_stack: Stack, dashboard_for: Any) -> Dashboard:
    return dashboard_for(dashboard_stack)  # type: ignore[no-any-return]


def poll(check: Any, *, timeout: float = 10.0, interval: float = 0.1) -> Any:
    """Call ``check`` until it answers something truthy; fail after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last: {value!r})")
        time.sleep(interval)


@pytest.fixture(scope="session")
def until() -> Any:
    """``poll`` as a fixture (test modules do not import the conftest)."""
    return poll
