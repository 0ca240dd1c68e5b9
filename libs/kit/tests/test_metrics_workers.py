"""Metrics stay correct when a service runs several worker processes (prometheus multiprocess mode)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx

from coffer_kit.testing import free_port, wait_healthy


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

        with ThreadPoolExecutor(max_workers=8) as pool:
            assert set(pool.map(call, range(40))) == {401}
        scrapes = [httpx.get(base + "/metrics", headers={"connection": "close"}).text for _ in range(6)]
        labels = 'method="GET",route="/internal/v1/principal",service="auth",status="401"'
        series = r"coffer_http_requests_total\{" + re.escape(labels) + r"\} (\S+)"
        for text in scrapes:
            assert float(re.search(series, text).group(1)) == 40.0
            assert "coffer_db_pool_connections" in text
        pids = {p.name.split("_")[-1] for p in multiproc.iterdir()}
        assert len(pids) >= 2, pids  # both workers wrote metrics
    finally:
        server.terminate()
        server.wait(timeout=30)
