"""Hostile requests through the real apps of all four services (issue 11): each gets a 4xx in
the envelope and changes nothing. Each rule has its own test where its service enforces it;
this runs the issue's reproductions as an outsider sent them, through edge."""

from __future__ import annotations

from typing import Any

import httpx

from coffer_testkit.testing import assert_error


def test_hostile_requests_get_a_4xx_in_the_envelope(tenant: Any) -> None:
    api = tenant.api
    # A Latin-1 file name (item 2): refused, nothing stored.
    body = b'--B\r\nContent-Disposition: form-data; name="file"; filename="caf\xe9.txt"\r\n\r\nx\r\n--B--\r\n'
    response = api.post(
        "/api/assets", content=body, headers={"content-type": "multipart/form-data; boundary=B"}
    )
    assert_error(response, 400, "invalid_request")
    # An offset past a 64-bit integer (item 3), and past the offset bound (issue 49).
    assert_error(api.get("/api/assets", params={"offset": 2**63}), 400, "invalid_request")
    assert_error(api.get("/api/assets", params={"offset": 100_001}), 400, "invalid_request")
    # Lone surrogates in JSON (item 4), in the name and in parentId.
    for text in ('{"name":"x\\ud800y"}', '{"name":"x","parentId":"\\udfff"}'):
        response = api.post("/api/folders", content=text, headers={"content-type": "application/json"})
        assert_error(response, 400, "invalid_request")
    assert api.get("/api/assets").json()["total"] == 0
    assert api.get("/api/folders").json() == {"folders": []}
    # A preamble before the first boundary is allowed (RFC 2046).
    body = (
        b"preamble\r\n--B\r\n"
        b'Content-Disposition: form-data; name="file"; filename="p.txt"\r\n\r\nx\r\n--B--\r\n'
    )
    response = api.post(
        "/api/assets", content=body, headers={"content-type": "multipart/form-data; boundary=B"}
    )
    assert response.status_code == 201, response.text
    # A Range bound of 5,000 digits on the CDN host (item 5), no key needed.
    public_url = response.json()["publicUrl"]
    assert_error(
        httpx.get(public_url, headers={"range": "bytes=" + "9" * 5000 + "-"}), 416, "range_not_satisfiable"
    )
    # The CDN host tells nobody how its storage is doing (item 8).
    cdn = public_url.split("/org_")[0]
    assert_error(httpx.get(f"{cdn}/readyz"), 404, "not_found")
    # A 405 names every method of the path (item 8).
    response = api.put("/api/folders")
    assert_error(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "GET, POST"


def test_every_api_answer_is_no_store_and_nosniff(tenant: Any, anon: Any) -> None:
    """Issue 23: /api answers (signed URLs included) could be kept by a shared cache."""
    asset = tenant.api.post("/api/assets", files={"file": ("a.txt", b"a")}).json()
    preflight = {"origin": "https://x", "access-control-request-method": "POST"}
    answers = [
        tenant.api.get(f"/api/assets/{asset['id']}"),  # the fast route
        tenant.api.get(f"/api/assets/{asset['id']}/url"),
        tenant.api.get("/api/assets"),
        tenant.api.get("/api/folders/fld_nope"),
        anon.get("/api/folders"),
        anon.options("/api/uploads", headers=preflight),
    ]
    for answer in answers:
        assert answer.headers["cache-control"] == "no-store", answer.request.url
        assert answer.headers["x-content-type-options"] == "nosniff", answer.request.url
    assert answers[-1].headers["access-control-allow-origin"] == "*"  # CORS kept beside them


def test_names_that_reorder_what_a_person_sees_are_refused(tenant: Any) -> None:
    """Issue 23: 'invoice\\u202efdp.exe' is shown as 'invoiceexe.pdf'."""
    api = tenant.api
    for bidi in ("\u202e", "\u202a", "\u2067", "\u2069"):
        name = f"invoice{bidi}fdp.exe"
        assert_error(api.post("/api/folders", json={"name": name}), 400, "invalid_request")
        assert_error(api.post("/api/assets", files={"file": (name, b"x")}), 400, "invalid_request")
        named = api.post("/api/assets", files={"file": ("a", b"x")}, data={"name": name})
        assert_error(named, 400, "invalid_request")
    asset = api.post("/api/assets", files={"file": ("a.txt", b"x")}).json()
    assert_error(api.patch(f"/api/assets/{asset['id']}", json={"name": "a\u202eb"}), 400, "invalid_request")
    # Right-to-left names, with their direction marks, are fine.
    assert api.post("/api/folders", json={"name": "\u05e9\u05dc\u05d5\u05dd\u200f"}).status_code == 201
    assert [a["name"] for a in api.get("/api/assets").json()["assets"]] == ["a.txt"]


def _form(boundary: str) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="b.txt"\r\n\r\n'
        f"x\r\n--{boundary}--\r\n"
    ).encode()


def _with_boundary(post: Any, boundary: str) -> httpx.Response:
    return post(  # type: ignore[no-any-return]
        content=_form(boundary), headers={"content-type": f"multipart/form-data; boundary={boundary}"}
    )


def test_a_boundary_longer_than_rfc_2046_allows_is_400(tenant: Any) -> None:
    """RFC 2046 §5.1.1: 1 to 70 characters. 257 was a 500 (the parser's own bound, 256, raised)."""
    api = tenant.api
    token_url = api.post("/api/upload-tokens", json={}).json()["url"]
    by_key = lambda **kw: api.post("/api/assets", **kw)  # noqa: E731
    by_token = lambda **kw: httpx.post(token_url, timeout=60, **kw)  # noqa: E731
    for post in (by_key, by_token):
        for length in (71, 257):
            error = assert_error(_with_boundary(post, "b" * length), 400, "invalid_request")
            assert error["details"] == {"field": "content-type"}
        # At the bound: stored (and the token was not spent by the refusals before).
        response = _with_boundary(post, "b" * 70)
        assert response.status_code == 201, response.text
    assert api.get("/api/assets").json()["total"] == 2


def test_a_trailing_slash_is_a_404_not_a_redirect(anon: Any) -> None:
    """The 307 to the path without it came before authentication, its Location from the
    client's Host header."""
    for path in ("/api/folders/", "/api/folders%2F"):
        response = anon.get(path, headers={"host": "evil.example"})
        assert_error(response, 404, "not_found")
        assert "location" not in response.headers
