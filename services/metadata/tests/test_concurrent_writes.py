"""More concurrent writers than worker threads, against the real service on SQLite."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys

import httpx
import pytest

from coffer_kit.contract.ids import new_id
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_testkit.testing import free_port, wait_healthy

# Real processes (servers started for the test): end to end, so not in `make test-fast`.
pytestmark = pytest.mark.e2e

# anyio's thread pool has 40 threads; SQLite's busy timeout is 30 s.
WRITERS = 120


def test_writers_beyond_the_thread_pool_all_commit_promptly(tmp_path) -> None:
    """Writers queue without holding threads, so the one holding the lock can always commit.

    When waiting writers sat in SQLite's busy handler, forty of them took every worker thread
    and the holder's commit waited for a thread until they timed out (503 after 30 s).
    """
    port = free_port()
    token = secrets.token_urlsafe(24)
    env = {**os.environ, "COFFER_DATA_DIR": str(tmp_path), "COFFER_INTERNAL_TOKEN": token}
    subprocess.run([sys.executable, "-m", "coffer_metadata.cli", "migrate"], env=env, check=True)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "coffer_metadata.main:create_app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    orgs = [new_id("org"), new_id("org")]
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base + "/healthz", timeout=60)

        async def burst() -> list[int]:
            limits = httpx.Limits(max_connections=WRITERS)
            async with httpx.AsyncClient(
                base_url=base, headers={INTERNAL_TOKEN_HEADER: token}, limits=limits, timeout=20
            ) as client:

                async def register(org: str) -> int:
                    body = {"assetId": new_id("ast")}
                    return (await client.post(f"/internal/v1/orgs/{org}/intents", json=body)).status_code

                # Two organizations: each stays under its cap of uploads in flight (64).
                return await asyncio.gather(*(register(orgs[i % 2]) for i in range(WRITERS)))

        # A client timeout (20 s, under the busy timeout) fails the test if writers stall.
        assert asyncio.run(burst()) == [201] * WRITERS
    finally:
        server.terminate()
        server.wait(timeout=30)
