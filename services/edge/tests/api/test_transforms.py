"""Image transforms' public API (CONTRACT §10), in process: /url's transform parameters and their
refusals, and organization presets (names, bodies, the limit of 20, one organization's presets
invisible to another). Who may write presets is in the authorization matrix
(test_authorization.py); what the CDN does with them, in services/blob/tests/test_cdn_transforms.py."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from coffer_testkit.testing import assert_error, png_bytes


def image(tenant: Any) -> dict[str, Any]:
    response = tenant.api.post("/api/assets", files={"file": ("p.png", png_bytes(), "image/png")})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def test_url_carries_the_transform_it_signs(tenant) -> None:
    asset = image(tenant)
    url = tenant.api.get(
        f"/api/assets/{asset['id']}/url", params={"w": "300", "fmt": "webp", "fit": "cover", "q": "80"}
    ).json()["url"]
    query = parse_qs(urlsplit(url).query)
    # Defaults are left out; the signature covers the canonical form either way.
    signing = ("expires", "by", "signature")
    transform = {name: values[0] for name, values in query.items() if name not in signing}
    assert transform == {"w": "300", "fmt": "webp"}
    preset = tenant.api.get(f"/api/assets/{asset['id']}/url", params={"preset": "thumb"}).json()["url"]
    assert parse_qs(urlsplit(preset).query)["preset"] == ["thumb"]
    plain = tenant.api.get(f"/api/assets/{asset['id']}/url").json()["url"]
    assert set(parse_qs(urlsplit(plain).query)) == {"expires", "by", "signature"}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"w": "0"}, "w"),
        ({"w": "4097"}, "w"),
        ({"h": "12.5"}, "h"),
        ({"w": "１００"}, "w"),  # fullwidth digits
        ({"w": "0" * 4300 + "1"}, "w"),  # past what Python reads as an integer: was a 500
        ({"q": "9" * 5000}, "q"),
        ({"q": "19"}, "q"),
        ({"q": "101"}, "q"),
        ({"fit": "fill"}, "fit"),
        ({"fmt": "gif"}, "fmt"),
        ({"preset": "nope"}, "preset"),
        ({"preset": "thumb", "w": "10"}, "preset"),
        ({"q": "50"}, "w"),  # nothing to do but re-encode at the source's size and format
    ],
)
def test_url_refuses_bad_transforms(tenant, params: dict[str, str], field: str) -> None:
    asset = image(tenant)
    response = tenant.api.get(f"/api/assets/{asset['id']}/url", params=params)
    body = assert_error(response, 400, "invalid_transform")
    assert body.get("details", {}).get("field") == field


def test_another_organizations_asset_is_403_whatever_the_transform(new_tenant) -> None:
    a, b = new_tenant("A"), new_tenant("B")
    asset = image(a)
    assert_error(b.api.get(f"/api/assets/{asset['id']}/url", params={"preset": "thumb"}), 403, "forbidden")


def test_presets(new_tenant) -> None:
    a, b = new_tenant("A"), new_tenant("B")
    api = a.api
    listed = api.get("/api/transform-presets").json()["presets"]
    built_in = ("thumb", "small", "medium", "large")
    assert [(p["name"], p["builtIn"]) for p in listed] == [(n, True) for n in built_in]
    assert api.get("/api/transform-presets/thumb").json() == {
        "name": "thumb",
        "builtIn": True,
        "w": 256,
        "h": 256,
        "fit": "cover",
        "fmt": "webp",
        "q": 80,
    }
    assert_error(api.get("/api/transform-presets/hero"), 404, "not_found")
    created = api.put("/api/transform-presets/hero", json={"w": 1200, "fmt": "avif", "q": 60})
    assert created.status_code == 200, created.text
    assert api.get("/api/transform-presets/hero").json()["w"] == 1200
    asset = image(a)
    assert api.get(f"/api/assets/{asset['id']}/url", params={"preset": "hero"}).status_code == 200
    # B has none of A's presets.
    assert_error(b.api.get("/api/transform-presets/hero"), 404, "not_found")
    assert [p["name"] for p in b.api.get("/api/transform-presets").json()["presets"]] == [
        "thumb",
        "small",
        "medium",
        "large",
    ]
    assert_error(
        b.api.get(f"/api/assets/{image(b)['id']}/url", params={"preset": "hero"}), 400, "invalid_transform"
    )
    # Refusals.
    # A final line break: "$" matches before one, and the name reached blob, which refused it (500).
    for name in ("thumb", "Hero", "_x", "a" * 33, "héro", "foo%0A", "thumb%0A"):
        assert_error(api.put(f"/api/transform-presets/{name}", json={"w": 10}), 400, "invalid_transform")
    for body in ({}, {"q": 50}, {"w": 0}, {"fit": "fill", "w": 1}, {"fmt": "svg"}, {"w": None}):
        assert_error(api.put("/api/transform-presets/bad", json=body), 400, "invalid_transform")
    assert_error(api.put("/api/transform-presets/bad", content=b"w=1"), 415, "unsupported_media_type")
    assert_error(api.delete("/api/transform-presets/thumb"), 400, "invalid_transform")
    assert_error(api.delete("/api/transform-presets/nope"), 404, "not_found")
    for i in range(19):
        assert api.put(f"/api/transform-presets/p{i}", json={"h": 10 + i}).status_code == 200
    assert_error(api.put("/api/transform-presets/one-more", json={"w": 1}), 409, "conflict")
    assert api.delete("/api/transform-presets/hero").json() == {"success": True}
    assert api.put("/api/transform-presets/one-more", json={"w": 1}).status_code == 200
