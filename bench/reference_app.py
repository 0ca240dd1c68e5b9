"""The framework's ceiling: one FastAPI JSON route under uvicorn, served exactly like our services.

It answers ``GET /api/assets/{asset_id}`` with an asset-shaped body of the same size as edge's,
and does no work besides. ``python bench/reference_app.py PORT``. Its FastAPI telemetry is set as
a service's is (coffer_kit.tracing): off, or with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, a server
span per request exported like theirs, which prices one such span (bench/run.py).
"""

from __future__ import annotations

import sys
from typing import Any

from fastapi import FastAPI

from coffer_kit.serve import Listener, serve
from coffer_kit.tracing import app_class, setup_tracing, telemetry

setup_tracing("reference")
app: FastAPI = app_class()(docs_url=None, redoc_url=None, openapi_url=None, telemetry=telemetry())

ORG = "org_01JD0000000000000000000000"


@app.get("/api/assets/{asset_id}")
async def get_asset(asset_id: str) -> dict[str, Any]:
    key = f"{ORG}/{asset_id}/file-0000.bin"
    return {
        "id": asset_id,
        "organizationId": ORG,
        "folderId": None,
        "key": key,
        "name": "file-0000.bin",
        "mimeType": "application/octet-stream",
        "size": 4096,
        "publicUrl": f"http://127.0.0.1:8090/{key}",
        "createdAt": "2026-11-22T10:15:30.123Z",
    }


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


if __name__ == "__main__":
    # The same uvicorn settings as every Coffer service (coffer_kit.serve): one process.
    serve([Listener(app, "127.0.0.1", int(sys.argv[1]))], graceful_seconds=5)
