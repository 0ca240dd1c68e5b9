"""free_port: each pytest worker draws from its own block, never the kernel's ephemeral range."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from coffer_testkit.testing import free_port

DRAW = "from coffer_testkit.testing import free_port; print(*(free_port() for _ in range(40)))"


def draw(worker: str) -> list[int]:
    env = {**os.environ, "PYTEST_XDIST_WORKER": worker}
    out = subprocess.run([sys.executable, "-c", DRAW], env=env, check=True, capture_output=True, text=True)
    return [int(port) for port in out.stdout.split()]


@pytest.mark.e2e  # two interpreters stand in for two xdist workers
def test_two_workers_never_draw_the_same_port_and_stay_below_the_ephemeral_range() -> None:
    low, _ = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    gw0, gw1 = draw("gw0"), draw("gw1")
    assert len(set(gw0)) == len(gw0) == 40
    assert not set(gw0) & set(gw1)
    assert max(gw0 + gw1) < low


def test_a_port_in_use_is_passed_over() -> None:
    with socket.socket() as listener:
        port = free_port()
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert all(free_port() != port for _ in range(2_000))
