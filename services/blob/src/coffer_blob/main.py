"""The blob service's two apps: the internal API, and the public CDN host."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware

from coffer_blob import cdn, facts, internal, scan, tus, uploads
from coffer_blob.config import Settings
from coffer_blob.deps import BlobState
from coffer_blob.grants import RevocationCache
from coffer_blob.storage import StorageUnavailable, make_storage
from coffer_blob.transforms.pool import TransformPool
from coffer_blob.transforms.presets import PresetCache
from coffer_kit.app import base_app
from coffer_kit.contract.errors import error_response, unavailable
from coffer_kit.contract.limits import MAX_FILE_BYTES, MAX_UPLOAD_BODY_BYTES
from coffer_kit.guard import BodyLimits
from coffer_kit.health import ReadinessCheck, health_router
from coffer_kit.internal_token import require_internal_token
from coffer_kit.metrics import metrics_router
from coffer_kit.middleware import ResponseHeadersMiddleware, inside_request_context
from coffer_kit.state import clear_state, install_state, state_of


def _lifespan(
    settings: Settings, *, cdn: bool = False
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = BlobState(settings=settings, storage=make_storage(settings))
        if settings.transforms:
            # Workers start with the first transform (or, on the internal listener, the first
            # image facts, issue 50), not here.
            state.transforms = TransformPool(settings)
        if cdn and settings.transforms:
            state.presets = PresetCache(settings.cdn_tuning.preset_cache_seconds)
        if cdn:
            state.revocations = RevocationCache(settings.cdn_tuning.revocation_cache_seconds)
        install_state(app, state)
        try:
            yield
        finally:
            clear_state(app)
            if state.transforms is not None:
                await run_in_threadpool(state.transforms.close)
            state.storage.close()

    return lifespan


def _storage_check(app: FastAPI) -> ReadinessCheck:
    async def check() -> None:
        await run_in_threadpool(state_of(app, BlobState).storage.check)

    return check


async def _on_storage_unavailable(request: Request, exc: Exception) -> JSONResponse:
    return error_response(request, unavailable(f"Storage is unavailable: {exc}", retry_after=1))


def _common(app: FastAPI, *, ready: bool = True) -> None:
    app.add_exception_handler(StorageUnavailable, _on_storage_unavailable)
    app.include_router(health_router({"storage": _storage_check(app)}, ready=ready))


def _internal_body_limits(settings: Settings) -> BodyLimits:
    """Uploads stream their body (the multipart parser counts the file); the other bodies are
    small, but for a full batch of grant revocations (internal.REVOCATIONS_BODY_BYTES, past
    the 64 KiB default of COFFER_MAX_BODY_BYTES)."""
    return settings.body_limits(
        ("POST", r"/internal/v1/uploads/[^/]+/[^/]+", MAX_UPLOAD_BODY_BYTES),
        # A resumable upload's chunk: its route counts it against the upload's length.
        ("PUT", r"/internal/v1/tus/[^/]+/[^/]+/[^/]+", MAX_FILE_BYTES),
        larger=(("POST", r"/internal/v1/grant-revocations", internal.REVOCATIONS_BODY_BYTES),),
    )


def create_app(settings: Settings | None = None, *, api: bool = True) -> FastAPI:
    """The internal listener: blob's internal API (unless ``api`` is off), health, metrics."""
    settings = settings or Settings()
    app = base_app(
        "coffer-blob",
        lifespan=_lifespan(settings),
        body_limits=_internal_body_limits(settings),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    _common(app)
    app.include_router(metrics_router())
    if api:
        guarded = [Depends(require_internal_token)]
        app.include_router(uploads.router, dependencies=guarded)
        app.include_router(internal.router, dependencies=guarded)
        app.include_router(tus.router, dependencies=guarded)
        app.include_router(scan.router, dependencies=guarded)
        app.include_router(facts.router, dependencies=guarded)
    return app


def create_cdn_app(settings: Settings | None = None) -> FastAPI:
    """The CDN listener: public and signed downloads, and health. Nothing else."""
    settings = settings or Settings()
    app = base_app(
        "coffer-cdn",
        service="cdn",
        public=True,
        lifespan=_lifespan(settings, cdn=True),
        body_limits=settings.body_limits(),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    # Public: alive, but no /readyz telling anyone the storage's state (probed on the
    # process's internal listener instead).
    _common(app, ready=False)
    app.include_router(cdn.router)
    # Just inside the request id and access log: the CDN headers, on every answer, errors included.
    layers = [Middleware(ResponseHeadersMiddleware, headers_for=lambda _scope: cdn.CDN_HEADERS)]
    inside_request_context(app, layers)
    return app
