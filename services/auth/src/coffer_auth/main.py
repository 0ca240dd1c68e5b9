"""The auth service's app factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from coffer_auth.config import Settings
from coffer_auth.internal import router as internal_router
from coffer_kit.app import base_app
from coffer_kit.db import database_check, make_engine
from coffer_kit.health import health_router
from coffer_kit.metrics import metrics_router, register_pool_gauge


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the auth app; the engine opens in the lifespan, not at import."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = make_engine(settings.auth_database_url)
        register_pool_gauge("auth", lambda: app.state.engine)
        try:
            yield
        finally:
            app.state.engine.dispose()

    app = base_app("coffer-auth", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings

    app.include_router(health_router({"database": database_check(lambda: app.state.engine)}))
    app.include_router(metrics_router())
    app.include_router(internal_router)
    return app
