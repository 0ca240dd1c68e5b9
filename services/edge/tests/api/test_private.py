"""Private assets (CONTRACT §12) through the public API, on both databases: publicUrl null,
the bare key 404 exactly as a missing key, signed URLs 200, a switch that shows at the CDN
within 5 s both ways, the list filter, the organization's default, upload tokens, and the
refusals. The same on both storage drivers over real processes: tests/e2e/test_private.py."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import httpx

from coffer_kit.contract.ids import new_id
from coffer_testkit.testing import TLS, assert_error

DATA = b"for the eyes of the owner only\n" * 100
SWITCH_SECONDS = 5.0  # CONTRACT §12


def upload(tenant, name: str = "secret.txt", **fields: str) -> dict[str, Any]:
    response = tenant.api.post("/api/assets", files={"file": (name, DATA, "text/plain")}, data=fields)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def bare_url(stack, asset: dict[str, Any]) -> str:
    """The asset's key on the CDN, as publicUrl would be."""
    return (
        stack.public_cdn_url.rstrip("/") + "/" + "/".join(quote(s, safe="") for s in asset["key"].split("/"))
    )


def signed(tenant, asset: dict[str, Any]) -> str:
    response = tenant.api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": 600})
    assert response.status_code == 200, response.text
    return response.json()["url"]  # type: ignore[no-any-return]


def patch(tenant, asset_id: str, **body: Any) -> httpx.Response:
    return tenant.api.patch(f"/api/assets/{asset_id}", json=body)  # type: ignore[no-any-return]


def cdn_status_within(url: str, status: int, seconds: float = SWITCH_SECONDS) -> float:
    """Poll the CDN until ``url`` answers ``status``; how long it took (fails past ``seconds``)."""
    started = time.monotonic()
    while True:
        answer = httpx.get(url, verify=TLS).status_code
        elapsed = time.monotonic() - started
        if answer == status:
            return elapsed
        assert elapsed < seconds, f"{url} still answers {answer} after {elapsed:.1f} s"
        time.sleep(0.05)


def assert_like_a_missing_key(stack, asset: dict[str, Any]) -> None:
    hidden = httpx.get(bare_url(stack, asset), verify=TLS)
    missing = httpx.get(
        bare_url(stack, {**asset, "key": f"{asset['organizationId']}/{new_id('ast')}/x.txt"}), verify=TLS
    )
    assert_error(hidden, 404, "not_found")
    assert hidden.json()["error"]["message"] == missing.json()["error"]["message"]
    assert httpx.head(bare_url(stack, asset), verify=TLS).status_code == 404


def test_a_private_upload(stack, tenant) -> None:
    asset = upload(tenant, visibility="private")
    assert (asset["visibility"], asset["publicUrl"]) == ("private", None)
    assert tenant.api.get(f"/api/assets/{asset['id']}").json() == asset
    assert_like_a_missing_key(stack, asset)
    url = signed(tenant, asset)
    response = httpx.get(url, verify=TLS)
    assert (response.status_code, response.content) == (200, DATA)
    assert "public" not in response.headers["cache-control"]
    assert_error(httpx.get(url.split("?", 1)[0], verify=TLS), 404, "not_found")  # the query stripped
    public = upload(tenant, name="open.txt", visibility="public")
    assert public["visibility"] == "public"
    assert public["publicUrl"] == bare_url(stack, public)
    assert httpx.get(public["publicUrl"], verify=TLS).content == DATA
    assert httpx.get(signed(tenant, public), verify=TLS).status_code == 200  # signed URLs work for both
    assert upload(tenant, name="default.txt")["visibility"] == "public"
    assert upload(tenant, name="empty.txt", visibility="")["visibility"] == "public"  # as if absent


def test_switching_takes_effect_at_the_cdn_within_5_seconds_both_ways(tenant) -> None:
    asset = upload(tenant)
    url = asset["publicUrl"]
    assert httpx.get(url, verify=TLS).status_code == 200
    made_private = patch(tenant, asset["id"], visibility="private")
    assert made_private.status_code == 200, made_private.text
    body = made_private.json()
    assert (body["visibility"], body["publicUrl"], body["key"]) == ("private", None, asset["key"])
    cdn_status_within(url, 404)
    assert httpx.get(signed(tenant, asset), verify=TLS).status_code == 200
    made_public = patch(tenant, asset["id"], visibility="public")
    assert made_public.status_code == 200, made_public.text
    assert made_public.json()["publicUrl"] == url
    cdn_status_within(url, 200)
    # Along with a rename; and again (idempotent).
    both = patch(tenant, asset["id"], visibility="private", name="renamed.txt")
    assert (both.json()["name"], both.json()["visibility"]) == ("renamed.txt", "private")
    assert patch(tenant, asset["id"], visibility="private").status_code == 200
    cdn_status_within(url, 404)


def test_refusals(tenant, new_tenant) -> None:
    asset = upload(tenant)
    for bad in ({"visibility": "secret"}, {"visibility": None}, {"visibility": 1}, {}):
        assert_error(patch(tenant, asset["id"], **bad), 400, "invalid_request")
    assert_error(patch(tenant, new_id("ast"), visibility="private"), 404, "not_found")
    other = new_tenant("Other")
    assert_error(patch(other, asset["id"], visibility="private"), 403, "forbidden")
    # A change refused as a whole (a bad name) leaves the asset public at the CDN too.
    assert_error(patch(tenant, asset["id"], visibility="private", name="a/b"), 400, "invalid_request")
    assert_error(patch(tenant, asset["id"], visibility="private", folderId=new_id("fld")), 404, "not_found")
    assert tenant.api.get(f"/api/assets/{asset['id']}").json()["visibility"] == "public"
    assert httpx.get(asset["publicUrl"], verify=TLS).status_code == 200
    bad_form = tenant.api.post(
        "/api/assets", files={"file": ("x.txt", DATA, "text/plain")}, data={"visibility": "hidden"}
    )
    assert_error(bad_form, 400, "invalid_request")
    assert tenant.api.get("/api/assets").json()["total"] == 1  # nothing half-done
    assert_error(tenant.api.get("/api/assets", params={"visibility": "hidden"}), 400, "invalid_request")


def test_the_list_filter(tenant) -> None:
    private = [upload(tenant, name=f"p{i}.txt", visibility="private")["id"] for i in range(3)]
    public = [upload(tenant, name=f"o{i}.txt")["id"] for i in range(2)]
    listed = tenant.api.get("/api/assets", params={"visibility": "private", "limit": 2}).json()
    assert listed["total"] == 3
    assert [a["id"] for a in listed["assets"]] == private[::-1][:2]
    rest = tenant.api.get("/api/assets", params={"visibility": "private", "limit": 2, "offset": 2}).json()
    assert ([a["id"] for a in rest["assets"]], rest["total"]) == ([private[0]], 3)
    opened = tenant.api.get("/api/assets", params={"visibility": "public", "sort": "name"}).json()
    assert ([a["id"] for a in opened["assets"]], opened["total"]) == (public, 2)
    found = tenant.api.get("/api/assets", params={"visibility": "private", "q": "p1"}).json()
    assert [a["id"] for a in found["assets"]] == [private[1]]
    assert tenant.api.get("/api/assets").json()["total"] == 5


def test_the_organizations_default_and_upload_tokens(stack, admin, tenant) -> None:
    admin("set-default-visibility", "--org", tenant.org_id, "--visibility", "private")
    # edge caches the principal (1 s here, at most 5 s): poll.
    deadline = time.monotonic() + SWITCH_SECONDS
    while (asset := upload(tenant))["visibility"] != "private":
        assert time.monotonic() < deadline, "the default did not apply"
        time.sleep(0.1)
    assert asset["publicUrl"] is None
    assert_like_a_missing_key(stack, asset)
    assert upload(tenant, visibility="public")["visibility"] == "public"  # the upload says

    # A token's own visibility is fixed; without one, the organization's default applies.
    token = tenant.api.post("/api/upload-tokens", json={"visibility": "private"}).json()
    sent = httpx.post(
        token["url"],
        files={"file": ("t.txt", DATA, "text/plain")},
        data={"visibility": "public"},
        verify=TLS,
    )
    assert sent.status_code == 201, sent.text
    assert (sent.json()["visibility"], sent.json()["publicUrl"]) == ("private", None)
    assert_like_a_missing_key(stack, sent.json())
    plain = tenant.api.post("/api/upload-tokens", json={}).json()
    by_default = httpx.post(
        plain["url"], files={"file": ("d.txt", DATA)}, data={"visibility": "public"}, verify=TLS
    )
    assert by_default.json()["visibility"] == "private"
    opened = tenant.api.post("/api/upload-tokens", json={"visibility": "public"}).json()
    assert (
        httpx.post(opened["url"], files={"file": ("o.txt", DATA)}, verify=TLS).json()["visibility"]
        == "public"
    )
    assert_error(tenant.api.post("/api/upload-tokens", json={"visibility": "hidden"}), 400, "invalid_request")


def test_keys_of_members_and_owners_and_of_several_organizations(stack, admin, tenant, new_tenant) -> None:
    """Any key that acts in the organization may change a file's visibility (as it may rename
    or delete it): an owner's and a member's personal keys alike; acting in another
    organization, the same key is refused there (403) and changes nothing here."""
    asset = upload(tenant)
    other = new_tenant("Other")
    keys = {}
    for role in ("owner", "member"):
        user = admin(
            "create-user", "--email", f"{role}-{new_id('usr')[-8:]}@example.com", "--password", new_id("pw")
        )
        admin("add-member", "--org", tenant.org_id, "--user", user["id"], "--role", role)
        admin("add-member", "--org", other.org_id, "--user", user["id"], "--role", "member")
        keys[role] = admin("create-key", "--org", tenant.org_id, "--user", user["id"])["key"]
    for role, visibility in (("member", "private"), ("owner", "public"), ("member", "public")):
        headers = {"x-api-key": keys[role], "x-organization-id": tenant.org_id}
        with httpx.Client(base_url=stack.edge_url, headers=headers) as api:
            answer = api.patch(f"/api/assets/{asset['id']}", json={"visibility": visibility})
            assert (answer.status_code, answer.json()["visibility"]) == (200, visibility), role
        elsewhere = {"x-api-key": keys[role], "x-organization-id": other.org_id}
        with httpx.Client(base_url=stack.edge_url, headers=elsewhere) as api:
            refused = api.patch(f"/api/assets/{asset['id']}", json={"visibility": "private"})
            assert_error(refused, 403, "forbidden")
        without = httpx.patch(
            f"{stack.edge_url}/api/assets/{asset['id']}",
            json={"visibility": "private"},
            headers={"x-api-key": keys[role]},
            verify=TLS,
        )
        assert_error(without, 400, "organization_required")
    assert tenant.api.get(f"/api/assets/{asset['id']}").json()["visibility"] == "public"
    assert httpx.get(asset["publicUrl"], verify=TLS).status_code == 200
    assert_error(
        httpx.patch(f"{stack.edge_url}/api/assets/{asset['id']}", json={"visibility": "private"}, verify=TLS),
        401,
        "unauthorized",
    )
