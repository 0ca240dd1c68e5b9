"""Issue 50 against the real metadata app (SQLite and PostgreSQL): an asset's metadata and tags
at upload and through PATCH, their bounds, and the events that report a change."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from coffer_kit.contract import describe
from coffer_kit.contract.ids import new_id
from coffer_kit.db import make_engine
from coffer_testkit.testing import commit_asset

pytestmark = pytest.mark.anyio


async def upload(api: httpx.AsyncClient, org: str, **fields: Any) -> httpx.Response:
    # (``commit_asset``'s first parameter is called ``metadata``: the body goes as a dict.)
    return await commit_asset(api, org, **{"sha256": "b" * 64, **fields})


def asset_updated(database_url: str, org: str) -> list[Any]:
    """The organization's ``asset.updated`` events: their ``changes`` and ``data``."""
    engine = make_engine(database_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT changes, data FROM events WHERE organization_id = :o AND type = 'asset.updated'"),
            {"o": org},
        ).all()
    engine.dispose()
    return list(rows)


async def test_metadata_and_tags_are_stored_at_upload_and_answered_everywhere(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    meta = {"product": "sku-1", "count": 3, "ratio": 2.5, "hero": True, "note": "ünïcode"}
    made = await upload(api, org, metadata=meta, tags=["b", "a", "a"])
    assert made.status_code == 201, made.text
    asset = made.json()
    assert (asset["metadata"], asset["tags"], asset["image"], asset["placeholder"]) == (
        meta,
        ["a", "b"],
        None,
        None,
    )
    one = (await api.get(f"/internal/v1/orgs/{org}/assets/{asset['id']}")).json()
    listed = (await api.get(f"/internal/v1/orgs/{org}/assets")).json()["assets"][0]
    searched = (await api.get(f"/internal/v1/orgs/{org}/assets", params={"q": "file"})).json()["assets"][0]
    for seen in (one, listed, searched):
        assert (seen["metadata"], seen["tags"]) == (meta, ["a", "b"])
    plain = (await upload(api, org)).json()
    assert (plain["metadata"], plain["tags"]) == ({}, [])


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"metadata": {"a b": "x"}}, "metadata.a b"),
        ({"metadata": {"k": {"nested": 1}}}, "metadata.k"),
        ({"metadata": {"k": None}}, "metadata.k"),
        ({"metadata": {"k": "x" * 257}}, "metadata.k"),
        ({"metadata": {f"k{i}": i for i in range(33)}}, "metadata"),
        ({"metadata": {f"k{i}": "v" * 200 for i in range(12)}}, "metadata"),
        ({"metadata": ["not", "an", "object"]}, "metadata"),
        ({"tags": ["ok", "no space"]}, "tags[1]"),
        ({"tags": ["x" * 65]}, "tags[0]"),
        ({"tags": [f"t{i}" for i in range(33)]}, "tags"),
    ],
)
async def test_bounds_are_refused_with_the_field_named(
    api: httpx.AsyncClient, fields: dict[str, Any], field: str
) -> None:
    org = new_id("org")
    refused = await upload(api, org, **fields)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["details"]["field"] == field
    # Nothing was stored, nothing counted.
    assert (await api.get(f"/internal/v1/orgs/{org}/assets")).json()["total"] == 0
    assert (await api.get(f"/internal/v1/orgs/{org}/usage")).json()["usedBytes"] == 0


async def test_patches_at_once_each_merge_into_what_the_one_before_wrote(api: httpx.AsyncClient) -> None:
    """Each PATCH merged into the row it read and wrote the whole column back: on PostgreSQL,
    of 12 at once, 5-7 keys and tags were kept. The row is now locked as it is read."""
    org = new_id("org")
    asset = (await upload(api, org, metadata={"base": 0})).json()
    url = f"/internal/v1/orgs/{org}/assets/{asset['id']}"
    patches = [
        api.patch(url, json={"metadata": {f"k{i}": i}, "tags": {"add": [f"t{i:02}"]}}) for i in range(12)
    ]
    assert {r.status_code for r in await asyncio.gather(*patches)} == {200}
    body = (await api.get(url)).json()
    assert body["metadata"] == {"base": 0, **{f"k{i}": i for i in range(12)}}
    assert body["tags"] == [f"t{i:02}" for i in range(12)]


async def test_patch_merges_metadata_deletes_a_key_with_null_and_adds_and_removes_tags(
    api: httpx.AsyncClient, database_url: str
) -> None:
    org = new_id("org")
    asset = (await upload(api, org, metadata={"a": "1", "b": 2}, tags=["x", "y"])).json()
    url = f"/internal/v1/orgs/{org}/assets/{asset['id']}"
    changed = await api.patch(
        url,
        json={
            "metadata": {"b": None, "c": False, "gone": None},
            "tags": {"add": ["z"], "remove": ["x", "w"]},
        },
    )
    assert changed.status_code == 200, changed.text
    body = changed.json()
    assert (body["metadata"], body["tags"]) == ({"a": "1", "c": False}, ["y", "z"])
    assert body["updatedAt"] >= asset["updatedAt"]
    assert (await api.get(url)).json()["metadata"] == {"a": "1", "c": False}
    # A change that changes nothing writes no event.
    same = await api.patch(url, json={"metadata": {}, "tags": {"add": ["y"], "remove": ["q"]}})
    assert same.status_code == 200 and same.json()["updatedAt"] == body["updatedAt"]
    rows = asset_updated(database_url, org)
    assert len(rows) == 1
    assert json.loads(rows[0].changes) == {"metadata": {"a": "1", "b": 2}, "tags": ["x", "y"]}
    assert json.loads(rows[0].data)["tags"] == ["y", "z"]
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"metadata": None}, "metadata"),
        ({"metadata": "x"}, "metadata"),
        ({"metadata": {"k": [1]}}, "metadata.k"),
        ({"metadata": {f"n{i}": i for i in range(31)}}, "metadata"),  # 33 keys after the merge
        ({"tags": ["a"]}, "tags"),
        ({"tags": {"add": ["a"], "remove": ["a"]}}, "tags"),
        ({"tags": {"add": ["a,b"]}}, "tags[0]"),
        ({"tags": {"add": [f"t{i}" for i in range(31)]}}, "tags"),  # 33 after adding
        # Not lists: were taken as none (a mistyped field is 400, CONTRACT §3).
        ({"tags": {"add": False}}, "tags.add"),
        ({"tags": {"add": ""}}, "tags.add"),
        ({"tags": {"add": {}}}, "tags.add"),
        ({"tags": {"remove": 0}}, "tags.remove"),
    ]
    for patch, field in refusals:
        refused = await api.patch(url, json=patch)
        assert refused.status_code == 400, (patch, refused.text)
        assert refused.json()["error"]["details"]["field"] == field, patch
    assert (await api.get(url)).json()["tags"] == ["y", "z"]


async def test_patch_that_changes_only_a_values_type_is_kept(
    api: httpx.AsyncClient, database_url: str
) -> None:
    org = new_id("org")
    asset = (await upload(api, org, metadata={"flag": 1, "zero": 0, "n": 2, "on": True})).json()
    url = f"/internal/v1/orgs/{org}/assets/{asset['id']}"
    patch = {"flag": True, "zero": False, "n": 2.0, "on": 1}
    changed = await api.patch(url, json={"metadata": patch})
    assert changed.status_code == 200, changed.text
    # Compared as JSON text: Python's == cannot tell 1 from True, or 2 from 2.0.
    expected = json.dumps(patch, sort_keys=True)
    assert json.dumps(changed.json()["metadata"], sort_keys=True) == expected
    assert json.dumps((await api.get(url)).json()["metadata"], sort_keys=True) == expected
    listed = await api.get(f"/internal/v1/orgs/{org}/assets", params={"meta[flag]": "true"})
    assert [a["id"] for a in listed.json()["assets"]] == [asset["id"]]
    (row,) = asset_updated(database_url, org)
    assert json.loads(row.changes) == {"metadata": {"flag": 1, "zero": 0, "n": 2, "on": True}}


def test_upload_fields_are_parsed_and_bounded() -> None:
    assert describe.parse_metadata_field('{"a": 1}') == {"a": 1}
    assert describe.parse_metadata_field("") is None
    assert describe.parse_tags_field(" b, a ,,a") == ["a", "b"]
    assert describe.parse_tags_field(None) is None
    for text_value, field in (("{", "metadata"), ("NaN", "metadata"), ('{"x": NaN}', "metadata")):
        with pytest.raises(describe.CofferError) as refused:
            describe.parse_metadata_field(text_value)
        assert refused.value.details == {"field": field}
    assert describe.meta_filter_value("n", "3") == ["3", 3]
    assert describe.meta_filter_value("n", "03") == ["03"]
    assert describe.meta_filter_value("f", "true") == ["true", True]


async def test_filters_by_tag_metadata_media_type_size_and_time_combine_with_search_and_sort(
    api: httpx.AsyncClient,
) -> None:
    org, other = new_id("org"), new_id("org")
    specs = [
        ("a.png", "image/png", 10, {"sku": "1", "n": 3}, ["red", "big"]),
        ("b.png", "image/png", 20, {"sku": "2", "n": "3"}, ["red"]),
        ("c.pdf", "application/pdf", 30, {"sku": "1", "flag": True}, ["blue"]),
        ("d.txt", "text/plain", 40, {}, []),
    ]
    ids = {}
    for name, mime, size, meta, tags in specs:
        made = await upload(api, org, name=name, mimeType=mime, size=size, metadata=meta, tags=tags)
        ids[name] = made.json()["id"]
    await upload(api, other, name="a.png", metadata={"sku": "1"}, tags=["red"])

    async def names(**params: Any) -> list[str]:
        answer = await api.get(f"/internal/v1/orgs/{org}/assets", params={"sort": "name", **params})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["total"] == len(body["assets"])
        return [a["name"] for a in body["assets"]]

    assert await names(tag="red") == ["a.png", "b.png"]
    assert await names(tag=["red", "big"]) == ["a.png"]
    assert await names(tag=["big", "blue"], tagMatch="any") == ["a.png", "c.pdf"]
    assert await names(**{"meta[sku]": "1"}) == ["a.png", "c.pdf"]
    assert await names(**{"meta[n]": "3"}) == ["a.png", "b.png"]  # the number and the string
    assert await names(**{"meta[flag]": "true"}) == ["c.pdf"]
    assert await names(**{"meta[sku]": "1", "tag": "red"}) == ["a.png"]
    # A tag leading a value that may be a boolean (each of its assets probed for the key).
    assert await names(**{"meta[flag]": "true", "tag": ["blue", "red"], "tagMatch": "any"}) == ["c.pdf"]
    assert await names(**{"meta[n]": "3", "tag": "red"}) == ["a.png", "b.png"]
    assert await names(mediaType="image/*") == ["a.png", "b.png"]
    assert await names(mediaType="application/pdf") == ["c.pdf"]
    assert await names(minSize="20", maxSize="30") == ["b.png", "c.pdf"]
    assert await names(createdAfter="2000-01-01T00:00:00Z", createdBefore="2999-01-01") == [
        "a.png",
        "b.png",
        "c.pdf",
        "d.txt",
    ]
    assert await names(createdAfter="2999-01-01T00:00:00+02:00") == []
    assert await names(q="png", tag="red", sort="-name") == ["b.png", "a.png"]
    page = (await api.get(f"/internal/v1/orgs/{org}/assets", params={"tag": "red", "limit": 1})).json()
    assert (page["total"], len(page["assets"])) == (2, 1)
    # A change is what the filters see next (SQLite: the side tables' triggers).
    patched = await api.patch(
        f"/internal/v1/orgs/{org}/assets/{ids['a.png']}", json={"metadata": {"sku": "9"}}
    )
    assert patched.status_code == 200, patched.text
    assert await names(**{"meta[sku]": "1"}) == ["c.pdf"]
    assert await names(**{"meta[sku]": "9"}) == ["a.png"]
    for params, field in (
        ({"tag": "no space"}, "tag"),
        ({"tag": "red\n"}, "tag"),  # the pattern holds for the whole tag
        ({"tagMatch": "some"}, "tagMatch"),
        ({"meta[bad key]": "x"}, "metadata.bad key"),
        ({"meta[k]": "x" * 257}, "meta.k"),
        ({"mediaType": "image"}, "mediaType"),
        ({"minSize": "-1"}, "minSize"),
        ({"createdAfter": "yesterday"}, "createdAfter"),
    ):
        refused = await api.get(f"/internal/v1/orgs/{org}/assets", params=params)
        assert refused.status_code == 400, params
        assert refused.json()["error"]["details"]["field"] == field, params


async def test_a_recursive_listing_spans_the_subtree_with_each_folder_path(api: httpx.AsyncClient) -> None:
    org = new_id("org")

    async def folder(name: str, parent: str | None = None) -> str:
        made = await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": name, "parentId": parent})
        return str(made.json()["id"])

    top = await folder("top")
    mid = await folder("mid", top)
    low = await folder("low", mid)
    aside = await folder("aside")
    for name, place in (("in-top", top), ("in-mid", mid), ("in-low", low), ("aside", aside), ("root", None)):
        await upload(api, org, name=name, folderId=place, tags=["t"])
    answer = await api.get(
        f"/internal/v1/orgs/{org}/assets", params={"folderId": top, "recursive": "true", "sort": "name"}
    )
    body = answer.json()
    assert [a["name"] for a in body["assets"]] == ["in-low", "in-mid", "in-top"] and body["total"] == 3
    paths = {a["name"]: [p["name"] for p in a["folderPath"]] for a in body["assets"]}
    assert paths == {"in-low": ["top", "mid", "low"], "in-mid": ["top", "mid"], "in-top": ["top"]}
    every = await api.get(f"/internal/v1/orgs/{org}/assets", params={"recursive": "true", "tag": "t"})
    assert every.json()["total"] == 5
    assert {a["name"]: a["folderPath"] for a in every.json()["assets"]}["root"] == []
    # Not recursive: no folderPath, and the folder's own assets only.
    own = (await api.get(f"/internal/v1/orgs/{org}/assets", params={"folderId": top})).json()
    assert [a["name"] for a in own["assets"]] == ["in-top"] and "folderPath" not in own["assets"][0]


async def test_a_whole_float_written_with_an_exponent_is_the_same_on_both_databases(
    api: httpx.AsyncClient, database_url: str
) -> None:
    """PostgreSQL keeps 1e16 as the integer it is, and gave it back so: the same PATCH again was
    a change each time (an event, a new updatedAt), and metadata of 2,048 bytes counted with
    exponents read back larger, so that every later PATCH of it was refused. Such a float is now
    stored as its integer on both databases, counted so, and -0.0 as 0.0."""
    org = new_id("org")
    given = {"n": 1e16, "neg": -2.5e17, "z": -0.0, "small": 1.5}
    asset = (await upload(api, org, metadata=given)).json()
    url = f"/internal/v1/orgs/{org}/assets/{asset['id']}"
    stored = {"n": 10**16, "neg": -25 * 10**16, "z": 0.0, "small": 1.5}
    expected = json.dumps(stored, sort_keys=True)
    assert json.dumps(asset["metadata"], sort_keys=True) == expected
    assert json.dumps((await api.get(url)).json()["metadata"], sort_keys=True) == expected
    for _ in range(2):
        again = await api.patch(url, json={"metadata": given})
        assert again.status_code == 200 and again.json()["updatedAt"] == asset["updatedAt"]
    assert asset_updated(database_url, org) == []
    for written in ("1e+16", "10000000000000000"):  # as given, as answered
        listed = await api.get(f"/internal/v1/orgs/{org}/assets", params={"meta[n]": written})
        assert [a["id"] for a in listed.json()["assets"]] == [asset["id"]], written

    # The byte bound counts the digits the databases give back: 20 of 1e18 are 400 bytes more.
    padded: dict[str, Any] = {f"k{i:02}": 1e18 for i in range(20)}

    def size() -> int:  # as Python writes it: 1e+18
        return len(json.dumps(padded, separators=(",", ":"), sort_keys=True))

    for i in range(describe.MAX_KEYS - 20):  # strings of at most MAX_VALUE_CHARS up to the bound
        room = describe.MAX_METADATA_BYTES - size() - len(f',"p{i:02}":""')
        padded[f"p{i:02}"] = "p" * min(room, describe.MAX_VALUE_CHARS)
        if size() == describe.MAX_METADATA_BYTES:
            break
    assert size() == describe.MAX_METADATA_BYTES
    refused = await upload(api, org, metadata=padded)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["details"]["field"] == "metadata"
