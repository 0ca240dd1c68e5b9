"""Cursor pages of the asset listing (issue 49), on both databases: every sort walks the same
rows as one offset page, inserts during a walk shift nothing, and foreign cursors are 400."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from coffer_kit import pagination
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.wire import ACTOR_HEADER
from coffer_metadata.assets import repository
from coffer_testkit.testing import assert_error, commit_asset

pytestmark = pytest.mark.anyio


async def walk(api: httpx.AsyncClient, url: str, **params: Any) -> list[str]:
    """Every id, two at a time, following nextCursor from a first page with total=false."""
    ids: list[str] = []
    query: dict[str, Any] = {"limit": 2, "total": "false", **params}
    while True:
        page = (await api.get(url, params=query)).json()
        assert "total" not in page and "offset" not in page
        ids += [a["id"] for a in page["assets"]]
        if page["nextCursor"] is None:
            return ids
        query = {"limit": 2, "cursor": page["nextCursor"], **params}


async def test_every_sort_walks_the_listing_by_cursor(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    url = f"/internal/v1/orgs/{org}/assets"
    folder = (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": "f"})).json()["id"]
    for i, name in enumerate(["b", "a", "c", "a", "e"]):
        made = await commit_asset(
            api, org, size=(i * 7) % 3 + 1, name=name, sha256="b" * 64, folderId=folder if i % 2 else None
        )
        assert made.status_code == 201, made.text
    for sort in repository.SORTS:
        whole = (await api.get(url, params={"sort": sort})).json()
        assert await walk(api, url, sort=sort) == [a["id"] for a in whole["assets"]], sort
    for params in ({"folderId": folder}, {"folderId": ""}, {"q": "a"}, {"visibility": "public"}):
        whole = (await api.get(url, params=params)).json()
        assert await walk(api, url, **params) == [a["id"] for a in whole["assets"]], params


async def test_a_walk_is_stable_under_inserts_and_offset_pages_lead_into_it(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    url = f"/internal/v1/orgs/{org}/assets"
    for i in range(5):
        assert (await commit_asset(api, org, size=1, name=f"n{i}", sha256="b" * 64)).status_code == 201
    first = (await api.get(url, params={"limit": 2})).json()
    # An offset page keeps the contract's fields and adds the cursor after its last row.
    assert (first["total"], first["offset"], len(first["assets"])) == (5, 0, 2)
    assert (await commit_asset(api, org, size=1, name="new", sha256="b" * 64)).status_code == 201
    rest = (await api.get(url, params={"limit": 10, "cursor": first["nextCursor"], "total": "true"})).json()
    # The newest asset, inserted before the cursor's position, neither appears nor shifts the page.
    assert [a["name"] for a in rest["assets"]] == ["n2", "n1", "n0"]
    assert (rest["total"], rest["nextCursor"]) == (6, None)
    last = (await api.get(url, params={"limit": 2, "offset": 4})).json()
    assert last["nextCursor"] is None and len(last["assets"]) == 2


async def test_a_foreign_or_broken_cursor_is_400(api: httpx.AsyncClient) -> None:
    org, other = new_id("org"), new_id("org")
    for owner in (org, other):
        for i in range(3):
            assert (await commit_asset(api, owner, size=1, name=f"n{i}", sha256="b" * 64)).status_code == 201
    url = f"/internal/v1/orgs/{org}/assets"
    cursor = (await api.get(url, params={"limit": 1})).json()["nextCursor"]
    theirs = (await api.get(f"/internal/v1/orgs/{other}/assets", params={"limit": 1})).json()["nextCursor"]
    cases: list[dict[str, Any]] = [
        {"cursor": "not a cursor"},
        {"cursor": cursor[:-3]},
        {"cursor": cursor[:-1] + ("A" if cursor[-1] != "A" else "B")},
        {"cursor": theirs},  # another organization's
        {"cursor": cursor, "sort": "name"},  # another order
        {"cursor": cursor, "q": "n"},  # other filters
        {"cursor": "x" * 3000},
        {"cursor": ""},
        # Within the bound, JSON nested past the parser's recursion limit: was a 500.
        {"cursor": base64.urlsafe_b64encode(b"[" * 1530).decode().rstrip("=")},
    ]
    for params in cases:
        error = assert_error(await api.get(url, params=params), 400, "invalid_request")
        assert error["details"]["field"] == "cursor", params
    error = assert_error(await api.get(url, params={"cursor": cursor, "offset": 1}), 400, "invalid_request")
    assert error["details"]["field"] == "offset"
    assert (await api.get(url, params={"cursor": cursor})).status_code == 200


async def test_a_well_formed_cursor_with_a_value_no_row_holds_is_400(api: httpx.AsyncClient) -> None:
    """The check is no secret: a client may write a cursor whose check holds. A value no row
    can hold (beyond 64 bits, not UTF-8, with a NUL) is refused like an altered cursor."""
    org = new_id("org")
    url = f"/internal/v1/orgs/{org}/assets"
    assert (await commit_asset(api, org, size=1, name="n", sha256="b" * 64)).status_code == 201
    scope = [org, None, False, None, None, None, "", False]  # the unfiltered listing's

    def cursor(sort: str, value: Any, row_id: str = "ast_x") -> dict[str, str]:
        return {"sort": sort, "cursor": pagination.encode(f"assets:{sort}", scope, value, row_id)}

    assert (await api.get(url, params=cursor("size", 2**63 - 1))).status_code == 200
    assert (await api.get(url, params=cursor("name", "a"))).status_code == 200
    # A time is any the calendar holds, in any zone: a position before or after every row.
    for far in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2999-01-01"):
        for sort in ("-createdAt", "createdAt"):
            seen = await api.get(url, params=cursor(sort, far))
            assert seen.status_code == 200, (far, seen.text)
    for params in (
        cursor("size", 2**70),
        cursor("-size", -(2**70)),
        cursor("name", "a\ud800"),
        cursor("name", "a\x00"),
        cursor("name", "a", "ast_\x00"),
    ):
        error = assert_error(await api.get(url, params=params), 400, "invalid_request")
        assert error["details"]["field"] == "cursor", params


async def test_a_cursor_time_with_an_offset_is_the_same_instant_on_both_databases(
    api: httpx.AsyncClient,
) -> None:
    """A client may write a cursor's time in any zone: SQLite dropped the offset (12:00+05:00
    read as 12:00 UTC) and paged from another place than PostgreSQL."""
    org = new_id("org")
    url = f"/internal/v1/orgs/{org}/assets"
    made = [(await commit_asset(api, org, size=1, name=f"n{i}", sha256="b" * 64)).json() for i in range(3)]
    scope = [org, None, False, None, None, None, "", False]  # the unfiltered listing's
    middle = made[1]
    at = datetime.fromisoformat(middle["createdAt"]).astimezone(timezone(timedelta(hours=5)))
    cursor = pagination.encode("assets:-createdAt", scope, at.isoformat(), middle["id"])
    page = (await api.get(url, params={"sort": "-createdAt", "cursor": cursor})).json()
    assert [a["name"] for a in page["assets"]] == ["n0"]


async def test_the_delivery_log_and_open_uploads_walk_by_cursor(api: httpx.AsyncClient, engine: Any) -> None:
    """The two other paged listings: the same rows as one offset page, newest first."""
    org = new_id("org")
    hooks = f"/internal/v1/orgs/{org}/webhooks"
    made = await api.post(
        hooks,
        json={"url": "https://93.184.215.7/h", "events": ["asset.created"]},
        headers={ACTOR_HEADER: '{"type": "key", "id": "key_01JD0000000000000000000000"}'},
    )
    assert made.status_code == 201, made.text
    endpoint = made.json()["id"]
    now = datetime.now(UTC)
    with engine.begin() as conn:
        for i in range(5):
            values = {"d": new_id("whd"), "a": new_id("wha"), "e": endpoint, "o": org, "t": now}
            conn.execute(
                text(
                    "INSERT INTO webhook_deliveries (id, endpoint_id, organization_id, event_id, event_type,"
                    " body, status, attempts, retry_until, created_at)"
                    " VALUES (:d, :e, :o, :d, 'asset.created', '{}', 'succeeded', 1, :t, :t)"
                ),
                values,
            )
            conn.execute(
                text(
                    "INSERT INTO webhook_attempts (id, delivery_id, endpoint_id, attempt, result,"
                    " response_status, latency_ms, created_at)"
                    " VALUES (:a, :d, :e, 1, 'succeeded', 200, 5, :t)"
                ),
                {**values, "t": now - timedelta(seconds=i % 3)},  # ties on the time: the id decides
            )
    log = f"{hooks}/{endpoint}/deliveries"
    whole = (await api.get(log)).json()
    assert (whole["total"], whole["offset"], whole["nextCursor"]) == (5, 0, None)
    ids, query = [], {"limit": 2, "total": "false"}
    while True:
        page = (await api.get(log, params=query)).json()
        ids += [a["id"] for a in page["deliveries"]]
        if page["nextCursor"] is None:
            break
        query = {"limit": 2, "cursor": page["nextCursor"]}
    assert ids == [a["id"] for a in whole["deliveries"]]
    assert_error(await api.get(log, params={"cursor": "nope"}), 400, "invalid_request")

    uploads = f"/internal/v1/orgs/{org}/tus"
    for _ in range(3):
        asset = new_id("ast")
        created = await api.post(
            uploads,
            json={
                "id": new_id("tus"),
                "assetId": asset,
                "key": f"{org}/{asset}/m.mp4",
                "name": "m.mp4",
                "mimeType": "video/mp4",
                "uploadMetadata": "filename bS5tcDQ=",
                "length": 10,
                "quotaBytes": 1000,
            },
        )
        assert created.status_code == 201, created.text
    whole = (await api.get(uploads)).json()
    first = (await api.get(uploads, params={"limit": 2, "total": "false"})).json()
    assert first["total"] is None and first["nextCursor"]
    rest = (
        await api.get(uploads, params={"limit": 2, "cursor": first["nextCursor"], "total": "true"})
    ).json()
    assert [u["id"] for u in first["uploads"] + rest["uploads"]] == [u["id"] for u in whole["uploads"]]
    assert (rest["total"], rest["nextCursor"]) == (3, None)
    # Another organization's cursor is refused.
    theirs = f"/internal/v1/orgs/{new_id('org')}/tus"
    assert_error(await api.get(theirs, params={"cursor": first["nextCursor"]}), 400, "invalid_request")
