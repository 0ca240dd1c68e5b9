"""The dashboard's rules that edge alone enforces, in process: headers, the cross-origin check,
the session cookie policy, settings, redirects, the vendored htmx, and an unchanged OpenAPI."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import ValidationError
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from coffer_edge.config import Settings
from coffer_edge.dashboard.render import STATIC_DIR, binary_size, percent, percent_label, relative_time
from coffer_edge.dashboard.security import content_security_policy, cross_origin_refused
from coffer_edge.dashboard.state import cookie_policy
from coffer_edge.dashboard.web import safe_next
from coffer_edge.main import create_app
from coffer_kit.contract.ids import new_id

pytestmark = pytest.mark.anyio

HTMX = STATIC_DIR / "vendor" / "htmx-2.0.11.min.js"
# DASHBOARD.md §6 and npm's htmx.org@2.0.11 dist/htmx.min.js.
HTMX_SHA384 = "sha384-2OatzQy1H+Zd/IIrjr1TcuDGqLXeHhbooAyJY1KdQMKnr4LZ22k31GBLdYKHmVjg"


def _settings(tmp_path: Path, **values: Any) -> Settings:
    values.setdefault("sweep_interval_seconds", 0)
    # Nothing listens there: auth and metadata are "down" unless a test says otherwise.
    values.setdefault("auth_url", "http://127.0.0.1:9")
    values.setdefault("metadata_url", "http://127.0.0.1:9")
    return Settings(data_dir=tmp_path, **values)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(_settings(tmp_path))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:8080") as c,
    ):
        yield c


def _client_seen(forwarded_allow_ips: str) -> str:
    """The client address uvicorn's proxy-headers layer hands the app for a request from
    127.0.0.1 saying ``X-Forwarded-For: 203.0.113.9``, with these trusted peers."""
    seen: list[str] = []

    async def app(scope: Any, _receive: Any, _send: Any) -> None:
        seen.append(scope["client"][0])

    layer = ProxyHeadersMiddleware(app, trusted_hosts=forwarded_allow_ips)  # type: ignore[arg-type]
    scope = {"type": "http", "client": ("127.0.0.1", 5000), "headers": [(b"x-forwarded-for", b"203.0.113.9")]}
    asyncio.run(layer(scope, None, None))  # type: ignore[arg-type]
    return seen[0]


def test_vendored_htmx_is_the_pinned_release() -> None:
    digest = base64.b64encode(hashlib.sha384(HTMX.read_bytes()).digest()).decode()
    assert f"sha384-{digest}" == HTMX_SHA384


def _openapi(app: FastAPI) -> bytes:
    return json.dumps(app.openapi(), sort_keys=False).encode()


def test_openapi_is_the_same_with_and_without_the_dashboard(tmp_path: Path) -> None:
    with_dashboard = create_app(_settings(tmp_path, dashboard_enabled=True))
    without = create_app(_settings(tmp_path, dashboard_enabled=False))
    assert _openapi(with_dashboard) == _openapi(without)
    assert not any(p.startswith("/dashboard") or p == "/" for p in with_dashboard.openapi()["paths"])


async def test_api_only_install_has_no_dashboard(tmp_path: Path) -> None:
    app = create_app(_settings(tmp_path, dashboard_enabled=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://127.0.0.1:8080") as c:
        page = await c.get("/dashboard/login")
        assert page.status_code == 404
        assert page.json()["error"]["code"] == "not_found"
        assert (await c.get("/")).status_code == 404


async def test_root_redirects_to_the_dashboard(client: httpx.AsyncClient) -> None:
    answer = await client.get("/")
    assert answer.status_code == 307
    assert answer.headers["location"] == "/dashboard/"


async def test_every_dashboard_page_carries_the_security_headers(client: httpx.AsyncClient) -> None:
    for path in ("/dashboard/login", "/dashboard/register", "/dashboard/forgot", "/dashboard/nowhere"):
        answer = await client.get(path)
        assert answer.headers["content-security-policy"] == content_security_policy("http://127.0.0.1:8090")
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert answer.headers["cache-control"] == "no-store"
        assert "HX-Request" in answer.headers["vary"]
        assert "strict-transport-security" not in answer.headers  # plain http here
    csp = content_security_policy("http://127.0.0.1:8090")
    assert "img-src 'self' http://127.0.0.1:8090 data:" in csp
    assert "media-src http://127.0.0.1:8090" in csp
    assert "connect-src 'self' http://127.0.0.1:8090" in csp


async def test_a_body_too_large_is_refused_with_the_security_headers(client: httpx.AsyncClient) -> None:
    """The body guard's refusals (before auth, before the form is read) were bare: no CSP,
    nosniff, frame denial or no-store on a dashboard answer. A cross-origin post is refused
    before its body is read at all."""
    same = {"sec-fetch-site": "same-origin", "content-type": "application/x-www-form-urlencoded"}
    for headers in (same, {**same, "transfer-encoding": "chunked"}):
        answer = await client.post("/dashboard/login", content=b"email=" + b"a" * 200_000, headers=headers)
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"]["code"] == "body_too_large"
        assert answer.headers["content-security-policy"] == content_security_policy("http://127.0.0.1:8090")
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["cache-control"] == "no-store"
    cross = {**same, "sec-fetch-site": "cross-site"}
    answer = await client.post("/dashboard/login", content=b"email=" + b"a" * 200_000, headers=cross)
    assert answer.status_code == 403  # the origin first: the body is never read


async def test_static_files_are_immutable_and_versioned(client: httpx.AsyncClient) -> None:
    page = (await client.get("/dashboard/login")).text
    for marker in ("/dashboard/static/app.", "/dashboard/static/vendor/htmx-2.0.11.min.js"):
        start = page.index(marker)
        url = page[start : page.index('"', start)]
        answer = await client.get(url)
        assert answer.status_code == 200
        assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert (await client.get("/dashboard/static/app.js")).status_code == 404  # only hashed names


async def test_no_inline_script_or_style_in_pages(client: httpx.AsyncClient) -> None:
    """The CSP forbids them, so a page that had one would break in the browser."""
    for path in ("/dashboard/login", "/dashboard/register", "/dashboard/forgot"):
        page = (await client.get(path)).text
        assert "<script>" not in page and "style=" not in page and "<style" not in page
        assert not re.search(r"\son[a-z]+=", page)  # no onclick= and the like


@pytest.mark.parametrize(
    ("method", "fetch_site", "origin", "refused"),
    [
        ("GET", "cross-site", "http://evil.example", False),
        ("POST", "same-origin", None, False),
        ("POST", "none", None, False),
        ("POST", "same-site", "http://127.0.0.1:8080", True),
        ("POST", "cross-site", "http://127.0.0.1:8080", True),
        ("POST", None, "http://127.0.0.1:8080", False),
        ("POST", None, "http://localhost:8080", True),
        ("POST", None, None, True),
        ("DELETE", None, "http://evil.example", True),
    ],
)
def test_cross_origin_check(method: str, fetch_site: str | None, origin: str | None, refused: bool) -> None:
    assert cross_origin_refused(method, fetch_site, origin, "http://127.0.0.1:8080") is refused


async def test_cross_site_post_is_refused_before_anything_runs(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/dashboard/login",
        data={"email": "a@example.com", "password": "x" * 12},
        headers={"sec-fetch-site": "cross-site", "origin": "http://localhost:8080"},
    )
    assert answer.status_code == 403
    assert "This request did not come from the dashboard. Reload and try again." in answer.text
    assert answer.headers["content-security-policy"]
    # auth is down in this test: a 503 would mean the request got as far as calling it.


async def test_auth_down_gives_the_503_page(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/dashboard/login",
        data={"email": "a@example.com", "password": "x" * 12},
        headers={"sec-fetch-site": "same-origin"},
    )
    assert answer.status_code == 503
    assert answer.headers["retry-after"]
    assert "Coffer is temporarily unavailable" in answer.text
    assert "Traceback" not in answer.text


async def test_signed_out_pages_redirect_to_login_with_next(client: httpx.AsyncClient) -> None:
    org_id = new_id("org")
    answer = await client.get(f"/dashboard/o/{org_id}/keys?x=1")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/dashboard/login?next=/dashboard/o/{org_id}/keys%3Fx%3D1"


def test_safe_next_accepts_only_relative_dashboard_paths() -> None:
    assert safe_next("/dashboard/o/org_1") == "/dashboard/o/org_1"
    for bad in (
        "https://evil.example/dashboard/",
        "//evil.example",
        "/api/folders",
        "/dashboard\\x",
        "/dashboard/orgs\r\nX-Injected: 1",
        "",
        None,
    ):
        assert safe_next(bad) is None
    assert safe_next("/dashboardx") is None


def test_cookie_policy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for url in ("http://127.0.0.1:8080", "http://localhost:8080", "https://coffer.example"):
        policy = cookie_policy(_settings(tmp_path, base_url=url))
        assert (policy.name, policy.secure) == ("__Host-coffer_session", True)
    with caplog.at_level(logging.WARNING, logger="coffer.edge.dashboard"):
        policy = cookie_policy(_settings(tmp_path, base_url="http://coffer.lan:8080"))
    assert (policy.name, policy.secure) == ("coffer_session", False)
    assert len([r for r in caplog.records if "plain http" in r.getMessage()]) == 1


def test_production_refuses_an_insecure_or_unconfigured_dashboard(tmp_path: Path) -> None:
    base = {"mode": "production", "internal_token": "t" * 32}
    with pytest.raises(ValidationError, match="https"):
        _settings(tmp_path, base_url="http://coffer.example", dashboard_signup="open", **base)
    for unset in ({}, {"dashboard_signup": ""}):
        with pytest.raises(ValidationError, match="COFFER_DASHBOARD_SIGNUP"):
            _settings(tmp_path, base_url="https://coffer.example", **base, **unset)
    # Issue 23: the proxies whose X-Forwarded-For names the client, or "none", said out loud.
    signup = {"dashboard_signup": "invite"}
    for unset in ({}, {"trusted_proxies": ""}):
        with pytest.raises(ValidationError, match="COFFER_TRUSTED_PROXIES must be set"):
            _settings(tmp_path, base_url="https://coffer.example", **base, **signup, **unset)
    waived = _settings(tmp_path, base_url="https://coffer.example", trusted_proxies="none", **base, **signup)
    # "none" trusts no peer's X-Forwarded-For, loopback's included (uvicorn's default trusts it).
    assert waived.forwarded_allow_ips == ""
    assert _client_seen(waived.forwarded_allow_ips) == "127.0.0.1"
    assert _client_seen("127.0.0.1") == "203.0.113.9"  # (a trusted peer's header is read)
    ok = _settings(
        tmp_path, base_url="https://coffer.example", trusted_proxies="10.0.0.0/8", **base, **signup
    )
    assert ok.dashboard_url == "https://coffer.example/dashboard"
    assert ok.forwarded_allow_ips == "10.0.0.0/8"
    api_only = _settings(tmp_path, base_url="http://coffer.example", dashboard_enabled=False, **base)
    assert not api_only.dashboard_enabled


async def test_https_adds_hsts(tmp_path: Path) -> None:
    app = create_app(_settings(tmp_path, base_url="https://coffer.example"))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="https://coffer.example") as c,
    ):
        answer = await c.get("/dashboard/login")
    assert answer.headers["strict-transport-security"].startswith("max-age=31536000")


def test_filters() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert relative_time(now - timedelta(minutes=3), now) == "3 min ago"
    assert relative_time(now + timedelta(hours=1), now) == "in 1 h"
    assert relative_time(now + timedelta(days=12), now) == "in 12 d"
    assert relative_time(now - timedelta(seconds=5), now) == "just now"
    assert binary_size(512) == "512 B"
    assert binary_size(1536) == "1.5 KiB"
    assert binary_size(10 * 1024**3) == "10 GiB"
    assert percent(80, 100) == 80
    assert percent(5, 0) == 100
    assert percent_label(1, 1024**3) == "< 1"
    assert percent_label(0, 100) == "0"
