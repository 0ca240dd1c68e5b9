"""The session dependency under a burst, on both databases: more requests at once than the pool
has connections (a pool smaller than the thread pool, as the chart sizes it per replica) all
answer, and none waits out the pool's timeout."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import text

from coffer_kit.app import database_service_app
from coffer_kit.db.session import SessionDep
from coffer_kit.settings import BaseServiceSettings
from coffer_testkit.pytest_plugin import new_database_url
from coffer_testkit.testing import serving

BURST = 64  # beyond the thread pool's 40


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_burst_beyond_the_pool_and_the_threads_is_answered(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    url = new_database_url(request, kind, tmp_path, "burst")
    settings = BaseServiceSettings(
        data_dir=tmp_path, internal_token=SecretStr(secrets.token_urlsafe(24)), database_pool_size=2
    )
    app = database_service_app("burst", url, settings)
    pause = "SELECT pg_sleep(0.02)" if kind == "postgresql" else "SELECT 1"

    @app.post("/write")
    def write(session: SessionDep) -> dict[str, Any]:  # a worker thread, as every sync route
        session.exec(text(pause))  # type: ignore[call-overload]
        return {"ok": True}

    @app.get("/read")
    def read(session: SessionDep) -> dict[str, Any]:
        session.exec(text(pause))  # type: ignore[call-overload]
        return {"ok": True}

    async def burst(base: str) -> list[int]:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            calls = [client.post("/write") if i % 2 else client.get("/read") for i in range(BURST)]
            return [r.status_code for r in await asyncio.gather(*calls)]

    with serving(app) as base:
        # The pool's timeout is 10 s on PostgreSQL, 30 s on SQLite: a waiter that met it is a 503.
        assert asyncio.run(burst(base)) == [200] * BURST
