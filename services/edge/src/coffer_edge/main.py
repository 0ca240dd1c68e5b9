"""The edge service: the public API app, and its internal (health, metrics) app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from coffer_edge.clients.auth import AuthClient
from coffer_edge.clients.base import ServiceClient
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.config import Settings
from coffer_edge.ratelimit import RateLimiter
from coffer_edge.routers import assets, folders
from coffer_edge.sweeper import sweep_forever
from coffer_kit.app import base_app
from coffer_kit.health import health_router
from coffer_kit.internal import internal_client
from coffer_kit.metrics import metrics_router

DESCRIPTION = """Coffer's public API: assets and folders of an organization.

Authenticate every request with `x-api-key`; a user key whose user belongs to several
organizations also sends `x-organization-id`. Every error is
`{"error": {"code", "message", "requestId", "details"?}}` with the real HTTP status.
"""


def _dependency_checks(app: FastAPI) -> dict[str, object]:
    async def check(client_attr: str) -> None:
        client: ServiceClient = getattr(app.state, client_attr)
        await client.request("GET", "/healthz", timeout=2)

    return {name: (lambda n=name: check(n)) for name in ("auth", "metadata", "blob")}


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the public app; clients to the other services open in the lifespan."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        token = settings.internal_token.get_secret_value()  # type: ignore[union-attr]
        auth_http = internal_client(settings.auth_url, token, timeout=5)
        metadata_http = internal_client(settings.metadata_url, token, timeout=30)
        # Uploads stream for as long as the client sends; only connecting and pauses are bounded.
        blob_http = internal_client(settings.blob_url, token, timeout=30, read_timeout=300)
        app.state.auth = AuthClient(
            auth_http,
            cache_seconds=settings.edge_auth_cache_seconds,
            cache_size=settings.edge_auth_cache_size,
        )
        app.state.metadata = MetadataClient(metadata_http)
        app.state.blob = BlobClient(blob_http)
        sweeper = None
        if settings.sweep_interval_seconds > 0:
            sweeper = asyncio.create_task(
                sweep_forever(
                    app.state.metadata,
                    app.state.blob,
                    interval=settings.sweep_interval_seconds,
                    intent_age=settings.sweep_intent_age_seconds,
                    tombstone_age=settings.sweep_tombstone_age_seconds,
                )
            )
        try:
            yield
        finally:
            if sweeper is not None:
                sweeper.cancel()
            for http in (auth_http, metadata_http, blob_http):
                await http.close()

    app = base_app(
        "Coffer API",
        service="edge",
        version="1.0.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.rate_limiter = RateLimiter(settings.edge_rate_limit, settings.redis_url)
    app.include_router(health_router(_dependency_checks(app)))  # type: ignore[arg-type]
    app.include_router(folders.router)
    app.include_router(assets.router)
    return app


def create_internal_app(public: FastAPI) -> FastAPI:
    """Health and metrics on a port that is never exposed publicly."""
    app = base_app("coffer-edge-internal", service="edge", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(health_router(_dependency_checks(public)))  # type: ignore[arg-type]
    app.include_router(metrics_router())
    return app
