"""What every service's ``create_app`` starts from."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from coffer_kit.errors import install_error_handlers
from coffer_kit.middleware import RequestContextMiddleware


def base_app(title: str, **kwargs: Any) -> FastAPI:
    """A FastAPI app with the contract's error envelope and request ids installed."""
    app = FastAPI(title=title, **kwargs)
    install_error_handlers(app)
    app.add_middleware(RequestContextMiddleware)
    return app
