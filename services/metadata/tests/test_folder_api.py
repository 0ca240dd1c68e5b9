"""Folder reads and writes of §8 against the real metadata app: path, rename, move, cycles."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from coffer_kit.contract.ids import new_id
from coffer_metadata.folders import service as folders_service

pytestmark = pytest.mark.anyio


def base(org: str) -> str:
    return f"/internal/v1/orgs/{org}"


async def make_folder(api: httpx.AsyncClient, org: str, name: str, parent: str | None = None) -> Any:
    response = await api.post(f"{base(org)}/folders", json={"name": name, "parentId": parent})
    assert response.status_code == 201, response.text
    return response.json()


async def test_a_folder_has_its_path_from_the_root(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    a = await make_folder(api, org, "a")
    b = await make_folder(api, org, "b", a["id"])
    c = await make_folder(api, org, "c", b["id"])
    response = await api.get(f"{base(org)}/folders/{c['id']}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == c["id"] and body["parentId"] == b["id"]
    assert body["path"] == [{"id": f["id"], "name": f["name"]} for f in (a, b, c)]
    root = (await api.get(f"{base(org)}/folders/{a['id']}")).json()
    assert root["path"] == [{"id": a["id"], "name": "a"}]


async def test_folder_get_refuses_unknown_and_foreign(api: httpx.AsyncClient) -> None:
    org, other = new_id("org"), new_id("org")
    theirs = await make_folder(api, other, "x")
    assert (await api.get(f"{base(org)}/folders/{new_id('fld')}")).status_code == 404
    assert (await api.get(f"{base(org)}/folders/{theirs['id']}")).status_code == 403


async def patch(api: httpx.AsyncClient, org: str, folder_id: str, body: Any) -> httpx.Response:
    return await api.patch(f"{base(org)}/folders/{folder_id}", json=body)


async def test_rename_and_move_in_one_request(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    a = await make_folder(api, org, "a")
    b = await make_folder(api, org, "b")
    response = await patch(api, org, b["id"], {"name": "b2", "parentId": a["id"]})
    assert response.status_code == 200, response.text
    moved = response.json()
    assert (moved["name"], moved["parentId"], moved["createdAt"]) == ("b2", a["id"], b["createdAt"])
    assert moved["updatedAt"] >= b["updatedAt"]
    path = (await api.get(f"{base(org)}/folders/{b['id']}")).json()["path"]
    assert [p["name"] for p in path] == ["a", "b2"]
    # parentId null moves it back to the root; a rename alone keeps the parent.
    assert (await patch(api, org, b["id"], {"parentId": None})).json()["parentId"] is None
    renamed = (await patch(api, org, b["id"], {"name": "b3"})).json()
    assert (renamed["name"], renamed["parentId"]) == ("b3", None)


async def test_moving_into_itself_or_a_descendant_is_a_cycle(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    a = await make_folder(api, org, "a")
    b = await make_folder(api, org, "b", a["id"])
    c = await make_folder(api, org, "c", b["id"])
    for target in (a, b, c):
        response = await patch(api, org, a["id"], {"parentId": target["id"]})
        assert response.status_code == 409, response.text
        assert response.json()["error"]["code"] == "folder_cycle"
    # Nothing moved.
    assert (await api.get(f"{base(org)}/folders/{a['id']}")).json()["parentId"] is None


async def test_patch_refusals(api: httpx.AsyncClient) -> None:
    org, other = new_id("org"), new_id("org")
    a = await make_folder(api, org, "a")
    await make_folder(api, org, "taken")
    inner = await make_folder(api, org, "x", a["id"])
    await make_folder(api, org, "y", a["id"])
    theirs = await make_folder(api, other, "theirs")
    cases: list[tuple[str, Any, int, str]] = [
        (a["id"], {}, 400, "invalid_request"),
        (a["id"], {"unknown": 1}, 400, "invalid_request"),
        (a["id"], {"name": None}, 400, "invalid_request"),
        (a["id"], {"name": ""}, 400, "invalid_request"),
        (a["id"], {"name": "a/b"}, 400, "invalid_request"),
        (a["id"], {"name": ".."}, 400, "invalid_request"),
        (a["id"], {"name": "x" * 256}, 400, "invalid_request"),
        (a["id"], {"name": 5}, 400, "invalid_request"),
        (a["id"], {"parentId": 5}, 400, "invalid_request"),
        (a["id"], {"name": "taken"}, 409, "conflict"),
        (inner["id"], {"name": "y"}, 409, "conflict"),
        (inner["id"], {"parentId": None, "name": "taken"}, 409, "conflict"),
        (a["id"], {"parentId": new_id("fld")}, 404, "not_found"),
        (a["id"], {"parentId": theirs["id"]}, 403, "forbidden"),
        (new_id("fld"), {"name": "n"}, 404, "not_found"),
        (theirs["id"], {"name": "n"}, 403, "forbidden"),
    ]
    for folder_id, body, status, code in cases:
        response = await patch(api, org, folder_id, body)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), (
            body,
            response.text,
        )
    # Renaming to its own name is no conflict.
    assert (await patch(api, org, a["id"], {"name": "a"})).status_code == 200
    response = await api.patch(
        f"{base(org)}/folders/{a['id']}", content=b"{", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400


async def test_a_folder_holds_a_bounded_number_of_folders(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parent's children are listed all at once: 100,000 root folders made one listing 43 MB
    and 10 s. Creating or moving a folder into a parent that holds the most is 409."""
    org = new_id("org")
    monkeypatch.setattr(folders_service, "MAX_FOLDER_CHILDREN", 3)
    full = await make_folder(api, org, "full")
    for name in ("a", "b", "c"):
        await make_folder(api, org, name, full["id"])
    over = await api.post(f"{base(org)}/folders", json={"name": "d", "parentId": full["id"]})
    assert over.status_code == 409 and "the most one folder may hold" in over.json()["error"]["message"]
    loose = await make_folder(api, org, "loose")
    moved = await api.patch(f"{base(org)}/folders/{loose['id']}", json={"parentId": full["id"]})
    assert moved.status_code == 409
    renamed = await api.patch(f"{base(org)}/folders/{loose['id']}", json={"name": "still loose"})
    assert renamed.status_code == 200  # no move: nothing to make room for
    listed = await api.get(f"{base(org)}/folders", params={"parentId": full["id"]})
    assert [f["name"] for f in listed.json()["folders"]] == ["a", "b", "c"]
