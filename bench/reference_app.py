"""The framework's ceiling: one FastAPI JSON route under uvicorn, served exactly like our services.

It answers ``GET /api/assets/{asset_id}`` with an asset-shaped body of the same size as edge's,
and does no work besides. ``python bench/reference_app.py PORT``.
"""

from __future__ import annotations

import sys
from typing import Any

from fastapi import FastAPI

from coffer_kit.serve import Listener, serve

app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

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
