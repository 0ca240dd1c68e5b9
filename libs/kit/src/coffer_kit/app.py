"""What every service's ``create_app`` starts from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from coffer_kit.contract.errors import install_error_handlers
from coffer_kit.guard import BodyGuardMiddleware, BodyLimits, UnhandledErrorMiddleware
from coffer_kit.middleware import RequestContextMiddleware
from coffer_kit.settings import BaseServiceSettings
from coffer_kit.tracing import app_class, setup_tracing, telemetry

if TYPE_CHECKING:  # edge and blob own no database: they never import SQLAlchemy
    from sqlalchemy.engine import Engine


def base_app(
    title: str,
    service: str | None = None,
    *,
    body_limits: BodyLimits | None = None,
    public: bool = False,
    **kwargs: Any,
) -> FastAPI:
    """A FastAPI app with the error envelope, request ids, body bounds, metrics, logs and traces.

    ``service`` names the process in metrics and traces (default: the title without "coffer-");
    ``body_limits`` bounds request bodies (default: 64 KiB, JSON 32 deep, nothing streamed);
    ``public``: anyone reaches it, so a caller's trace context is not its to give
    (coffer_kit.tracing.PublicTracedFastAPI).
    """
    service = service or title.removeprefix("coffer-")
    setup_tracing(service)
    # No redirect to the path with or without a trailing slash (Starlette's default): that 307
    # came before any route, so before authentication, and took its Location from the client's
    # Host header. Such a path is a 404 or 405 like any other unknown one.
    app = app_class(public=public)(title=title, telemetry=telemetry(), redirect_slashes=False, **kwargs)
    install_error_handlers(app)
    # Innermost first: the guard (500 envelope, 405's Allow) answers inside the request-id
    # middleware, so its 500 carries the request id and is counted and logged like any other.
    app.add_middleware(UnhandledErrorMiddleware)
    app.add_middleware(BodyGuardMiddleware, limits=body_limits)
    app.add_middleware(RequestContextMiddleware, service=service)
    return app


def database_service_app(
    service: str, database_url: str, settings: BaseServiceSettings, *, body_limits: BodyLimits | None = None
) -> FastAPI:
    """A service that owns a database (auth, metadata): its typed state (settings and database)
    is installed by the lifespan, the engine closed after; ``/healthz``, ``/readyz`` (database
    check) and ``/metrics`` are mounted. ``body_limits``: the settings' own unless given."""
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    from coffer_kit.db import Database, DatabaseState, database_check
    from coffer_kit.health import health_router
    from coffer_kit.metrics import metrics_router, register_pool_gauge
    from coffer_kit.state import clear_state, install_state, state_of

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        database = Database.open(database_url, budget=settings.database_budget())
        install_state(app, DatabaseState(settings=settings, database=database))
        register_pool_gauge(service, lambda: database.engine)
        try:
            yield
        finally:
            clear_state(app)
            await database.aclose()

    def engine() -> Engine:
        return state_of(app, DatabaseState).database.engine

    app = base_app(
        f"coffer-{service}",
        lifespan=lifespan,
        body_limits=body_limits or settings.body_limits(),
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(health_router({"database": database_check(engine)}))
    app.include_router(metrics_router())
    return app
