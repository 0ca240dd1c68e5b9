"""Folder rules (docs/contract.md §4–5), through edge and metadata in process."""

from __future__ import annotations

import unicodedata

import pytest

from coffer_testkit.testing import assert_error

ISO_MS_Z = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"


def create(api, name, parent_id=None, **extra):
    body = {"name": name, **extra}
    if parent_id is not None:
        body["parentId"] = parent_id
    return api.post("/api/folders", json=body)


def test_create_returns_the_folder(tenant) -> None:
    response = create(tenant.api, "Photos")
    assert response.status_code == 201
    folder = response.json()
    assert set(folder) >= {"id", "organizationId", "parentId", "name", "createdAt"}
    assert folder["id"].startswith("fld_")
    assert folder["organizationId"] == tenant.org_id
    assert folder["parentId"] is None
    assert folder["name"] == "Photos"
    import re

    assert re.match(ISO_MS_Z, folder["createdAt"])


def test_nested_folders_and_listing_by_parent(tenant) -> None:
    root = create(tenant.api, "root").json()
    child = create(tenant.api, "child", root["id"]).json()
    assert child["parentId"] == root["id"]
    assert create(tenant.api, "grandchild", child["id"]).status_code == 201
    top = tenant.api.get("/api/folders").json()["folders"]
    assert [f["name"] for f in top] == ["root"]
    under_root = tenant.api.get("/api/folders", params={"parentId": root["id"]}).json()["folders"]
    assert [f["id"] for f in under_root] == [child["id"]]


def test_explicit_null_parent_is_root(tenant) -> None:
    response = tenant.api.post("/api/folders", json={"name": "top", "parentId": None})
    assert response.status_code == 201 and response.json()["parentId"] is None


def test_listing_is_ordered_by_name_then_id(tenant) -> None:
    parent = create(tenant.api, "p").json()["id"]
    for name in ["b", "C", "a", "ä", "a2"]:
        assert create(tenant.api, name, parent).status_code == 201
    names = [f["name"] for f in tenant.api.get("/api/folders", params={"parentId": parent}).json()["folders"]]
    assert names == sorted(names)  # binary (code point) order: "C" < "a" < "a2" < "b" < "ä"


def test_duplicate_sibling_name_is_409(tenant, new_tenant) -> None:
    parent = create(tenant.api, "docs").json()["id"]
    assert create(tenant.api, "same", parent).status_code == 201
    assert_error(create(tenant.api, "same", parent), 409, "conflict")
    assert_error(create(tenant.api, "docs"), 409, "conflict")  # root siblings too
    # Same name elsewhere is fine: another parent, root, another organization.
    assert create(tenant.api, "same").status_code == 201
    other_parent = create(tenant.api, "other").json()["id"]
    assert create(tenant.api, "same", other_parent).status_code == 201
    assert create(new_tenant("Else").api, "docs").status_code == 201


def test_names_are_nfc_normalised(tenant) -> None:
    decomposed = unicodedata.normalize("NFD", "café")
    response = create(tenant.api, decomposed)
    assert response.status_code == 201
    assert response.json()["name"] == unicodedata.normalize("NFC", "café")
    assert_error(create(tenant.api, "café"), 409, "conflict")


@pytest.mark.parametrize(
    "name", ["", "x" * 256, "a/b", ".", "..", "tab\there", "nul\x00", "del\x7f", "line\nbreak"]
)
def test_bad_names_are_400(tenant, name) -> None:
    error = assert_error(create(tenant.api, name), 400, "invalid_request")
    assert error["details"]["field"] == "name"


def test_longest_name_and_unicode_are_accepted(tenant) -> None:
    assert create(tenant.api, "x" * 255).status_code == 201
    assert create(tenant.api, "写真 📷 .hidden...").status_code == 201


@pytest.mark.parametrize(
    "body", [{}, {"name": 5}, {"name": None}, {"name": ["a"]}, {"name": "ok", "parentId": 7}, [], "text"]
)
def test_mistyped_bodies_are_400(tenant, body) -> None:
    assert_error(tenant.api.post("/api/folders", json=body), 400, "invalid_request")


def test_malformed_json_is_400(tenant) -> None:
    response = tenant.api.post(
        "/api/folders", content=b'{"name": ', headers={"content-type": "application/json"}
    )
    assert_error(response, 400, "invalid_request")


def test_non_json_body_is_415(tenant) -> None:
    response = tenant.api.post("/api/folders", data={"name": "form"})
    assert_error(response, 415, "unsupported_media_type")
    response = tenant.api.post(
        "/api/folders", content=b'{"name":"x"}', headers={"content-type": "text/plain"}
    )
    assert_error(response, 415, "unsupported_media_type")
    assert tenant.api.get("/api/folders").json() == {"folders": []}


def test_unknown_fields_and_query_parameters_are_ignored(tenant) -> None:
    assert create(tenant.api, "extra", color="red").status_code == 201
    assert tenant.api.get("/api/folders", params={"sort": "nope"}).status_code == 200


def test_unknown_parent_is_404(tenant) -> None:
    assert_error(create(tenant.api, "orphan", "fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"), 404, "not_found")
    listed = tenant.api.get("/api/folders", params={"parentId": "fld_nope"})
    assert_error(listed, 404, "not_found")


def test_other_organizations_folders_are_403(tenant, new_tenant) -> None:
    theirs = create(new_tenant("Them").api, "private").json()["id"]
    assert_error(tenant.api.get("/api/folders", params={"parentId": theirs}), 403, "forbidden")
    assert_error(create(tenant.api, "intruder", theirs), 403, "forbidden")
    assert_error(tenant.api.delete(f"/api/folders/{theirs}"), 403, "forbidden")


def test_delete_is_recursive(tenant) -> None:
    a = create(tenant.api, "a").json()["id"]
    b = create(tenant.api, "b", a).json()["id"]
    c = create(tenant.api, "c", b).json()["id"]
    keep = create(tenant.api, "keep").json()["id"]
    response = tenant.api.delete(f"/api/folders/{a}")
    assert response.status_code == 200 and response.json() == {"success": True}
    assert [f["id"] for f in tenant.api.get("/api/folders").json()["folders"]] == [keep]
    for gone in (a, b, c):
        assert_error(tenant.api.get("/api/folders", params={"parentId": gone}), 404, "not_found")
        assert_error(tenant.api.delete(f"/api/folders/{gone}"), 404, "not_found")
    # The name is free again.
    assert create(tenant.api, "a").status_code == 201


def test_delete_of_a_subfolder_keeps_its_parent(tenant) -> None:
    a = create(tenant.api, "a").json()["id"]
    b = create(tenant.api, "b", a).json()["id"]
    assert tenant.api.delete(f"/api/folders/{b}").status_code == 200
    assert tenant.api.get("/api/folders", params={"parentId": a}).json() == {"folders": []}


@pytest.mark.parametrize("folder_id", ["fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", "..%2F..%2Fprincipal", "x%2Fy"])
def test_delete_unknown_is_404(tenant, folder_id) -> None:
    assert_error(tenant.api.delete(f"/api/folders/{folder_id}"), 404, "not_found")
