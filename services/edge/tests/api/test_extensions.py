"""CONTRACT §8 through the public API, on both backends (the four real apps over real HTTP,
coffer_harness.inprocess): new fields, usage, folder paths, rename and move (a 40-way move
race included), search and sort, and upload tokens (single use under concurrency, scope,
quota, CORS). Rules one service enforces alone are tested against that service
(services/metadata/tests, services/auth/tests); that tokens never reach logs or spans needs
the processes (tests/e2e/test_observability.py)."""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from secrets import token_urlsafe
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from coffer_kit.contract.ids import new_id
from coffer_testkit.testing import TLS, assert_error, multipart_stream

KIB = 1024


def upload(api: httpx.Client, data: bytes, name: str = "f.bin", **fields: str) -> httpx.Response:
    return api.post("/api/assets", files={"file": (name, data, "application/octet-stream")}, data=fields)


def folder(api: httpx.Client, name: str, parent: str | None = None) -> dict[str, Any]:
    response = api.post("/api/folders", json={"name": name, "parentId": parent})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def mint(api: httpx.Client, **scope: Any) -> dict[str, Any]:
    response = api.post("/api/upload-tokens", json=scope)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def post_with_token(
    url: str, data: bytes, name: str = "t.bin", content_type: str = "application/octet-stream", **fields: str
) -> httpx.Response:
    return httpx.post(url, files={"file": (name, data, content_type)}, data=fields, timeout=60, verify=TLS)


def usage(api: httpx.Client) -> dict[str, Any]:
    response = api.get("/api/usage")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def live(api: httpx.Client) -> list[dict[str, Any]]:
    listed = api.get("/api/assets", params={"limit": 100}).json()
    assert listed["total"] <= 100
    return listed["assets"]  # type: ignore[no-any-return]


def test_assets_and_folders_carry_sha256_and_updated_at(tenant) -> None:
    data = b"coffer sha256 check"
    asset = upload(tenant.api, data).json()
    assert asset["sha256"] == hashlib.sha256(data).hexdigest()
    assert asset["updatedAt"] == asset["createdAt"]
    listed = tenant.api.get("/api/assets").json()["assets"][0]
    assert (listed["sha256"], listed["updatedAt"]) == (asset["sha256"], asset["updatedAt"])
    assert tenant.api.get(f"/api/assets/{asset['id']}").json() == listed
    made = folder(tenant.api, "dated")
    assert made["updatedAt"] == made["createdAt"]
    assert tenant.api.get("/api/folders").json()["folders"][0]["updatedAt"] == made["updatedAt"]


def test_usage_is_the_sum_of_live_sizes_after_uploads_deletes_and_failures(new_tenant) -> None:
    tenant = new_tenant(quota_bytes=64 * KIB)
    rng = random.Random(8)
    ids = []
    for _ in range(6):
        response = upload(tenant.api, b"u" * rng.randint(1, 12 * KIB))
        assert response.status_code == 201
        ids.append(response.json()["id"])
    assert tenant.api.delete(f"/api/assets/{ids.pop(2)}").status_code == 200
    assert_error(upload(tenant.api, b"q" * 64 * KIB), 413, "quota_exceeded")
    assert_error(upload(tenant.api, b"x", folderId=new_id("fld")), 404, "not_found")
    token = mint(tenant.api, maxBytes=10)
    assert_error(post_with_token(token["url"], b"y" * 11), 413, "file_too_large")
    assert post_with_token(token["url"], b"z" * 10).status_code == 201
    assert tenant.api.delete(f"/api/assets/{ids.pop(0)}").status_code == 200
    assets = live(tenant.api)
    assert usage(tenant.api) == {
        "organizationId": tenant.org_id,
        "usedBytes": sum(a["size"] for a in assets),
        "quotaBytes": 64 * KIB,
        "assetCount": len(assets),
        # (the trash's, issue 47: this organization keeps none)
        "trashedBytes": 0,
        "trashedCount": 0,
    }


def test_folder_path_rename_and_move(tenant, new_tenant) -> None:
    a = folder(tenant.api, "a")
    b = folder(tenant.api, "b", a["id"])
    c = folder(tenant.api, "c", b["id"])
    got = tenant.api.get(f"/api/folders/{c['id']}").json()
    assert got["path"] == [{"id": f["id"], "name": f["name"]} for f in (a, b, c)]
    assert_error(tenant.api.get(f"/api/folders/{new_id('fld')}"), 404, "not_found")
    other = new_tenant("Other")
    theirs = folder(other.api, "theirs")
    assert_error(tenant.api.get(f"/api/folders/{theirs['id']}"), 403, "forbidden")

    moved = tenant.api.patch(f"/api/folders/{c['id']}", json={"name": "c2", "parentId": None})
    assert moved.status_code == 200, moved.text
    assert (moved.json()["name"], moved.json()["parentId"]) == ("c2", None)
    assert tenant.api.get(f"/api/folders/{c['id']}").json()["path"] == [{"id": c["id"], "name": "c2"}]
    assert_error(tenant.api.patch(f"/api/folders/{a['id']}", json={"parentId": b["id"]}), 409, "folder_cycle")
    assert_error(tenant.api.patch(f"/api/folders/{a['id']}", json={"parentId": a["id"]}), 409, "folder_cycle")
    assert_error(tenant.api.patch(f"/api/folders/{c['id']}", json={"name": "a"}), 409, "conflict")
    assert_error(tenant.api.patch(f"/api/folders/{c['id']}", json={}), 400, "invalid_request")
    assert_error(tenant.api.patch(f"/api/folders/{c['id']}", json={"name": "x/y"}), 400, "invalid_request")
    form = tenant.api.patch(f"/api/folders/{c['id']}", data={"name": "form"})
    assert_error(form, 415, "unsupported_media_type")
    assert_error(tenant.api.patch(f"/api/folders/{new_id('fld')}", json={"name": "n"}), 404, "not_found")
    assert_error(
        tenant.api.patch(f"/api/folders/{c['id']}", json={"parentId": new_id("fld")}), 404, "not_found"
    )
    assert_error(
        tenant.api.patch(f"/api/folders/{c['id']}", json={"parentId": theirs["id"]}), 403, "forbidden"
    )
    assert_error(tenant.api.patch(f"/api/folders/{theirs['id']}", json={"name": "n"}), 403, "forbidden")
    # Nothing of that changed the tree.
    assert [f["name"] for f in tenant.api.get("/api/folders").json()["folders"]] == ["a", "c2"]


def test_a_40_way_race_of_folder_moves_leaves_a_tree(new_tenant) -> None:
    # The 200-way race is metadata's own test (services/metadata/tests/test_folder_moves.py);
    # this one runs a smaller race through edge and metadata's app, where SQLite's writers queue
    # on the app's write lock: 200 moves here took 25-37 s (a tenth of the in-process suite).
    tenant = new_tenant("Movers")
    ids = [folder(tenant.api, f"f{i}")["id"] for i in range(8)]
    rng = random.Random(200)
    pairs = [tuple(rng.sample(ids, 2)) for _ in range(20)]
    moves = [m for x, y in pairs for m in ((x, y), (y, x))]  # each pair both ways: cycles to refuse

    def move(i: int) -> int:
        folder_id, parent_id = moves[i]
        return tenant.api.patch(f"/api/folders/{folder_id}", json={"parentId": parent_id}).status_code

    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(move, range(len(moves))))
    assert len(statuses) == 40 and set(statuses) <= {200, 409}, statuses
    assert 200 in statuses and 409 in statuses
    # Every folder is reachable from the root exactly once (a cycle would cut some off), and
    # each one's path leads from a root folder down to it.
    seen: list[str] = []
    todo: list[str | None] = [None]
    while todo:
        parent = todo.pop()
        params = {"parentId": parent} if parent else {}
        children = tenant.api.get("/api/folders", params=params).json()["folders"]
        seen += [f["id"] for f in children]
        todo += [f["id"] for f in children]
    assert sorted(seen) == sorted(ids)
    for folder_id in ids:
        path = tenant.api.get(f"/api/folders/{folder_id}").json()["path"]
        assert path[-1]["id"] == folder_id and len({p["id"] for p in path}) == len(path)


def test_asset_rename_and_move_keep_key_and_urls(tenant, new_tenant) -> None:
    data = b"moving bytes"
    asset = upload(tenant.api, data, name="before.txt").json()
    signed = tenant.api.get(f"/api/assets/{asset['id']}/url").json()["url"]
    target = folder(tenant.api, "target")
    response = tenant.api.patch(
        f"/api/assets/{asset['id']}", json={"name": "after.txt", "folderId": target["id"]}
    )
    assert response.status_code == 200, response.text
    moved = response.json()
    assert (moved["name"], moved["folderId"]) == ("after.txt", target["id"])
    assert (moved["key"], moved["publicUrl"], moved["createdAt"]) == (
        asset["key"],
        asset["publicUrl"],
        asset["createdAt"],
    )
    assert moved["updatedAt"] >= asset["updatedAt"]
    assert httpx.get(moved["publicUrl"], verify=TLS).content == data
    assert httpx.get(signed, verify=TLS).content == data
    back = tenant.api.patch(f"/api/assets/{asset['id']}", json={"folderId": None}).json()
    assert (back["folderId"], back["name"], back["key"]) == (None, "after.txt", asset["key"])
    resigned = tenant.api.get(f"/api/assets/{asset['id']}/url").json()["url"]
    assert resigned.split("?")[0] == signed.split("?")[0]

    theirs = upload(new_tenant("Other").api, b"theirs").json()
    patch = tenant.api.patch
    assert_error(patch(f"/api/assets/{asset['id']}", json={}), 400, "invalid_request")
    assert_error(patch(f"/api/assets/{asset['id']}", json={"name": ".."}), 400, "invalid_request")
    assert_error(patch(f"/api/assets/{asset['id']}", json={"folderId": new_id("fld")}), 404, "not_found")
    assert_error(patch(f"/api/assets/{new_id('ast')}", json={"name": "n"}), 404, "not_found")
    assert_error(patch(f"/api/assets/{theirs['id']}", json={"name": "n"}), 403, "forbidden")
    assert_error(patch(f"/api/assets/{asset['id']}", content=b"name=x"), 415, "unsupported_media_type")


def test_search_and_sort(new_tenant) -> None:
    tenant = new_tenant("Search")
    names = ["Été 2026.JPG", "summer_été.png", "notes.txt", "100% done.txt", "ETE-plan.pdf", "a_b.txt"]
    made = [upload(tenant.api, b"s" * (i + 1) * 10, name=n).json() for i, n in enumerate(names)]
    by_id = {a["id"]: a for a in made}

    def search(**params: Any) -> dict[str, Any]:
        response = tenant.api.get("/api/assets", params=params)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    found = search(q="éTÉ")
    assert sorted(a["name"] for a in found["assets"]) == ["summer_été.png", "Été 2026.JPG"]
    assert found["total"] == 2
    assert [a["name"] for a in search(q="%")["assets"]] == ["100% done.txt"]  # literally
    assert [a["name"] for a in search(q="a_b")["assets"]] == ["a_b.txt"]
    assert search(q="nothing like it")["total"] == 0
    expected = {
        "-createdAt": sorted(made, key=lambda a: (a["createdAt"], a["id"]), reverse=True),
        "createdAt": sorted(made, key=lambda a: (a["createdAt"], a["id"])),
        "name": sorted(made, key=lambda a: (a["name"], a["id"])),
        "-name": sorted(made, key=lambda a: (a["name"], a["id"]), reverse=True),
        "size": sorted(made, key=lambda a: (a["size"], a["id"])),
        "-size": sorted(made, key=lambda a: (a["size"], a["id"]), reverse=True),
    }
    for sort, order in expected.items():
        pages = [search(sort=sort, limit=4, offset=o) for o in (0, 4)]
        assert [a["id"] for p in pages for a in p["assets"]] == [a["id"] for a in order], sort
        assert all(p["total"] == len(made) for p in pages)
    assert by_id[search(q=".txt", sort="-size", limit=1)["assets"][0]["id"]]["name"] == "a_b.txt"
    for bad in ({"sort": "size,name"}, {"sort": "-"}, {"q": ""}, {"q": "x" * 256}):
        assert_error(tenant.api.get("/api/assets", params=bad), 400, "invalid_request")


def test_upload_tokens(tenant, new_tenant, anon) -> None:
    target = folder(tenant.api, "inbox")
    token = mint(tenant.api, folderId=target["id"], name="fixed.png", contentTypes=["image/*"], maxBytes=1000)
    assert token["token"].startswith("cof_upl_") and token["expiresIn"] == 600
    assert token["url"].endswith(f"/api/uploads?token={token['token']}")

    # Preflight and CORS on every answer, errors included.
    preflight = anon.options(
        "/api/uploads", headers={"origin": "https://shop.example", "access-control-request-method": "POST"}
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    refused = post_with_token(token["url"], b"text", content_type="text/plain")
    assert_error(refused, 415, "unsupported_media_type")
    assert refused.headers["access-control-allow-origin"] == "*"
    assert_error(post_with_token(token["url"], b"p" * 1001, content_type="image/png"), 413, "file_too_large")

    # Failures did not spend it; the first success does.
    created = post_with_token(
        token["url"], b"png!", name="ignored.png", content_type="image/png", folderId="x"
    )
    assert created.status_code == 201, created.text
    assert created.headers["access-control-allow-origin"] == "*"
    asset = created.json()
    assert (asset["name"], asset["folderId"], asset["organizationId"]) == (
        "fixed.png",
        target["id"],
        tenant.org_id,
    )
    assert tenant.api.get(f"/api/assets/{asset['id']}").json() == asset
    assert_error(post_with_token(token["url"], b"again", content_type="image/png"), 401, "unauthorized")
    tampered = token["url"][:-3] + ("aaa" if not token["url"].endswith("aaa") else "bbb")
    assert_error(post_with_token(tampered, b"x"), 401, "unauthorized")
    assert_error(anon.post("/api/uploads", files={"file": ("f", b"x")}), 401, "unauthorized")

    short = mint(tenant.api, expiresIn=1)
    expires = datetime.fromisoformat(short["expiresAt"].replace("Z", "+00:00")).timestamp()
    while time.time() <= expires + 0.01:  # the clock decides, nothing else to poll
        time.sleep(0.05)
    assert_error(post_with_token(short["url"], b"late"), 401, "unauthorized")

    post = tenant.api.post
    assert_error(post("/api/upload-tokens", json={"folderId": new_id("fld")}), 404, "not_found")
    theirs = folder(new_tenant("Other").api, "theirs")
    assert_error(post("/api/upload-tokens", json={"folderId": theirs["id"]}), 403, "forbidden")
    for bad in (
        {"maxBytes": 0},
        {"maxBytes": 104_857_601},
        {"expiresIn": 86_401},
        {"expiresIn": "60"},
        {"contentTypes": ["image"]},
        {"contentTypes": []},
        {"name": "a/b"},
    ):
        assert_error(post("/api/upload-tokens", json=bad), 400, "invalid_request")
    assert_error(post("/api/upload-tokens", content=b"{}"), 415, "unsupported_media_type")
    assert_error(
        httpx.post(tenant.api.base_url.join("/api/upload-tokens"), json={}, verify=TLS), 401, "unauthorized"
    )


def test_ten_concurrent_uploads_with_one_token_make_one_asset(new_tenant) -> None:
    tenant = new_tenant("Racers")
    token = mint(tenant.api)
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda i: post_with_token(token["url"], b"r" * 4096 * (i + 1)), range(10)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201] + [401] * 9, [a.text for a in answers if a.status_code not in (201, 401)]
    assert len(live(tenant.api)) == 1
    assert usage(tenant.api)["assetCount"] == 1


def test_a_token_holds_one_upload_at_a_time_and_no_more_of_the_quota(new_tenant, stack) -> None:
    """One token opened 11 uploads at once, each reserving its maxBytes (a chunked body has no
    length), and held the organization's quota until they ended. The token is now taken as its
    upload starts: the others are 401 before they reserve a byte, and the organization's own
    uploads fit beside the one reservation."""
    tenant = new_tenant("Squat", quota_bytes=1024 * KIB)
    token = mint(tenant.api, maxBytes=600 * KIB)
    go_on = threading.Event()
    content_type, rest = multipart_stream(size=10)
    head = next(rest)

    def held_open() -> Iterator[bytes]:
        yield head
        go_on.wait(30)
        yield from rest

    engine = create_engine(stack.auth_database_url)
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(
                httpx.post,
                token["url"],
                content=held_open(),
                headers={"content-type": content_type},
                timeout=60,
                verify=TLS,
            )
            deadline = time.monotonic() + 10
            while not _claimed(engine, token["id"]):
                assert time.monotonic() < deadline and not first.done(), (
                    "the held upload never took the token"
                )
                time.sleep(0.02)
            for _ in range(11):
                assert_error(post_with_token(token["url"], b"s" * 10), 401, "unauthorized")
            # Beside the one upload's 600 KiB: 400 KiB of the organization's own.
            assert upload(tenant.api, b"k" * 400 * KIB).status_code == 201
            go_on.set()
            assert first.result().status_code == 201, first.result().text
    finally:
        go_on.set()
        engine.dispose()
    assert_error(post_with_token(token["url"], b"s" * 10), 401, "unauthorized")  # spent
    assert usage(tenant.api)["assetCount"] == 2


def _claimed(engine: Engine, token_id: str) -> bool:
    with engine.connect() as db:
        query = text("SELECT used_at FROM upload_tokens WHERE id = :id")
        return db.execute(query, {"id": token_id}).scalar_one() is not None


def test_a_token_upload_counts_against_the_quota_like_a_keyed_one(new_tenant) -> None:
    tenant = new_tenant(quota_bytes=100 * KIB)
    assert upload(tenant.api, b"k" * 60 * KIB).status_code == 201
    token = mint(tenant.api)
    keyed = assert_error(upload(tenant.api, b"k" * 50 * KIB), 413, "quota_exceeded")
    tokened = assert_error(post_with_token(token["url"], b"t" * 50 * KIB), 413, "quota_exceeded")
    assert (
        tokened["details"]
        == keyed["details"]
        == {
            "usedBytes": 60 * KIB,
            "quotaBytes": 100 * KIB,
            "requestedBytes": 50 * KIB,
        }
    )
    # Refused, so not spent: it stores a file that fits, exactly up to the quota.
    assert post_with_token(token["url"], b"t" * 40 * KIB).status_code == 201
    assert usage(tenant.api)["usedBytes"] == 100 * KIB == sum(a["size"] for a in live(tenant.api))


def test_an_upload_token_dies_with_its_key_or_its_minter(new_tenant, admin, stack) -> None:
    """Issue 23: a token outlived the key that minted it, and a member removed, by up to 24 h."""
    tenant = new_tenant("Minters")
    key = admin("create-key", "--org", tenant.org_id, "--name", "server")
    api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key["key"]}, timeout=60)
    token = mint(api, expiresIn=86_400)
    admin("delete-key", key["id"])
    assert_error(post_with_token(token["url"], b"late"), 401, "unauthorized")

    email = f"m{new_id('usr')[-6:].lower()}@example.com"
    user = admin("create-user", "--email", email, "--password", "pw-" + token_urlsafe(18))
    admin("add-member", "--org", tenant.org_id, "--user", user["id"])
    personal = admin("create-key", "--org", tenant.org_id, "--user", user["id"])
    api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": personal["key"]}, timeout=60)
    token = mint(api, expiresIn=86_400)
    admin("remove-member", "--org", tenant.org_id, "--user", user["id"])
    assert_error(post_with_token(token["url"], b"late"), 401, "unauthorized")
    assert live(tenant.api) == []


def test_an_upload_token_is_revoked_by_its_organization_only(tenant, new_tenant) -> None:
    token = mint(tenant.api)
    assert token["id"].startswith("upt_")
    other = new_tenant("Other")
    assert_error(other.api.delete(f"/api/upload-tokens/{token['id']}"), 404, "not_found")
    path = f"/api/upload-tokens/{token['id']}"
    assert_error(httpx.delete(tenant.api.base_url.join(path), verify=TLS), 401, "unauthorized")
    assert post_with_token(mint(tenant.api)["url"], b"still works").status_code == 201
    revoked = tenant.api.delete(f"/api/upload-tokens/{token['id']}")
    assert revoked.status_code == 200 and revoked.json() == {"success": True}
    assert_error(post_with_token(token["url"], b"too late"), 401, "unauthorized")
    assert_error(tenant.api.delete(f"/api/upload-tokens/{token['id']}"), 404, "not_found")
    assert_error(tenant.api.delete("/api/upload-tokens/not-an-id"), 400, "invalid_request")


def test_upload_token_numbers_are_json_integers(tenant) -> None:
    """An integral number written with a fraction is the integer JSON Schema says it is
    (schemathesis found 1949.0 refused); strings and fractions are still refused."""
    assert mint(tenant.api, maxBytes=1949.0, expiresIn=60.0)["expiresIn"] == 60
    for bad in ({"maxBytes": 1.5}, {"expiresIn": "60"}, {"maxBytes": True}):
        assert_error(tenant.api.post("/api/upload-tokens", json=bad), 400, "invalid_request")
