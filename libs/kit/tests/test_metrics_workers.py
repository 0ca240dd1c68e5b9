"""Metrics stay correct when a service runs several worker processes (prometheus multiprocess mode)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from coffer_testkit.testing import free_port, wait_healthy

# Real processes (servers started for the test): end to end, so not in `make test-fast`.
pytestmark = pytest.mark.e2e


def test_counts_from_every_worker_are_summed(tmp_path) -> None:
    port = free_port()
    multiproc = tmp_path / "prom"
    multiproc.mkdir()
    env = {
        **os.environ,
        "COFFER_DATA_DIR": str(tmp_path / "data"),
        "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
    }
    subprocess.run(
        [sys.executable, "-m", "coffer_auth.cli", "migrate"], env=env, check=True, capture_output=True
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "coffer_auth.main:create_app",
            "--workers",
            "2",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}/healthz", timeout=60)
        base = f"http://127.0.0.1:{port}"

        def call(_: int) -> int:
            # Without the internal token: 401, counted under the route template. Concurrent,
            # on new connections, so that both workers answer some.
            return httpx.get(base + "/internal/v1/principal", headers={"connection": "close"}).status_code

        sent = 0
        with ThreadPoolExecutor(max_workers=8) as pool:
            # Until both workers have answered some (the kernel decides who accepts).
            while sent < 2000 and len(list(multiproc.glob("counter_*.db"))) < 2:
                assert set(pool.map(call, range(40))) == {401}
                sent += 40
        scrapes = [httpx.get(base + "/metrics", headers={"connection": "close"}).text for _ in range(6)]
        labels = 'method="GET",route="/internal/v1/principal",service="auth",status="401"'
        series = r"coffer_http_requests_total\{" + re.escape(labels) + r"\} (\S+)"
        for text in scrapes:
            assert float(re.search(series, text).group(1)) == sent
            assert "coffer_db_pool_connections" in text
        assert len(list(multiproc.glob("counter_*.db"))) == 2  # both workers counted some
    finally:
        server.terminate()
        server.wait(timeout=30)
