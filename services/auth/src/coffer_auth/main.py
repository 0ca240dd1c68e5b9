"""The auth service's app factory."""

from __future__ import annotations

from fastapi import FastAPI

from coffer_auth.config import Settings
from coffer_auth.internal import router as internal_router
from coffer_kit.app import database_service_app


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the auth app; the engine opens in the lifespan, not at import."""
    settings = settings or Settings()
    app = database_service_app("auth", settings.auth_database_url, settings)
    app.include_router(internal_router)
    return app
