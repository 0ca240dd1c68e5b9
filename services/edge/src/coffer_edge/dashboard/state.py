"""The dashboard's typed state, and the session cookie policy it is built with."""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from urllib.parse import urlsplit

from cachetools import TTLCache

from coffer_edge.clients.auth import AccountsClient
from coffer_edge.clients.blob import BlobClient
from coffer_edge.clients.metadata import MetadataClient
from coffer_edge.config import Settings
from coffer_edge.dashboard.render import Renderer
from coffer_edge.ratelimit import RateLimiter

log = logging.getLogger("coffer.edge.dashboard")

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


def _loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class CookiePolicy:
    name: str
    secure: bool

    @property
    def device(self) -> str:
        """The cookie that tells auth's sign-in throttle this browser signed in before
        (``coffer_auth.devices``): named and flagged as the session's."""
        return self.name.replace("session", "device")


def cookie_policy(settings: Settings) -> CookiePolicy:
    """``__Host-coffer_session`` (Secure) wherever browsers keep it: https, and http on loopback.

    Chromium drops a Secure cookie set over plain http to any other host (verified, DASHBOARD.md
    §4); production mode refuses that setup outright, local mode warns once and drops Secure.
    """
    url = urlsplit(settings.dashboard_url or settings.base_url)
    if url.scheme == "https" or _loopback(url.hostname or ""):
        return CookiePolicy("__Host-coffer_session", True)
    log.warning(
        "the dashboard is served over plain http on a non-loopback address (%s): its session cookie "
        "is sent without Secure as coffer_session; use https outside local experiments",
        url.hostname,
    )
    return CookiePolicy("coffer_session", False)


@dataclass
class DashboardState:
    """The dashboard's share of edge's typed state (``EdgeState.dashboard``), made in the lifespan."""

    settings: Settings
    renderer: Renderer
    cookie: CookiePolicy
    ip_limiter: RateLimiter
    # The API's per-key limiter (COFFER_EDGE_RATE_LIMIT): the file browser's uploads count
    # against the same budget, one per user, so a session is no way around the API's limit.
    rate_limiter: RateLimiter
    accounts: AccountsClient
    metadata: MetadataClient
    blob: BlobClient
    # Key-creation forms already answered (a reload or Back re-posts them): id -> True, 1 h.
    used_forms: TTLCache[str, bool] = dataclass_field(
        default_factory=lambda: TTLCache(maxsize=100_000, ttl=3600)
    )

    @property
    def api_url(self) -> str:
        return self.settings.base_url + "/api"
