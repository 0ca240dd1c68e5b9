"""The metadata service's app factory."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI
from sqlalchemy.engine import Engine
from sqlmodel import Session

from coffer_kit.app import database_service_app
from coffer_kit.db import DatabaseState
from coffer_kit.internal_token import require_internal_token
from coffer_kit.metrics import register_gauge
from coffer_kit.state import installed_state, state_of
from coffer_metadata import retention
from coffer_metadata.assets import repository
from coffer_metadata.assets.router import hot_router as hot_assets_router
from coffer_metadata.assets.router import router as assets_router
from coffer_metadata.config import Settings
from coffer_metadata.events import router as events_router
from coffer_metadata.facts import router as facts_router
from coffer_metadata.folders.router import router as folders_router
from coffer_metadata.retention import RETENTION_BATCH
from coffer_metadata.scans import router as scans_router
from coffer_metadata.trash import router as trash_router
from coffer_metadata.tus import counts as tus_counts
from coffer_metadata.tus import hot_router as hot_tus_router
from coffer_metadata.tus import router as tus_router
from coffer_metadata.webhooks.router import router as webhooks_router


def _backlog(engine: Engine) -> list[tuple[list[str], float]]:
    try:
        with Session(engine) as session:
            intents, tombstones = repository.backlog(session)
    except Exception:  # noqa: BLE001 - a scrape must not fail because the database is down
        return []
    return [(["intent"], intents), (["tombstone"], tombstones)]


def _tus(engine: Engine) -> list[tuple[list[str], float]]:
    try:
        with Session(engine) as session:
            opened, expired = tus_counts(session)
    except Exception:  # noqa: BLE001 - as in _backlog
        return []
    return [(["open"], opened), (["expired"], expired)]


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the metadata app; the engine opens in the lifespan, not at import."""
    settings = settings or Settings()
    app = database_service_app("metadata", settings.metadata_database_url, settings)
    register_gauge(
        "coffer_sweeper_backlog",
        "Stale upload intents (the sweeper may take them: claimed, expired, or a one-shot upload's older "
        "than an hour) and delete tombstones waiting for the sweeper.",
        ["kind"],
        lambda: _backlog(state.database.engine) if (state := installed_state(app, DatabaseState)) else [],
    )
    register_gauge(
        "coffer_tus_uploads",
        "Unfinished resumable uploads: open, and expired ones the sweeper has yet to delete.",
        ["state"],
        lambda: _tus(state.database.engine) if (state := installed_state(app, DatabaseState)) else [],
    )
    internal = [Depends(require_internal_token)]
    # Lean routes: each checks the internal token itself (coffer_kit.routes).
    app.include_router(hot_assets_router)
    app.include_router(hot_tus_router)
    app.include_router(folders_router, dependencies=internal)
    app.include_router(assets_router, dependencies=internal)
    app.include_router(events_router, dependencies=internal)
    app.include_router(tus_router, dependencies=internal)
    app.include_router(webhooks_router, dependencies=internal)
    app.include_router(scans_router, dependencies=internal)
    app.include_router(trash_router, dependencies=internal)
    if settings.metadata_retention_interval_seconds > 0:
        database_lifespan = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI) -> AsyncIterator[None]:
            async with database_lifespan(app):
                pruner = asyncio.create_task(
                    retention.prune_forever(
                        functools.partial(prune, app), interval=settings.metadata_retention_interval_seconds
                    )
                )
                try:
                    yield
                finally:
                    pruner.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pruner

        app.router.lifespan_context = lifespan
    app.include_router(facts_router, dependencies=internal)
    return app


def prune(app: FastAPI) -> dict[str, int]:
    """One retention pass over this metadata's database (coffer_metadata.retention)."""
    state = state_of(app, DatabaseState)
    settings = state.settings
    assert isinstance(settings, Settings)
    return retention.prune(
        state.database.engine,
        batch=RETENTION_BATCH,
        event_days=settings.metadata_event_retention_days,
        log_days=settings.metadata_webhook_log_retention_days,
    )
