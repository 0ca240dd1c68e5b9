"""``/healthz`` (alive: checks nothing external) and ``/readyz`` (can reach what it needs)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

ReadinessCheck = Callable[[], Awaitable[None]]
log = logging.getLogger("coffer.health")


def health_router(checks: dict[str, ReadinessCheck] | None = None) -> APIRouter:
    """Health endpoints; each readiness check raises when its dependency is down."""
    router = APIRouter(include_in_schema=False)
    named = dict(checks or {})

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz")
    async def readyz(request: Request) -> JSONResponse:
        results: dict[str, str] = {}
        ok = True
        for name, check in named.items():
            try:
                await asyncio.wait_for(check(), timeout=3)
                results[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - any failure means not ready
                ok = False
                results[name] = "down"
                log.warning("readiness check failed", extra={"check": name, "error": repr(exc)})
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "checks": results},
            status_code=200 if ok else 503,
            headers=None if ok else {"Retry-After": "5"},
        )

    return router
