"""``/healthz`` (alive: checks nothing external) and ``/readyz`` (can reach what it needs)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from fastapi import APIRouter
from fastapi.responses import JSONResponse

ReadinessCheck = Callable[[], Awaitable[None]]
log = logging.getLogger("coffer.health")

# Below the chart's 4 s probe timeout, with room for the request itself.
CHECK_SECONDS = 3.0


async def _run(name: str, check: ReadinessCheck) -> str:
    try:
        await asyncio.wait_for(check(), timeout=CHECK_SECONDS)
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        log.warning("readiness check failed", extra={"check": name, "error": repr(exc)})
        return "down"
    return "ok"


def health_router(checks: dict[str, ReadinessCheck] | None = None, *, ready: bool = True) -> APIRouter:
    """Health endpoints; each readiness check raises when its dependency is down.

    ``ready=False`` leaves ``/readyz`` out, for a public listener (the CDN host) whose
    readiness is probed on its process's internal listener instead.
    """
    router = APIRouter(include_in_schema=False)
    named = dict(checks or {})

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    if not ready:
        return router

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        # All checks at once, each bounded: the answer comes within CHECK_SECONDS however
        # many dependencies are down (one after another, edge's three could take 6 s against
        # a 4 s probe timeout).
        outcomes = await asyncio.gather(*(_run(name, check) for name, check in named.items()))
        results = dict(zip(named, outcomes, strict=True))
        ok = all(outcome == "ok" for outcome in outcomes)
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "checks": results},
            status_code=200 if ok else 503,
            headers=None if ok else {"Retry-After": "5"},
        )

    return router
