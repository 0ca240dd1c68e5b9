"""The blob service's two apps: the internal API, and the public CDN host."""

from __future__ import annotations

from coffer_kit.app import base_app
from coffer_kit.health import health_router
from fastapi import FastAPI

from coffer_blob.config import Settings


def create_app(settings: Settings | None = None, *, api: bool = True) -> FastAPI:
    """The internal listener: blob's internal API (unless ``api`` is off), health, metrics."""
    settings = settings or Settings()
    app = base_app("coffer-blob", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.settings = settings
    app.include_router(health_router())
    return app


def create_cdn_app(settings: Settings | None = None) -> FastAPI:
    """The CDN listener: public and signed downloads, and health. Nothing else."""
    settings = settings or Settings()
    app = base_app("coffer-cdn", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.settings = settings
    app.include_router(health_router())
    return app
