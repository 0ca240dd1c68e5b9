"""``coffer-stack`` (what ``make run`` starts): it serves, and it takes every child down with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from coffer_testkit.testing import free_port, wait_healthy

# Real processes (servers started for the test): end to end, so not in `make test-fast`.
pytestmark = pytest.mark.e2e

PORTS = ("EDGE", "CDN", "AUTH", "METADATA", "BLOB", "EDGE_INTERNAL", "METADATA_DISPATCHER")


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent has not reaped it yet.
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split()[2] != "Z"


@pytest.fixture
def launched(tmp_path):
    env = {**os.environ, "COFFER_DATA_DIR": str(tmp_path / "data")}
    env.update({f"COFFER_{name}_PORT": str(free_port()) for name in PORTS})
    proc = subprocess.Popen(
        [sys.executable, "-m", "coffer_stack.cli"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wait_healthy(f"http://127.0.0.1:{env['COFFER_EDGE_PORT']}/healthz", timeout=60)
    wait_healthy(f"http://127.0.0.1:{env['COFFER_CDN_PORT']}/healthz", timeout=60)
    yield proc, env
    proc.kill()


def wait_gone(pids: list[int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if alive(p)]}"
        time.sleep(0.1)


def test_serves_and_stops_every_child_on_sigterm(launched) -> None:
    proc, env = launched
    answer = httpx.get(f"http://127.0.0.1:{env['COFFER_EDGE_PORT']}/api/folders")
    assert answer.status_code == 401  # a real edge, asking for a key
    children = children_of(proc.pid)
    assert len(children) == 4  # the four services (the webhook dispatcher runs inside metadata)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    wait_gone(children)
    assert b"Coffer is running" in proc.stderr.read()


def test_children_do_not_outlive_a_killed_launcher(launched) -> None:
    proc, _ = launched
    children = children_of(proc.pid)
    proc.kill()
    proc.wait()
    wait_gone(children)
