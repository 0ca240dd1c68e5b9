"""Keys confined to a folder subtree (issue 46), in process on both databases: the folder is
the key's root, and nothing outside it exists for the key."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import pytest

from coffer_edge.clients.metadata import MetadataClient
from coffer_kit.contract.errors import CofferError
from coffer_testkit.testing import assert_error


@pytest.fixture
def tree(stack: Any, tenant: Any) -> Any:
    """/public (with /public/avatars) and /private, an asset in each, and a key confined to
    /public (full actions): ``(full api, subtree api, ids)``."""
    api = tenant.api

    def folder(name: str, parent: str | None = None) -> str:
        made = api.post("/api/folders", json={"name": name, "parentId": parent})
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def asset(name: str, folder_id: str | None) -> str:
        data = {"folderId": folder_id} if folder_id else {}
        made = api.post("/api/assets", files={"file": (name, b"x")}, data=data)
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    public = folder("public")
    avatars = folder("avatars", public)
    private = folder("private")
    ids = {
        "public": public,
        "avatars": avatars,
        "private": private,
        "in_public": asset("logo.png", public),
        "in_avatars": asset("me.png", avatars),
        "in_private": asset("secret.txt", private),
        "at_root": asset("root.txt", None),
    }
    made = api.post("/api/keys", json={"name": "public", "folderId": public})
    assert made.status_code == 201, made.text
    assert made.json()["apiKey"]["folderId"] == public
    with httpx.Client(base_url=stack.edge_url, headers={"x-api-key": made.json()["key"]}, timeout=30) as sub:
        yield api, sub, ids


def test_listings_and_searches_show_only_the_subtree(tree: Any) -> None:
    _, sub, ids = tree
    assert [f["id"] for f in sub.get("/api/folders").json()["folders"]] == [ids["avatars"]]
    listed = sub.get("/api/assets").json()
    assert {a["id"] for a in listed["assets"]} == {ids["in_public"], ids["in_avatars"]}
    assert listed["total"] == 2
    assert [a["id"] for a in sub.get("/api/assets", params={"folderId": ""}).json()["assets"]] == [
        ids["in_public"]
    ]
    for q in ("secret", "root", ".txt"):
        assert sub.get("/api/assets", params={"q": q}).json() == {
            "assets": [],
            "total": 0,
            "limit": 50,
            "offset": 0,
            "nextCursor": None,
        }
    assert sub.get("/api/assets", params={"q": "me", "sort": "name"}).json()["total"] == 1
    own = sub.get(f"/api/folders/{ids['avatars']}").json()
    assert [step["id"] for step in own["path"]] == [ids["public"], ids["avatars"]]
    me = sub.get("/api/keys/self").json()
    assert me["folderId"] == ids["public"] and me["folderPath"] == "/public"
    assert me["description"] == "can do everything in /public"


def test_anything_outside_is_not_found(tree: Any) -> None:
    api, sub, ids = tree
    for asset in ("in_private", "at_root"):
        a = ids[asset]
        assert_error(sub.get(f"/api/assets/{a}"), 404, "not_found")
        assert_error(sub.get(f"/api/assets/{a}/url"), 404, "not_found")
        assert_error(sub.patch(f"/api/assets/{a}", json={"name": "n"}), 404, "not_found")
        assert_error(sub.delete(f"/api/assets/{a}"), 404, "not_found")
    p = ids["private"]
    assert_error(sub.get(f"/api/folders/{p}"), 404, "not_found")
    assert_error(sub.get("/api/folders", params={"parentId": p}), 404, "not_found")
    assert_error(sub.get("/api/assets", params={"folderId": p}), 404, "not_found")
    assert_error(sub.patch(f"/api/folders/{p}", json={"name": "n"}), 404, "not_found")
    assert_error(sub.delete(f"/api/folders/{p}"), 404, "not_found")
    assert_error(sub.post("/api/folders", json={"name": "n", "parentId": p}), 404, "not_found")
    assert_error(sub.post("/api/assets", files={"file": ("f", b"f")}, data={"folderId": p}), 404, "not_found")
    assert_error(sub.post("/api/upload-tokens", json={"folderId": p}), 404, "not_found")
    for folder in (p, None):  # a token of the organization's, outside the subtree: not revocable
        outside = api.post("/api/upload-tokens", json={"folderId": folder}).json()["id"]
        assert_error(sub.delete(f"/api/upload-tokens/{outside}"), 404, "not_found")
    inside = api.post("/api/upload-tokens", json={"folderId": ids["avatars"]}).json()["id"]
    assert sub.delete(f"/api/upload-tokens/{inside}").json() == {"success": True}
    # Moving something of the subtree out of it: 404, nothing moved.
    assert_error(sub.patch(f"/api/assets/{ids['in_public']}", json={"folderId": p}), 404, "not_found")
    assert_error(sub.patch(f"/api/folders/{ids['avatars']}", json={"parentId": p}), 404, "not_found")
    tus = sub.post(
        "/api/uploads/tus",
        headers={
            "Tus-Resumable": "1.0.0",
            "Upload-Length": "1",
            "Upload-Metadata": "filename "
            + base64.b64encode(b"f").decode()
            + ",folderId "
            + base64.b64encode(p.encode()).decode(),
        },
    )
    assert_error(tus, 404, "not_found")


def test_the_root_is_the_keys_folder(tree: Any) -> None:
    api, sub, ids = tree
    made = sub.post("/api/folders", json={"name": "docs"}).json()
    assert made["parentId"] == ids["public"]
    uploaded = sub.post("/api/assets", files={"file": ("new.txt", b"n")}).json()
    assert uploaded["folderId"] == ids["public"]
    moved = sub.patch(f"/api/assets/{ids['in_avatars']}", json={"folderId": None}).json()
    assert moved["folderId"] == ids["public"]
    assert (
        sub.patch(f"/api/folders/{made['id']}", json={"parentId": None}).json()["parentId"] == ids["public"]
    )
    token = sub.post("/api/upload-tokens", json={}).json()
    stored = httpx.post(token["url"], files={"file": ("t.txt", b"t")})
    assert stored.status_code == 201 and stored.json()["folderId"] == ids["public"]
    # Its root can be read, not renamed, moved or deleted.
    assert sub.get(f"/api/folders/{ids['public']}").json()["path"] == [
        {"id": ids["public"], "name": "public"}
    ]
    for call in (
        lambda: sub.patch(f"/api/folders/{ids['public']}", json={"name": "x"}),
        lambda: sub.patch(f"/api/folders/{ids['public']}", json={"parentId": None}),
        lambda: sub.delete(f"/api/folders/{ids['public']}"),
        lambda: sub.patch(f"/api/folders/{ids['public']}", json={"expiryDays": 3}),
    ):
        assert_error(call(), 403, "forbidden")
    # A folder deleted inside leaves its assets in the key's root, never outside it.
    assert sub.delete(f"/api/folders/{ids['avatars']}").json() == {"success": True}
    assert api.get(f"/api/assets/{ids['in_avatars']}").json()["folderId"] == ids["public"]


def test_a_subtree_key_mints_only_within_its_subtree(tree: Any) -> None:
    _, sub, ids = tree
    inherited = sub.post("/api/keys", json={"scopes": ["read-only"]})
    assert inherited.status_code == 201 and inherited.json()["apiKey"]["folderId"] == ids["public"]
    deeper = sub.post("/api/keys", json={"folderId": ids["avatars"]})
    assert deeper.status_code == 201 and deeper.json()["apiKey"]["folderId"] == ids["avatars"]
    assert_error(sub.post("/api/keys", json={"folderId": ids["private"]}), 404, "not_found")
    # It sees only the keys of its subtree: not the organization's full key.
    listed = {k["folderId"] for k in sub.get("/api/keys").json()["keys"]}
    assert listed <= {ids["public"], ids["avatars"]}


def test_a_subtree_keys_webhooks_hear_its_subtree(tree: Any) -> None:
    api, sub, ids = tree
    hook = {"url": "https://93.184.215.34/hook", "events": ["asset.created"]}
    made = sub.post("/api/webhooks", json=hook)
    assert made.status_code == 201, made.text
    assert made.json()["folderId"] == ids["public"]
    assert_error(sub.post("/api/webhooks", json={**hook, "folderId": ids["private"]}), 404, "not_found")
    assert_error(
        sub.patch(f"/api/webhooks/{made.json()['id']}", json={"folderId": ids["private"]}), 404, "not_found"
    )
    org_wide = api.post("/api/webhooks", json=hook).json()["id"]
    assert_error(sub.get(f"/api/webhooks/{org_wide}"), 404, "not_found")
    assert_error(sub.delete(f"/api/webhooks/{org_wide}"), 404, "not_found")
    assert [w["id"] for w in sub.get("/api/webhooks").json()["webhooks"]] == [made.json()["id"]]


def test_an_upload_outside_is_not_found_even_between_its_chunks(tree: Any) -> None:
    """The full key's upload into /private, its lease kept on this edge between two chunks:
    the subtree key can neither append to it nor end it, as if it did not exist."""
    api, sub, ids = tree
    tus = {"Tus-Resumable": "1.0.0"}
    chunk = {**tus, "Content-Type": "application/offset+octet-stream"}
    name = base64.b64encode(b"big.bin").decode()
    folder = base64.b64encode(ids["private"].encode()).decode()
    made = api.post(
        "/api/uploads/tus",
        headers={**tus, "Upload-Length": "4", "Upload-Metadata": f"filename {name},folderId {folder}"},
    )
    assert made.status_code == 201, made.text
    location = made.headers["location"]
    first = api.patch(location, content=b"ab", headers={**chunk, "Upload-Offset": "0"})
    assert first.status_code == 204, first.text  # this edge keeps its lease for the next chunk
    assert_error(
        sub.patch(location, content=b"cd", headers={**chunk, "Upload-Offset": "2"}), 404, "not_found"
    )
    assert_error(sub.delete(location, headers=tus), 404, "not_found")
    assert sub.head(location, headers=tus).status_code == 404
    upload_id = location.rsplit("/", 1)[1]
    assert_error(sub.delete(f"/api/uploads/{upload_id}"), 404, "not_found")
    assert upload_id not in sub.get("/api/uploads").text
    last = api.patch(location, content=b"cd", headers={**chunk, "Upload-Offset": "2"})
    assert last.status_code == 204, last.text


def test_nothing_above_a_nested_keys_root_shows(tree: Any) -> None:
    """A key confined to /public/avatars: its root's path and its recursive listings' folder
    paths start at avatars, and its root has no parent (public does not exist for it)."""
    api, _, ids = tree
    made = api.post("/api/keys", json={"name": "avatars", "folderId": ids["avatars"]}).json()
    deep = {"x-api-key": made["key"]}
    root = api.get(f"/api/folders/{ids['avatars']}", headers=deep).json()
    assert root["path"] == [{"id": ids["avatars"], "name": "avatars"}] and root["parentId"] is None
    nested = api.post("/api/folders", headers=deep, json={"name": "2026"}).json()["id"]
    inner = api.post("/api/assets", headers=deep, files={"file": ("x.png", b"x")}, data={"folderId": nested})
    paths = {
        ids["in_avatars"]: [{"id": ids["avatars"], "name": "avatars"}],
        inner.json()["id"]: [{"id": ids["avatars"], "name": "avatars"}, {"id": nested, "name": "2026"}],
    }
    for params in ({"recursive": "true"}, {"recursive": "true", "total": "false"}):
        listed = api.get("/api/assets", headers=deep, params=params).json()["assets"]
        assert {a["id"]: a["folderPath"] for a in listed} == paths, params
    # The organization's key still sees the whole chain.
    full = api.get("/api/assets", params={"recursive": "true", "folderId": nested}).json()["assets"]
    assert [step["name"] for step in full[0]["folderPath"]] == ["public", "avatars", "2026"]


def test_another_organizations_asset_is_not_found_by_a_subtree_key(tree: Any, new_tenant: Any) -> None:
    """For a subtree key every asset outside its subtree is unknown, another organization's
    too (an organization-wide key is told it is another's: 403)."""
    api, sub, _ = tree
    assert api.put("/api/trash/settings", json={"retentionDays": 7}).status_code == 200
    theirs = new_tenant("Other").api.post("/api/assets", files={"file": ("o.txt", b"o")}).json()["id"]
    assert_error(api.get(f"/api/assets/{theirs}"), 403, "forbidden")
    for call in (
        lambda: sub.get(f"/api/assets/{theirs}"),
        lambda: sub.get(f"/api/assets/{theirs}/url"),
        lambda: sub.patch(f"/api/assets/{theirs}", json={"visibility": "private"}),
        lambda: sub.patch(f"/api/assets/{theirs}", json={"name": "mine.txt"}),
        lambda: sub.delete(f"/api/assets/{theirs}"),
    ):
        assert_error(call(), 404, "not_found")


def test_a_subtree_keys_upload_created_with_its_bytes(tree: Any) -> None:
    """tus creation with the upload's bytes (and an empty upload, done at creation) by a
    subtree key: stored in its root, as the organization's key's are."""
    _, sub, ids = tree
    tus = {"Tus-Resumable": "1.0.0"}
    name = base64.b64encode(b"hello.txt").decode()
    made = sub.post(
        "/api/uploads/tus",
        content=b"abc",
        headers={
            **tus,
            "Upload-Length": "3",
            "Upload-Metadata": f"filename {name}",
            "Content-Type": "application/offset+octet-stream",
        },
    )
    assert made.status_code == 201, made.text
    assert made.headers["upload-offset"] == "3"
    empty = sub.post(
        "/api/uploads/tus", headers={**tus, "Upload-Length": "0", "Upload-Metadata": f"filename {name}"}
    )
    assert empty.status_code == 201, empty.text
    assert sub.get("/api/uploads").json()["uploads"] == []
    stored = sub.get("/api/assets", params={"folderId": "", "q": "hello"}).json()["assets"]
    assert sorted(a["size"] for a in stored) == [0, 3]
    assert {a["folderId"] for a in stored} == {ids["public"]}


CHUNK = {"Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream"}


def _tus_of_six_bytes(sub: Any, token: str, filename: str) -> str:
    """A resumable upload of 6 bytes made with an upload token: its location."""
    name = base64.b64encode(filename.encode()).decode()
    made = httpx.post(
        f"{sub.base_url}/api/uploads/tus",
        params={"token": token},
        headers={"Tus-Resumable": "1.0.0", "Upload-Length": "6", "Upload-Metadata": f"filename {name}"},
    )
    assert made.status_code == 201, made.text
    return str(made.headers["location"])


def test_a_subtree_keys_upload_tokens_stay_in_what_it_may_reach(tree: Any) -> None:
    """The key's tokens for /public/avatars, and a resumable upload begun with one: once the
    organization's key moves avatars out of /public, neither stores anything there (404), as
    the key's own uploads would not."""
    api, sub, ids = tree
    form = sub.post("/api/upload-tokens", json={"folderId": ids["avatars"]}).json()["url"]
    tus_token = sub.post("/api/upload-tokens", json={"folderId": ids["avatars"]}).json()["token"]
    location = _tus_of_six_bytes(sub, tus_token, "late.bin")
    for offset, piece in ((0, b"ab"), (2, b"cd")):
        sent = httpx.patch(location, content=piece, headers={**CHUNK, "Upload-Offset": str(offset)})
        assert sent.status_code == 204, sent.text
    assert api.patch(f"/api/folders/{ids['avatars']}", json={"parentId": ids["private"]}).status_code == 200
    # 423 is tus's "retry in a moment": the last chunk's lease may still be on its way to
    # metadata (seen twice in CI, on each database). A client retries; the answer is then 404.
    deadline = time.monotonic() + 10
    while (
        last := httpx.patch(location, content=b"ef", headers={**CHUNK, "Upload-Offset": "4"})
    ).status_code == 423:
        assert time.monotonic() < deadline, last.text
        time.sleep(0.1)
    assert_error(last, 404, "not_found")
    assert_error(httpx.post(form, files={"file": ("late.txt", b"late")}), 404, "not_found")
    assert api.get("/api/assets", params={"q": "late"}).json()["total"] == 0
    # Back inside, the form's token is good again (a refused upload does not spend it).
    assert api.patch(f"/api/folders/{ids['avatars']}", json={"parentId": ids["public"]}).status_code == 200
    stored = httpx.post(form, files={"file": ("late.txt", b"late")})
    assert stored.status_code == 201 and stored.json()["folderId"] == ids["avatars"]


def test_a_key_made_by_a_subtree_key_reaches_nothing_once_its_folder_leaves_the_makers(
    stack: Any, tree: Any
) -> None:
    """A key the /public key made for /public/avatars kept avatars when the organization moved
    it out of /public: its maker lost it, and the key it made went on reading and uploading
    there, and so did an upload token that key made. While its folder is outside its maker's
    subtree, the made key is now refused (403), within edge's cache bound, and its token stores
    nothing (404, not spent); moved back, both act again."""
    api, sub, ids = tree
    made = sub.post("/api/keys", json={"name": "avatars", "folderId": ids["avatars"]})
    assert made.status_code == 201, made.text
    child = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": made.json()["key"]}, timeout=30)
    form = child.post("/api/upload-tokens", json={"folderId": ids["avatars"]}).json()["url"]
    tus_token = child.post("/api/upload-tokens", json={"folderId": ids["avatars"]}).json()["token"]
    location = _tus_of_six_bytes(child, tus_token, "late.bin")
    assert [a["id"] for a in child.get("/api/assets").json()["assets"]] == [ids["in_avatars"]]

    assert api.patch(f"/api/folders/{ids['avatars']}", json={"parentId": ids["private"]}).status_code == 200
    deadline = time.monotonic() + 5  # (edge's cache bound)
    while (listed := child.get("/api/assets")).status_code == 200:
        assert time.monotonic() < deadline, f"a made key kept a folder its maker lost: {listed.text}"
        time.sleep(0.05)
    assert_error(listed, 403, "forbidden")
    assert "outside the folder of the key that made it" in listed.json()["error"]["message"]
    assert_error(child.post("/api/assets", files={"file": ("late.txt", b"late")}), 403, "forbidden")
    assert_error(httpx.post(form, files={"file": ("late.txt", b"late")}), 404, "not_found")
    chunk = {**CHUNK, "Upload-Offset": "0"}
    assert_error(httpx.patch(location, content=b"abcdef", headers=chunk), 404, "not_found")
    assert api.get("/api/assets", params={"q": "late"}).json()["total"] == 0

    assert api.patch(f"/api/folders/{ids['avatars']}", json={"parentId": ids["public"]}).status_code == 200
    deadline = time.monotonic() + 5
    while (listed := child.get("/api/assets")).status_code != 200:
        assert time.monotonic() < deadline, listed.text
        time.sleep(0.05)
    stored = httpx.post(form, files={"file": ("late.txt", b"late")})
    assert stored.status_code == 201 and stored.json()["folderId"] == ids["avatars"], stored.text
    assert httpx.patch(location, content=b"abcdef", headers=chunk).status_code == 204
    assert {a["name"] for a in api.get("/api/assets", params={"q": "late"}).json()["assets"]} == {
        "late.txt",
        "late.bin",
    }
    child.close()


def _at_once(*calls: Any) -> list[httpx.Response]:
    """The calls started together (a barrier), from threads of their own."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    barrier = threading.Barrier(len(calls))

    def run(call: Any) -> httpx.Response:
        barrier.wait()
        return call()  # type: ignore[no-any-return]

    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(run, c) for c in calls]]


def test_what_the_organization_moves_out_is_out_of_reach_at_once(tree: Any) -> None:
    """The organization moves a folder or an asset out of the key's subtree while the key acts
    on it: the key's change and the move take turns, so never both succeed (on PostgreSQL the
    key deleted the folder, or pulled it or the asset back in, in about 20 rounds of 25 when
    its check ran before the organization's tree lock)."""
    api, sub, ids = tree
    for i in range(8):
        a = api.post("/api/folders", json={"name": f"a{i}", "parentId": ids["public"]}).json()["id"]
        deleted, moved = _at_once(
            lambda a=a: sub.delete(f"/api/folders/{a}"),
            lambda a=a: api.patch(f"/api/folders/{a}", json={"parentId": ids["private"]}),
        )
        # One of the two, never both: a folder moved out is not the key's to delete.
        assert sorted((deleted.status_code, moved.status_code)) == [200, 404], (deleted.text, moved.text)

        x = api.post("/api/assets", files={"file": (f"x{i}.txt", b"x")}, data={"folderId": ids["public"]})
        x = x.json()["id"]
        mine, theirs = _at_once(
            lambda x=x: sub.patch(f"/api/assets/{x}", json={"folderId": ids["avatars"]}),
            lambda x=x: api.patch(f"/api/assets/{x}", json={"folderId": ids["private"]}),
        )
        assert theirs.status_code == 200 and mine.status_code in (200, 404), (mine.text, theirs.text)
        # Moved out, whichever came first: the key never pulls it back in.
        assert api.get(f"/api/assets/{x}").json()["folderId"] == ids["private"]
    assert api.get(f"/api/assets/{ids['in_private']}").status_code == 200


def test_a_confined_tokens_next_chunk_meets_no_lease_of_its_own_edge(
    tree: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A confined token's chunk is never given the lease this edge keeps between chunks
    (Kept.take), so its last chunk must not keep one for it: the next chunk takes the lease in
    metadata at once, where it met the kept lease, waited KEEP_SECONDS (2 s) for it to run
    out, and answered 423 when metadata was slow to answer (the race CI met on PostgreSQL)."""
    api, sub, ids = tree
    met: list[dict[str, Any] | None] = []
    real = MetadataClient.tus_lock

    async def tus_lock(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await real(self, *args, **kwargs)
        except CofferError as exc:
            if exc.status == 423:
                met.append(exc.details)
            raise

    monkeypatch.setattr(MetadataClient, "tus_lock", tus_lock)
    token = sub.post("/api/upload-tokens", json={"folderId": ids["avatars"]}).json()["token"]
    location = _tus_of_six_bytes(sub, token, "next.bin")
    took = []
    for offset, piece in ((0, b"ab"), (2, b"cd"), (4, b"ef")):
        started = time.monotonic()
        sent = httpx.patch(
            location, content=piece, headers={**CHUNK, "Upload-Offset": str(offset)}, timeout=30
        )
        took.append(time.monotonic() - started)
        assert sent.status_code == 204, (offset, sent.text)
    assert met == [], met  # no chunk met a lease of this edge's own (kept or writing)
    assert max(took[1:]) < 1.0, took  # (each waited KEEP_SECONDS for the lease kept for nobody)
    stored = api.get("/api/assets", params={"q": "next"}).json()["assets"]
    assert [(a["size"], a["folderId"]) for a in stored] == [(6, ids["avatars"])]
