"""What every service's ``create_app`` starts from."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from coffer_kit.errors import install_error_handlers
from coffer_kit.middleware import RequestContextMiddleware
from coffer_kit.tracing import instrument_app, setup_tracing


def base_app(title: str, service: str | None = None, **kwargs: Any) -> FastAPI:
    """A FastAPI app with the error envelope, request ids, metrics, logs and traces installed.

    ``service`` names the process in metrics and traces (default: the title without "coffer-").
    """
    service = service or title.removeprefix("coffer-")
    app = FastAPI(title=title, **kwargs)
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware, service=service)
    setup_tracing(service)
    instrument_app(app)
    return app


def database_service_app(service: str, database_url: str, settings: Any) -> FastAPI:
    """A service that owns a database (auth, metadata): its engine opens in the lifespan and
    closes after; ``/healthz``, ``/readyz`` (database check) and ``/metrics`` are mounted."""
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    from coffer_kit.db import database_check, make_engine
    from coffer_kit.health import health_router
    from coffer_kit.metrics import metrics_router, register_pool_gauge

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = make_engine(database_url)
        register_pool_gauge(service, lambda: app.state.engine)
        try:
            yield
        finally:
            app.state.engine.dispose()

    app = base_app(f"coffer-{service}", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.include_router(health_router({"database": database_check(lambda: app.state.engine)}))
    app.include_router(metrics_router())
    return app
