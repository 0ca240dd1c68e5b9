"""The web dashboard, served by edge under ``/dashboard`` (docs/dashboard.md).

Server-rendered Jinja2 pages, htmx for fragments, every form working without JavaScript.
Everything it shows or changes is asked of auth (sessions, orgs, members, keys, audit) and
metadata (usage, folders, assets) and blob (uploads, signed URLs) through their internal APIs;
edge keeps no state of its own but a 5 s cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.middleware import Middleware
from starlette.types import Scope

from coffer_edge.clients.auth import AccountsClient
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.config import Settings
from coffer_edge.dashboard.render import Renderer
from coffer_edge.dashboard.security import CROSS_ORIGIN_MESSAGE, DashboardGuard
from coffer_edge.dashboard.state import CookiePolicy, DashboardState, cookie_policy
from coffer_edge.ratelimit import RateLimiter
from coffer_kit.middleware import inside_request_context


@dataclass(frozen=True, slots=True)
class Dashboard:
    """What the app is built with (routes, middleware, templates); its state comes in the lifespan."""

    settings: Settings
    renderer: Renderer
    cookie: CookiePolicy

    @classmethod
    def install(cls, app: FastAPI, settings: Settings) -> Dashboard:
        """Mount the dashboard's routes, guard and error pages on the public app."""
        from coffer_edge.dashboard.routes import account, files, keys, members, orgs, public, trash, webhooks
        from coffer_edge.dashboard.web import install_error_pages

        assert settings.dashboard_url is not None
        renderer = Renderer(globals_={"signup": settings.signup})

        def refusal(_scope: Scope) -> bytes:
            context = {"title": "Not allowed", "status": 403, "message": CROSS_ORIGIN_MESSAGE, "narrow": True}
            return renderer.text("error.html", context).encode()

        # Just inside the request-id, access-log and metrics middleware (its refusals are counted
        # and logged like any answer), outside the body guard: a body or form too large is
        # refused with the dashboard's headers too, and a cross-origin post before its body is read.
        guard = Middleware(
            DashboardGuard, dashboard_url=settings.dashboard_url, cdn_url=settings.cdn_url, refusal=refusal
        )
        inside_request_context(app, [guard])
        for module in (public, orgs, keys, members, trash, files, webhooks, account):
            app.include_router(module.router)
        install_error_pages(app)

        @app.get("/", include_in_schema=False)
        async def home() -> RedirectResponse:
            return RedirectResponse("/dashboard/", status_code=307)

        return cls(settings=settings, renderer=renderer, cookie=cookie_policy(settings))

    def state(
        self, accounts: AccountsClient, metadata: MetadataClient, blob: BlobClient, rate_limiter: RateLimiter
    ) -> DashboardState:
        """The dashboard's share of edge's state, with the clients and API limiter the lifespan made."""
        return DashboardState(
            settings=self.settings,
            renderer=self.renderer,
            cookie=self.cookie,
            ip_limiter=RateLimiter(
                self.settings.dashboard_ip_limit, self.settings.redis_url, self.settings.redis_key_prefix
            ),
            accounts=accounts,
            metadata=metadata,
            blob=blob,
            rate_limiter=rate_limiter,
        )
