"""Asset rename, move, search and sort against the real metadata app (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any, get_args

import httpx
import pytest

from coffer_kit.contract.ids import new_id
from coffer_kit.contract.names import search_key
from coffer_metadata.assets import repository
from coffer_metadata.assets.router import Sort
from coffer_testkit.testing import commit_asset

pytestmark = pytest.mark.anyio


async def make_asset(
    api: httpx.AsyncClient, org: str, name: str, size: int = 1, folder: str | None = None
) -> Any:
    response = await commit_asset(api, org, size=size, name=name, folderId=folder, sha256="b" * 64)
    assert response.status_code == 201, response.text
    return response.json()


def test_the_sort_parameter_names_every_sort() -> None:
    assert set(get_args(Sort)) == set(repository.SORTS)


async def test_rename_and_move(api: httpx.AsyncClient) -> None:
    org, other = new_id("org"), new_id("org")
    f = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "f"})).json()
    theirs = (await api.post(f"/internal/v1/orgs/{other}/folders", json={"name": "t"})).json()
    asset = await make_asset(api, org, "old.bin")
    url = f"/internal/v1/orgs/{org}/assets/{asset['id']}"
    moved = (await api.patch(url, json={"name": "New.bin", "folderId": f["id"]})).json()
    assert (moved["name"], moved["folderId"], moved["key"], moved["publicUrl"]) == (
        "New.bin",
        f["id"],
        asset["key"],
        asset["publicUrl"],
    )
    # The search follows the new name.
    found = (await api.get(f"/internal/v1/orgs/{org}/assets", params={"q": "new"})).json()
    assert [a["id"] for a in found["assets"]] == [asset["id"]]
    assert (await api.get(f"/internal/v1/orgs/{org}/assets", params={"q": "old"})).json()["total"] == 0
    # Deleting the folder moves the asset back to the root, as for any asset.
    assert (await api.delete(f"/internal/v1/orgs/{org}/folders/{f['id']}")).status_code == 200
    assert (await api.get(url)).json()["folderId"] is None
    cases: list[tuple[str, Any, int]] = [
        (url, {}, 400),
        (url, {"name": None}, 400),
        (url, {"name": "a/b"}, 400),
        (url, {"folderId": new_id("fld")}, 404),
        (url, {"folderId": theirs["id"]}, 403),
        (f"/internal/v1/orgs/{org}/assets/{new_id('ast')}", {"name": "x"}, 404),
        (f"/internal/v1/orgs/{other}/assets/{asset['id']}", {"name": "x"}, 403),
    ]
    for target, body, status in cases:
        assert (await api.patch(target, json=body)).status_code == status, body


async def test_search_is_a_case_insensitive_substring_with_literal_wildcards(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    for name in ("Straße.txt", "STRASSE.txt", "50% off", "5_0 off", "back\\slash", "plain"):
        await make_asset(api, org, name)

    async def names(q: str, **params: Any) -> list[str]:
        response = await api.get(f"/internal/v1/orgs/{org}/assets", params={"q": q, "sort": "name", **params})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["total"] == len(body["assets"])
        return [a["name"] for a in body["assets"]]

    # Case folding, not only ASCII lower-casing: ß folds to ss.
    assert await names("strasse") == ["STRASSE.txt", "Straße.txt"]
    assert await names("STRAßE") == ["STRASSE.txt", "Straße.txt"]
    assert await names("%") == ["50% off"]
    assert await names("_") == ["5_0 off"]
    assert await names("\\") == ["back\\slash"]
    assert await names("0 off") == ["5_0 off"]
    assert await names("zzz") == []
    past = await api.get(f"/internal/v1/orgs/{org}/assets", params={"q": "strasse", "offset": 10})
    assert (past.json()["total"], past.json()["assets"]) == (2, [])
    for bad in ({"q": ""}, {"q": "x" * 256}, {"sort": "nope"}, {"sort": ""}):
        response = await api.get(f"/internal/v1/orgs/{org}/assets", params=bad)
        assert response.status_code == 400, bad


async def test_search_finds_exactly_the_names_holding_the_query(api: httpx.AsyncClient) -> None:
    """Every query, short or long, with quotes, spaces, wildcards or non-ASCII letters, finds
    the names that contain it case-folded, as Python's ``in`` says, after renames and deletes
    too (on SQLite a trigram index narrows queries of three characters or more)."""
    org, other = new_id("org"), new_id("org")
    f = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "f"})).json()
    names = [
        "Straße Plan.pdf",
        "STRASSE plan.PDF",
        'say "hi".txt',
        "50% off_now.jpg",
        "a  b.txt",
        "ÉCOLE été.png",
        "日本語のファイル.txt",
        "ab",
        "abc",
        "xabcx.abc",
        "report-0421.pdf",
        "report-04210.pdf",
        "e\u0301cole.txt",  # NFC: école
    ]
    made = {}
    for n, name in enumerate(names):
        made[name] = await make_asset(api, org, name, folder=f["id"] if n % 2 else None)
    await make_asset(api, other, "abc in another organization")
    queries = [
        "a", "ab", "abc", "bc.", "ss", "strasse", "STRAßE PL", 'y "h', '"', '""', "%", "_n", "% off_",
        "  ", "a  b", "été", "ÉCOLE", "école", "本語", "本語のフ", "-0421", "0421.", "report-0421",
        ".pdf", "x" * 10, "abc.",
    ]  # fmt: skip

    async def found(q: str, **params: Any) -> set[str]:
        response = await api.get(f"/internal/v1/orgs/{org}/assets", params={"q": q, "limit": 100, **params})
        assert response.status_code == 200, (q, response.text)
        body = response.json()
        assert body["total"] == len(body["assets"]), q
        return {a["name"] for a in body["assets"]}

    async def check() -> None:
        current = {a["name"]: a for a in made.values()}
        for q in queries:
            expected = {n for n in current if search_key(q) in search_key(n)}
            assert await found(q) == expected, q
            in_folder = {n for n in expected if current[n]["folderId"] == f["id"]}
            assert await found(q, folderId=f["id"]) == in_folder, q

    await check()
    # A rename moves the name in the index; a deleted asset leaves it.
    renamed = await api.patch(
        f"/internal/v1/orgs/{org}/assets/{made['abc']['id']}", json={"name": "zzz-report.txt"}
    )
    assert renamed.status_code == 200, renamed.text
    made["abc"] = renamed.json()
    made = {a["name"]: a for a in made.values()}
    queries += ["zzz-rep", "zzz"]
    gone = made.pop("xabcx.abc")
    assert (await api.post(f"/internal/v1/orgs/{org}/assets/{gone['id']}/tombstone")).status_code < 300
    await check()


async def test_sorts_break_ties_by_id_in_the_same_direction(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    made = [await make_asset(api, org, "same", size=7) for _ in range(5)]
    ids = sorted(a["id"] for a in made)
    for sort, descending in (("name", False), ("-name", True), ("size", False), ("-size", True)):
        pages = []
        for offset in (0, 2, 4):
            response = await api.get(
                f"/internal/v1/orgs/{org}/assets", params={"sort": sort, "limit": 2, "offset": offset}
            )
            pages += [a["id"] for a in response.json()["assets"]]
        assert pages == (ids[::-1] if descending else ids), sort


@pytest.mark.parametrize("ids_walk_from", [0, repository.IDS_WALK_FROM], ids=["ids", "rows"])
async def test_every_page_of_the_default_order_is_its_slice(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, ids_walk_from: int
) -> None:
    """Pages past the middle are found from the oldest end, past the end without a query, deep
    ones by their ids: every (offset, limit) still answers its slice of the newest-first list."""
    monkeypatch.setattr(repository, "IDS_WALK_FROM", ids_walk_from)
    org = new_id("org")
    folder = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "f"})).json()["id"]
    made = [await make_asset(api, org, f"a{i}", folder=folder if i % 3 == 0 else None) for i in range(8)]
    newest_first = [a["id"] for a in made[::-1]]
    in_folder = [a["id"] for a in made[::-1] if a["folderId"] == folder]
    at_root = [a["id"] for a in made[::-1] if a["folderId"] is None]
    scopes = (({}, newest_first), ({"folderId": folder}, in_folder), ({"folderId": ""}, at_root))
    for scope, expected in scopes:
        for limit in (1, 2, 3, 5, 8, 50):
            for offset in range(len(expected) + 2):
                params = {**scope, "limit": limit, "offset": offset}
                listed = (await api.get(f"/internal/v1/orgs/{org}/assets", params=params)).json()
                assert [a["id"] for a in listed["assets"]] == expected[offset : offset + limit], params
                assert listed["total"] == len(expected), params


async def test_an_upload_target_is_checked(api: httpx.AsyncClient) -> None:
    org, other = new_id("org"), new_id("org")
    f = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "f"})).json()
    theirs = (await api.post(f"/internal/v1/orgs/{other}/folders", json={"name": "t"})).json()
    url = f"/internal/v1/orgs/{org}/upload-targets"
    ok = await api.post(url, json={"folderId": f["id"], "name": "e\u0301.png"})
    assert ok.json() == {"folderId": f["id"], "name": "\u00e9.png"}  # NFC
    assert (await api.post(url, json={})).json() == {"folderId": None, "name": None}
    assert (await api.post(url, json={"folderId": new_id("fld")})).status_code == 404
    assert (await api.post(url, json={"folderId": theirs["id"]})).status_code == 403
    assert (await api.post(url, json={"name": ".."})).status_code == 400


async def test_ids_and_searches_that_cannot_exist_are_answered_without_the_database(
    api: httpx.AsyncClient,
) -> None:
    """PostgreSQL refuses text with NUL outright: such input must still be a plain 404 or none."""
    org = new_id("org")
    await make_asset(api, org, "kept")
    base = f"/internal/v1/orgs/{org}"
    for bad, in_path in (("ast_\x00", "ast_%00"), ("x" * 300, "x" * 300), ("fld_ spaced", "fld_%20spaced")):
        assert (await api.get(f"{base}/assets/{in_path}")).status_code == 404, bad
        assert (await api.patch(f"{base}/assets/{in_path}", json={"name": "n"})).status_code == 404, bad
        assert (await api.delete(f"{base}/folders/{in_path}")).status_code == 404, bad
        assert (await api.get(f"{base}/folders/{in_path}")).status_code == 404, bad
        assert (await api.patch(f"{base}/folders/{in_path}", json={"name": "n"})).status_code == 404, bad
        assert (await api.get(f"{base}/assets", params={"folderId": bad})).status_code == 404, bad
        response = await api.post(f"{base}/upload-targets", json={"folderId": bad})
        assert response.status_code == 404, bad
    found = await api.get(f"{base}/assets", params={"q": "ke\x00"})
    assert (found.status_code, found.json()["total"]) == (200, 0)


@pytest.mark.parametrize(
    "loop_offset_max", [repository.FIRST_PAGE_OFFSET_MAX, -1], ids=["first-pages", "general"]
)
async def test_list_views_match_view(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, loop_offset_max: int
) -> None:
    """A page writes each asset as the asset GET does, byte for byte (page_views' shortcuts:
    the filename alone quoted, naive timestamps formatted as they are), whichever way the page
    is read (every asset near the start: the usage row's total and an index walk; else the general page)."""
    monkeypatch.setattr(repository, "FIRST_PAGE_OFFSET_MAX", loop_offset_max)
    org = new_id("org")
    folder = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "f"})).json()["id"]
    made = []
    for i, key_name in enumerate(["plain.bin", "r é%s #?&=+.pdf", "日本語 ファイル.txt", "a~b_c-d.e"]):
        response = await commit_asset(
            api,
            org,
            size=i + 1,
            key_name=key_name,
            folderId=folder if i % 2 else None,
            visibility="private" if i == 2 else "public",
        )
        assert response.status_code == 201, response.text
        made.append(response.json())
    for params in ({}, {"folderId": folder}, {"offset": 1, "limit": 2}):
        listed = await api.get(f"/internal/v1/orgs/{org}/assets", params=params)
        assert listed.status_code == 200, listed.text
        assert listed.json()["assets"], params
        for asset in listed.json()["assets"]:
            one = await api.get(f"/internal/v1/orgs/{org}/assets/{asset['id']}")
            assert asset == one.json(), params
    listed = await api.get(f"/internal/v1/orgs/{org}/assets")
    urls = {a["key"]: a["publicUrl"] for a in listed.json()["assets"]}
    assert (
        urls[made[1]["key"]] == f"http://cdn.test/{org}/{made[1]['id']}/r%20%C3%A9%25s%20%23%3F%26%3D%2B.pdf"
    )
    assert urls[made[2]["key"]] is None  # private: no public URL


async def test_a_first_page_counts_and_lists_in_one_snapshot(api: httpx.AsyncClient) -> None:
    """The first pages of every asset (read on the loop with SQLite) answer the exact total,
    an empty organization none, and a page past the end nothing."""
    org = new_id("org")
    empty = (await api.get(f"/internal/v1/orgs/{org}/assets")).json()
    assert (empty["assets"], empty["total"]) == ([], 0)
    for i in range(3):
        await make_asset(api, org, f"n{i}")
    listed = (await api.get(f"/internal/v1/orgs/{org}/assets", params={"limit": 2})).json()
    assert (len(listed["assets"]), listed["total"], listed["limit"], listed["offset"]) == (2, 3, 2, 0)
    past = (await api.get(f"/internal/v1/orgs/{org}/assets", params={"offset": 3})).json()
    assert (past["assets"], past["total"]) == ([], 3)
    other = (await api.get(f"/internal/v1/orgs/{new_id('org')}/assets")).json()
    assert other["total"] == 0
