"""The outbox: an event with every change, in the change's transaction, naming edge's actor;
none for a refused or empty change; kept a while once relayed (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

from coffer_kit.contract.ids import new_id
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.wire import ACTOR_HEADER
from coffer_kit.db import make_engine
from coffer_testkit.testing import commit_asset

pytestmark = pytest.mark.anyio

KEY_ACTOR = {"type": "key", "id": "key_01JD0000000000000000000000", "ip": "203.0.113.9", "requestId": "req_1"}
AS_KEY = {ACTOR_HEADER: json.dumps(KEY_ACTOR)}


async def pending(api: httpx.AsyncClient) -> list[dict[str, Any]]:
    answer = await api.get("/internal/v1/events/audit-pending", params={"limit": 100})
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


async def test_each_change_has_one_event_with_its_actor(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    base = f"/internal/v1/orgs/{org}"
    folder = (await api.post(f"{base}/folders", json={"name": "Docs"}, headers=AS_KEY)).json()
    # Refused: a duplicate name, an unknown parent. No event.
    assert (await api.post(f"{base}/folders", json={"name": "Docs"}, headers=AS_KEY)).status_code == 409
    missing = {"name": "x", "parentId": new_id("fld")}
    assert (await api.post(f"{base}/folders", json=missing, headers=AS_KEY)).status_code == 404
    asset = (await commit_asset(api, org, name="a.txt", folderId=folder["id"])).json()
    url = f"{base}/assets/{asset['id']}"
    renamed = await api.patch(url, json={"name": "b.txt", "visibility": "private"}, headers=AS_KEY)
    assert renamed.status_code == 200
    # Nothing changes: no event.
    assert (await api.patch(url, json={"name": "b.txt"}, headers=AS_KEY)).status_code == 200
    assert (await api.post(f"{url}/tombstone", headers=AS_KEY)).status_code == 200
    assert (await api.delete(f"{base}/folders/{folder['id']}", headers=AS_KEY)).status_code == 200

    events = await pending(api)
    assert [(e["type"], e["data"]["id"]) for e in events] == [
        ("folder.created", folder["id"]),
        ("asset.created", asset["id"]),
        ("asset.updated", asset["id"]),
        ("asset.deleted", asset["id"]),
        ("folder.deleted", folder["id"]),
    ]
    assert {e["organizationId"] for e in events} == {org}
    # The data is the public resource as the API answers it (after the change).
    assert events[1]["data"] == asset
    assert events[2]["data"]["name"] == "b.txt" and events[2]["data"]["publicUrl"] is None
    assert events[2]["changes"] == {"name": "a.txt", "visibility": "public"}
    # commit_asset sends no actor header: the system's; the others are the key's.
    assert events[1]["actor"] == {"type": "system"}
    for event in events[:1] + events[2:]:
        assert event["actor"] == KEY_ACTOR


async def test_relayed_events_leave_the_queue_and_old_ones_go(
    api: httpx.AsyncClient, database_url: str
) -> None:
    org = new_id("org")
    for name in ("a", "b", "c"):
        assert (await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": name})).status_code == 201
    first, second, third = await pending(api)
    assert (await api.post("/internal/v1/events/audited", json={"ids": [first["id"]]})).status_code == 200
    assert [e["id"] for e in await pending(api)] == [second["id"], third["id"]]
    # An event relayed more than the retention (7 days) ago goes at the next relay once the
    # webhook dispatcher has taken it too; one not yet relayed stays, however old.
    engine: Engine = make_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE events SET created_at = :old, dispatched = :yes WHERE id IN (:a, :b)"),
            {"old": utcnow() - timedelta(days=8), "a": first["id"], "b": second["id"], "yes": True},
        )
    assert (await api.post("/internal/v1/events/audited", json={"ids": [third["id"]]})).status_code == 200
    with engine.connect() as connection:
        left = {row[0] for row in connection.execute(text("SELECT id FROM events"))}
    engine.dispose()
    assert left == {second["id"], third["id"]}
    assert [e["id"] for e in await pending(api)] == [second["id"]]
