"""Authentication (docs/contract.md §2): every rule, through edge and auth in process."""

from __future__ import annotations

import time
from datetime import datetime

import httpx
import pytest

from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_testkit.testing import TLS, assert_error


def folders(api: httpx.Client, **headers: str) -> httpx.Response:
    return api.get("/api/folders", headers=headers)


def test_organization_key_lists_its_folders(tenant) -> None:
    response = folders(tenant.api)
    assert response.status_code == 200
    assert response.json() == {"folders": []}


@pytest.mark.parametrize("value", [None, ""])
def test_missing_or_empty_key_is_401(anon, value) -> None:
    headers = {} if value is None else {"x-api-key": value}
    assert_error(anon.get("/api/folders", headers=headers), 401, "unauthorized")
    assert_error(anon.post("/api/folders", json={"name": "x"}, headers=headers), 401, "unauthorized")
    assert_error(anon.delete("/api/folders/fld_x", headers=headers), 401, "unauthorized")


def test_unknown_key_is_401(anon) -> None:
    response = anon.get("/api/folders", headers={"x-api-key": "cof_org_" + "x" * 32})
    assert_error(response, 401, "unauthorized")


def test_organization_key_with_organization_header(tenant, new_tenant) -> None:
    other = new_tenant("Other")
    assert folders(tenant.api, **{"x-organization-id": tenant.org_id}).status_code == 200
    assert_error(folders(tenant.api, **{"x-organization-id": other.org_id}), 403, "forbidden")
    assert_error(folders(tenant.api, **{"x-organization-id": "org_unknown"}), 403, "forbidden")


def test_an_organization_header_that_is_no_organization_id_is_refused_before_auth(tenant, anon) -> None:
    """60,000 Latin-1 characters (a head under edge's 64 KiB) became 120 KB of UTF-8 in the
    call to auth, which answered 431, relayed: refused as any unknown organization is (403),
    the key still checked first (401)."""
    latin = b"\xe9" * 60_000
    for value in (latin, b"org_" + b"A" * 27, b"fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"):
        response = tenant.api.get("/api/folders", headers={"x-organization-id": value})
        error = assert_error(response, 403, "forbidden")
        assert "x-organization-id" in error["message"]
    unknown_key = {"x-api-key": "cof_org_" + "x" * 32, "x-organization-id": latin}
    assert_error(anon.get("/api/folders", headers=unknown_key), 401, "unauthorized")
    assert_error(anon.get("/api/folders", headers={"x-organization-id": latin}), 401, "unauthorized")


def _user_key(admin, stack, *orgs: str):
    user = admin(
        "create-user", "--email", f"u{time.monotonic_ns()}@example.com", "--password", "correct horse"
    )
    for org in orgs:
        admin("add-member", "--org", org, "--user", user["id"])
    key = admin("create-key", "--org", orgs[0], "--user", user["id"], "--name", "mine")
    assert key["kind"] == "user" and key["key"].startswith("cof_usr_")
    return user, httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key["key"]}, timeout=30)


def test_user_key_with_one_organization(stack, admin, new_tenant) -> None:
    mine, other = new_tenant("Mine"), new_tenant("Other")
    mine.api.post("/api/folders", json={"name": "only-in-mine"})
    _, api = _user_key(admin, stack, mine.org_id)
    with api:
        response = folders(api)
        assert response.status_code == 200
        assert [f["name"] for f in response.json()["folders"]] == ["only-in-mine"]
        assert folders(api, **{"x-organization-id": mine.org_id}).status_code == 200
        assert_error(folders(api, **{"x-organization-id": other.org_id}), 403, "forbidden")


def test_user_key_with_several_organizations(stack, admin, new_tenant) -> None:
    a, b = new_tenant("A"), new_tenant("B")
    a.api.post("/api/folders", json={"name": "in-a"})
    b.api.post("/api/folders", json={"name": "in-b"})
    _, api = _user_key(admin, stack, a.org_id, b.org_id)
    with api:
        assert_error(folders(api), 400, "organization_required")
        in_a = folders(api, **{"x-organization-id": a.org_id}).json()["folders"]
        in_b = folders(api, **{"x-organization-id": b.org_id}).json()["folders"]
        assert [f["name"] for f in in_a] == ["in-a"]
        assert [f["name"] for f in in_b] == ["in-b"]
        created = api.post("/api/folders", json={"name": "new"}, headers={"x-organization-id": b.org_id})
        assert created.status_code == 201 and created.json()["organizationId"] == b.org_id


def test_user_key_whose_user_left_every_organization(stack, admin, new_tenant) -> None:
    org = new_tenant("Left")
    user, api = _user_key(admin, stack, org.org_id)
    with api:
        admin("remove-member", "--org", org.org_id, "--user", user["id"])
        # The edge cache may hold the previous answer for up to 5 s.
        left_at = time.monotonic()
        while folders(api).status_code == 200:
            assert time.monotonic() - left_at < 5.5, "a former member still served after 5 s"
            time.sleep(0.1)
        assert_error(folders(api), 403, "forbidden")


def test_a_removed_members_upload_tokens_do_not_come_back_with_them(stack, admin, new_tenant) -> None:
    """A token minted with a member's personal key stopped when they were removed, and worked
    again when they were added back: removal now deletes the tokens they minted there."""
    org = new_tenant("Rejoin")
    user, api = _user_key(admin, stack, org.org_id)
    with api:
        url = api.post("/api/upload-tokens", json={}).json()["url"]
    admin("remove-member", "--org", org.org_id, "--user", user["id"])
    admin("add-member", "--org", org.org_id, "--user", user["id"])
    deadline = time.monotonic() + 5.5  # (edge's cache bound)
    while (answer := httpx.post(url, files={"file": ("a.txt", b"a")})).status_code != 401:
        assert answer.status_code != 201, "a token outlived its member's removal"
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.1)
    assert org.api.get("/api/assets").json()["total"] == 0


def test_expired_key_is_refused_and_never_served_from_cache(stack, admin, tenant) -> None:
    key = admin("create-key", "--org", tenant.org_id, "--expires-in", "2")
    assert key["expiresAt"] is not None
    expires_at = datetime.fromisoformat(key["expiresAt"].replace("Z", "+00:00")).timestamp()
    with httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key["key"]}) as api:
        assert folders(api).status_code == 200  # cached, but only until the key expires
        while True:
            sent = time.time()
            if folders(api).status_code != 200:
                break
            # Served from the cache or not, never once the key has expired.
            assert sent < expires_at, "an expired key was accepted"
            time.sleep(0.05)
        error = assert_error(folders(api), 401, "unauthorized")
        assert "expired" in error["message"]


def test_key_format_and_listing(admin, tenant) -> None:
    assert tenant.key.startswith("cof_org_") and len(tenant.key) >= len("cof_org_") + 22
    listed = admin("list-keys", "--org", tenant.org_id)["keys"]
    assert [k["id"] for k in listed] == [tenant.key_id]
    assert tenant.key not in str(listed)  # only a display prefix is ever shown again
    assert listed[0]["prefix"] == tenant.key[:12]


def test_internal_endpoints_need_the_internal_token(stack) -> None:
    key_hash = "0" * 64
    for service, path in (
        ("auth", "/internal/v1/principal"),
        ("metadata", "/internal/v1/orgs/org_x/folders"),
    ):
        response = httpx.get(stack.url(service) + path, headers={"x-key-hash": key_hash}, verify=TLS)
        assert_error(response, 401, "unauthorized")
        wrong = httpx.get(
            stack.url(service) + path,
            headers={INTERNAL_TOKEN_HEADER: "wrong", "x-key-hash": key_hash},
            verify=TLS,
        )
        assert_error(wrong, 401, "unauthorized")


def test_request_id_is_echoed_or_generated(tenant) -> None:
    echoed = tenant.api.get("/api/folders", headers={"x-request-id": "my-trace-123"})
    assert echoed.headers["x-request-id"] == "my-trace-123"
    generated = tenant.api.get("/api/folders")
    assert generated.headers["x-request-id"].startswith("req_")
