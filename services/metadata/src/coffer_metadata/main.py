"""The metadata service's app factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from coffer_kit.app import base_app
from coffer_kit.db import database_check, make_engine
from coffer_kit.health import health_router
from coffer_kit.internal import require_internal_token
from fastapi import Depends, FastAPI

from coffer_metadata.assets.router import router as assets_router
from coffer_metadata.config import Settings
from coffer_metadata.folders.router import router as folders_router


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the metadata app; the engine opens in the lifespan, not at import."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = make_engine(settings.metadata_database_url)
        try:
            yield
        finally:
            app.state.engine.dispose()

    app = base_app("coffer-metadata", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.include_router(health_router({"database": database_check(lambda: app.state.engine)}))
    internal = [Depends(require_internal_token)]
    app.include_router(folders_router, dependencies=internal)
    app.include_router(assets_router, dependencies=internal)
    return app
