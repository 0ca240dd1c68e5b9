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
