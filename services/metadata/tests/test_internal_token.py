"""Every metadata route but health and metrics refuses a caller without the internal token,
the lean routes (which check it themselves, coffer_kit.routes) included."""

from __future__ import annotations

import re
import secrets

import httpx
import pytest

from coffer_kit.internal import INTERNAL_TOKEN_HEADER

pytestmark = pytest.mark.anyio


async def test_every_route_refuses_a_caller_without_the_token(api: httpx.AsyncClient) -> None:
    document = (await api.get("/openapi.json")).json()
    asked = 0
    for path, operations in document["paths"].items():
        if path in ("/healthz", "/readyz", "/metrics"):
            continue
        concrete = re.sub(r"\{[^}]+\}", "ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", path)
        for method in operations:
            for token in ("", secrets.token_urlsafe(24)):
                response = await api.request(
                    method.upper(), concrete, headers={INTERNAL_TOKEN_HEADER: token}, json={}
                )
                assert response.status_code == 401, (method, path, response.text)
                assert response.json()["error"]["code"] == "unauthorized"
                asked += 1
    # The hot routes are among them.
    hot = [
        ("get", "/internal/v1/orgs/{org_id}/assets/{asset_id}"),
        ("post", "/internal/v1/orgs/{org_id}/intents"),
        ("post", "/internal/v1/orgs/{org_id}/assets"),
    ]
    assert all(method in document["paths"][path] for method, path in hot)
    assert asked > 40
