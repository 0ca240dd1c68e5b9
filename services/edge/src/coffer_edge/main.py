"""The edge service: the public API app, and its internal (health, metrics) app."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.types import Scope

from coffer_edge.audit_relay import AuditRelay
from coffer_edge.clients.auth import AccountsClient, AuthClient
from coffer_edge.clients.base import ServiceClient
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.clients.upload_tokens import UploadTokenClient
from coffer_edge.config import Settings
from coffer_edge.dashboard import Dashboard
from coffer_edge.deps import EdgeState, refuse_unreadable_body, require_declared_actions
from coffer_edge.facts import FactsRelay
from coffer_edge.ratelimit import RateLimiter
from coffer_edge.revocations import RevocationRelay
from coffer_edge.routers import assets, folders, keys, transform_presets, tus, uploads, usage, webhooks
from coffer_edge.routers import trash as trash_routes
from coffer_edge.scans import SCAN_TIMEOUT_SECONDS, ScanModeRelay, ScanRelay
from coffer_edge.sweeper import expire_forever, sweep_forever
from coffer_kit.app import base_app
from coffer_kit.contract.limits import MAX_FILE_BYTES, MAX_UPLOAD_BODY_BYTES
from coffer_kit.health import ReadinessCheck, health_router
from coffer_kit.internal import internal_client
from coffer_kit.metrics import metrics_router
from coffer_kit.middleware import ResponseHeadersMiddleware
from coffer_kit.state import clear_state, install_state, state_of

DESCRIPTION = """Coffer's public API: assets and folders of an organization.

Authenticate every request with `x-api-key`; a user key whose user belongs to several
organizations also sends `x-organization-id`. Every error is
`{"error": {"code", "message", "requestId", "details"?}}` with the real HTTP status.
"""


def _dependency_checks(app: FastAPI) -> dict[str, ReadinessCheck]:
    def check(client: Callable[[EdgeState], ServiceClient]) -> ReadinessCheck:
        async def ready() -> None:
            await client(state_of(app, EdgeState)).request("GET", "/healthz", timeout=2)

        return ready

    return {
        "auth": check(lambda state: state.auth),
        "metadata": check(lambda state: state.metadata),
        "blob": check(lambda state: state.blob),
    }


def operation_id(route: APIRoute) -> str:
    """``listFolders`` for ``list_folders``: generated clients name their methods after these
    (FastAPI's default made ``list_folders_api_folders_get``)."""
    first, *rest = route.name.split("_")
    return first + "".join(word.capitalize() for word in rest)


# Every operation needs the key; a user key of several organizations adds the organization.
_SECURITY: list[dict[str, list[str]]] = [{"ApiKey": [], "OrganizationId": []}, {"ApiKey": []}]


def _tidy_document(app: FastAPI) -> None:
    """What FastAPI's document gets wrong for Coffer, fixed once when it is first built.

    - 422 is never sent (validation errors are 400 ``invalid_request``, already documented),
      so FastAPI's automatic 422 responses and their schemas go.
    - Two optional header schemes read as alternatives ("either header"); the key is always
      required, the organization only sometimes.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = build()
        for operations in document.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
                security = operation.get("security")
                if security and {} not in security:  # (the tus routes say theirs)
                    operation["security"] = _SECURITY
        schemas = document.get("components", {}).get("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the public app; clients to the other services open in the lifespan."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        token = settings.internal_secret()
        auth_http = internal_client(settings.auth_url, token, timeout=5)
        metadata_http = internal_client(settings.metadata_url, token, timeout=30)
        # Uploads stream for as long as the client sends; only connecting and pauses are bounded.
        blob_http = internal_client(settings.blob_url, token, timeout=30, read_timeout=300)
        state = EdgeState(
            settings=settings,
            auth=AuthClient(
                auth_http,
                cache_seconds=settings.edge_auth_cache_seconds,
                cache_size=settings.edge_auth_cache_size,
                negative_seconds=settings.edge_tuning.auth_negative_cache_seconds,
            ),
            metadata=MetadataClient(
                metadata_http,
                cache_seconds=settings.edge_auth_cache_seconds,
                cache_size=settings.edge_auth_cache_size,
            ),
            blob=BlobClient(blob_http),
            rate_limiter=RateLimiter(settings.edge_rate_limit, settings.redis_url, settings.redis_key_prefix),
            auth_failures=RateLimiter(
                settings.edge_auth_failure_limit, settings.redis_url, settings.redis_key_prefix
            ),
            upload_tokens=UploadTokenClient(
                auth_http,
                cache_seconds=settings.edge_auth_cache_seconds,
                cache_size=settings.edge_auth_cache_size,
            ),
        )
        if dashboard is not None:
            state.dashboard = dashboard.state(
                AccountsClient(
                    auth_http,
                    cache_seconds=settings.edge_auth_cache_seconds,
                    cache_size=settings.edge_auth_cache_size,
                ),
                state.metadata,
                state.blob,
                state.rate_limiter,
            )
        install_state(app, state)
        tasks = []
        if (every := settings.edge_audit_relay_interval_seconds) > 0:
            relay = AuditRelay(state.metadata, state.auth, interval=every)
            state.metadata.on_change = relay.changed
            tasks.append(asyncio.create_task(relay.run()))
        if (every := settings.edge_scan_interval_seconds) > 0:
            scans = ScanRelay(
                state.metadata,
                state.blob,
                state.auth,
                interval=every,
                retries=settings.edge_tuning.scan_retries,
                backoff=settings.edge_tuning.scan_backoff_seconds,
                concurrency=settings.edge_tuning.scan_concurrency,
                timeout=SCAN_TIMEOUT_SECONDS,
            )
            state.scans = scans
            modes = ScanModeRelay(
                state.metadata,
                state.blob,
                state.auth,
                interval=every,
                settle_seconds=settings.edge_auth_cache_seconds + 1,
            )
            tasks += [asyncio.create_task(scans.run()), asyncio.create_task(modes.run())]
        if (every := settings.edge_facts_interval_seconds) > 0:
            facts = FactsRelay(state.metadata, state.blob, interval=every)
            state.facts = facts
            tasks.append(asyncio.create_task(facts.run()))
        if (every := settings.edge_revocation_interval_seconds) > 0:
            revocations = RevocationRelay(state.auth, state.blob, interval=every)
            state.revocations = revocations
            tasks.append(asyncio.create_task(revocations.run()))
        sweeper = None
        if settings.sweep_interval_seconds > 0:
            sweeper = asyncio.create_task(
                sweep_forever(
                    state.metadata,
                    state.blob,
                    interval=settings.sweep_interval_seconds,
                    intent_age=settings.sweep_intent_age_seconds,
                    tombstone_age=settings.sweep_tombstone_age_seconds,
                    tokens=state.upload_tokens,
                )
            )
        if (every := settings.edge_expiry_interval_seconds) > 0:
            tasks.append(
                asyncio.create_task(expire_forever(state.metadata, state.blob, state.auth, interval=every))
            )
        try:
            yield
        finally:
            clear_state(app)
            if sweeper is not None:
                sweeper.cancel()
            for task in tasks:
                task.cancel()
            for http in (auth_http, metadata_http, blob_http):
                await http.close()

    app = base_app(
        "Coffer API",
        service="edge",
        public=True,
        version="1.0.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_url="/api/openapi.json",
        # No Swagger UI page: it loads its script from a third-party CDN onto the origin where the
        # dashboard's session cookie lives (issue 23). The document is served for any viewer.
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=operation_id,
        # The uploads stream their body (counted by the route); every other body is read whole.
        body_limits=settings.body_limits(
            ("POST", r"/api/assets", MAX_UPLOAD_BODY_BYTES),
            ("POST", r"/api/uploads", MAX_UPLOAD_BODY_BYTES),
            # Resumable uploads' chunks (CONTRACT §9): each counted against its upload's length.
            ("POST", r"/api/uploads/tus", MAX_FILE_BYTES),
            ("PATCH", r"/api/uploads/tus/[^/]+", MAX_FILE_BYTES),
            # ... and a POST standing for a PATCH (X-HTTP-Method-Override, tus 1.0.0 core).
            ("POST", r"/api/uploads/tus/[^/]+", MAX_FILE_BYTES),
            ("POST", r"/dashboard/o/[^/]+/files/upload", MAX_UPLOAD_BODY_BYTES),
        ),
    )
    _tidy_document(app)
    app.include_router(health_router(_dependency_checks(app)))
    app.include_router(folders.router)
    app.include_router(assets.lean_router)
    app.include_router(assets.router)
    app.include_router(assets.json_router)
    app.include_router(usage.router)
    app.include_router(trash_routes.router)
    app.include_router(uploads.router)
    app.include_router(uploads.json_router)
    app.include_router(tus.router)
    app.include_router(tus.open_router)
    app.include_router(webhooks.router)
    webhooks.document_events(app)
    app.include_router(transform_presets.router)
    app.include_router(transform_presets.json_router)
    app.include_router(keys.router)
    require_declared_actions(app)
    app.add_exception_handler(RequestValidationError, refuse_unreadable_body)  # type: ignore[arg-type]
    app.add_middleware(ResponseHeadersMiddleware, headers_for=api_headers)
    # The dashboard's routes stay out of the OpenAPI document: it describes the public API only.
    dashboard = Dashboard.install(app, settings) if settings.dashboard_enabled else None
    return app


# Every /api answer, errors included (issue 23): never kept by a cache (signed URLs and
# asset data are per key), and never sniffed into another type.
_API_HEADERS = [(b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff")]


def api_headers(scope: Scope) -> list[tuple[bytes, bytes]] | None:
    """The headers of every /api answer, with CORS on the token upload route's and the tus
    routes' (which also answer Tus-Resumable)."""
    path = scope.get("path", "")
    if not path.startswith("/api/"):
        return None
    return _API_HEADERS + (uploads.upload_cors_headers(scope) or tus.tus_headers(scope) or [])


def create_internal_app(public: FastAPI) -> FastAPI:
    """Health and metrics on a port that is never exposed publicly."""
    app = base_app("coffer-edge-internal", service="edge", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(health_router(_dependency_checks(public)))
    app.include_router(metrics_router())
    return app
