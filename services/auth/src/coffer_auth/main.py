"""The auth service's app factory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import FastAPI
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from coffer_auth import audit, passwords, sessions
from coffer_auth.config import Settings
from coffer_auth.dashboard_api import router as dashboard_router
from coffer_auth.deps import AuthState
from coffer_auth.internal import router as internal_router
from coffer_auth.key_api import router as key_api_router
from coffer_auth.upload_tokens import router as upload_tokens_router
from coffer_kit.app import database_service_app
from coffer_kit.contract.limits import AUDIT_BATCH_BYTES
from coffer_kit.db import DatabaseState, writer
from coffer_kit.metrics import RETENTION_PRUNED
from coffer_kit.state import install_state, state_of

log = logging.getLogger("coffer.auth")

# Expired sessions and audit events past the retention go once an hour: a cheap indexed
# delete, harmless when several replicas run it.
SWEEP_INTERVAL_SECONDS = 3600.0
# Audit deletes of one pass, at most (each of AuthTuning.audit_retention_batch rows): the pass is
# bounded however large the backlog; the next passes work through the rest.
AUDIT_BATCHES_PER_PASS = 10


def sweep(app: FastAPI) -> tuple[int, int]:
    """Delete expired sessions and old audit events (a bounded number, counted in
    ``coffer_retention_pruned_total{kind="audit"}``); answers (sessions, events) deleted."""
    state = state_of(app, AuthState)
    settings = state.settings
    with Session(writer(state.database.engine)) as session:
        ended = sessions.sweep(session, lifetimes=sessions.Lifetimes.of(settings))
        session.commit()
    old = 0
    for _ in range(AUDIT_BATCHES_PER_PASS):
        with Session(writer(state.database.engine)) as session:
            done = audit.sweep(
                session,
                retention_days=settings.audit_retention_days,
                limit=settings.auth_tuning.audit_retention_batch,
            )
            session.commit()
        old += done
        if done < settings.auth_tuning.audit_retention_batch:
            break
    if old:
        RETENTION_PRUNED.labels("audit").inc(old)
    return ended, old


async def _sweeper(app: FastAPI) -> None:
    while True:
        try:
            ended, old = await anyio.to_thread.run_sync(sweep, app)
            if ended or old:
                log.info("swept", extra={"event": "sweep", "sessions": ended, "audit_events": old})
        except SQLAlchemyError:
            log.warning("sweep failed; will retry", exc_info=True)
        await asyncio.sleep(SWEEP_INTERVAL_SECONDS)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the auth app; the engine opens in the lifespan, not at import."""
    settings = settings or Settings()
    # The audit relay's batches of change events may pass the 64 KiB other bodies are held to.
    larger = (("POST", r"/internal/v1/audit/changes", AUDIT_BATCH_BYTES),)
    app = database_service_app(
        "auth", settings.auth_database_url, settings, body_limits=settings.body_limits(larger=larger)
    )
    app.include_router(internal_router)
    app.include_router(upload_tokens_router)
    app.include_router(key_api_router)
    app.include_router(dashboard_router)
    database_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with database_lifespan(app):
            base = state_of(app, DatabaseState)
            install_state(
                app,
                AuthState(
                    settings=base.settings, database=base.database, password_limiter=passwords.new_limiter()
                ),
            )
            # Computed once, off the first sign-in with an unknown email.
            warm = asyncio.create_task(anyio.to_thread.run_sync(passwords.dummy_hash))
            sweeper = asyncio.create_task(_sweeper(app))
            try:
                yield
            finally:
                for task in (warm, sweeper):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    app.router.lifespan_context = lifespan
    return app
