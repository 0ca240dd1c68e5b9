"""Issue 23: every change made through the API is in the audit log of the organization it was
made in, naming the key (or upload token) that made it, exactly once, and in no other
organization's log. Changes reach the log through metadata's events and edge's relay."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from coffer_testkit.dashboard import Browser, sign_up


def audit_events(browser: Browser, org_id: str, count: int = 0) -> list[dict[str, Any]]:
    """The file and folder events of the organization's audit log (its JSON Lines export),
    oldest first, once it holds ``count`` of them."""
    deadline = time.monotonic() + 15
    while True:
        lines = browser.http.get(f"/dashboard/o/{org_id}/audit/export.jsonl").text.splitlines()
        events = [e for e in map(json.loads, lines) if e["targetType"] in ("asset", "folder")]
        if len(events) >= count:
            return sorted(events, key=lambda e: (e["createdAt"], e["id"]))
        assert time.monotonic() < deadline, events


def test_api_changes_are_audited_with_the_key_in_their_organization(stack: Any, admin: Any) -> None:
    owner = sign_up(stack.edge_url, "Audited")
    key = admin("create-key", "--org", owner.org_id, "--name", "ci-deploy")
    api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key["key"]}, timeout=60)
    folder = api.post("/api/folders", json={"name": "Reports"}).json()
    asset = api.post("/api/assets", files={"file": ("q3.txt", b"q3")}, data={"folderId": folder["id"]}).json()
    url = f"/api/assets/{asset['id']}"
    assert api.patch(url, json={"name": "q3-final.txt"}).status_code == 200
    assert api.patch(url, json={"folderId": None}).status_code == 200
    assert api.patch(url, json={"visibility": "private"}).status_code == 200
    # A PATCH that changes nothing records nothing; a refused one neither.
    assert api.patch(url, json={"visibility": "private"}).status_code == 200
    assert api.patch(url, json={"name": "a/b"}).status_code == 400
    assert api.patch(f"/api/folders/{folder['id']}", json={"name": "Old reports"}).status_code == 200
    assert api.delete(url).status_code == 200
    assert api.delete(f"/api/folders/{folder['id']}").status_code == 200
    token = api.post("/api/upload-tokens", json={"name": "by-token.txt"}).json()
    by_token = httpx.post(token["url"], files={"file": ("x.txt", b"t")}, timeout=60).json()

    events = audit_events(owner, owner.org_id, 9)
    assert [(e["action"], e["targetId"]) for e in events] == [
        ("folder.created", folder["id"]),
        ("asset.uploaded", asset["id"]),
        ("asset.renamed", asset["id"]),
        ("asset.moved", asset["id"]),
        ("asset.visibility_changed", asset["id"]),
        ("folder.renamed", folder["id"]),
        ("asset.deleted", asset["id"]),
        ("folder.deleted", folder["id"]),
        ("asset.uploaded", by_token["id"]),
    ]
    by_key = {(e["actorType"], e["actorId"], e["actorLabel"]) for e in events[:8]}
    assert by_key == {("key", key["id"], "ci-deploy")}
    assert (events[8]["actorType"], events[8]["actorId"]) == ("token", token["id"])
    assert events[2]["details"] == {"previousName": "q3.txt"}
    assert events[4]["details"] == {"visibility": "private"}
    assert all(e["requestId"] and e["requestId"].startswith("req_") for e in events)
    api.close()


def test_trash_expiry_metadata_and_tags_are_audited(stack: Any, admin: Any) -> None:
    """Issues 47 and 50: the trash's changes, an expiry, metadata and tags, each in the log."""
    owner = sign_up(stack.edge_url, "Audited trash")
    admin("set-trash-retention", "--org", owner.org_id, "--days", "7")
    key = admin("create-key", "--org", owner.org_id, "--name", "ci")
    api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key["key"]}, timeout=60)
    asset = api.post("/api/assets", files={"file": ("m.txt", b"m")}, data={"metadata": '{"a":"1"}'}).json()
    url = f"/api/assets/{asset['id']}"
    changes = {"expiresAt": "2030-01-01T00:00:00Z", "metadata": {"a": None, "b": 2}, "tags": {"add": ["x"]}}
    assert api.patch(url, json=changes).status_code == 200
    assert api.delete(url).status_code == 200
    assert api.post(f"/api/trash/{asset['id']}/restore").status_code == 200
    assert api.delete(url).status_code == 200
    assert api.delete(f"/api/trash/{asset['id']}").status_code == 200

    events = audit_events(owner, owner.org_id, 8)
    assert [e["action"] for e in events] == [
        "asset.uploaded",
        "asset.expiry_changed",
        "asset.metadata_changed",
        "asset.tags_changed",
        "asset.trashed",
        "asset.restored",
        "asset.trashed",
        "asset.purged",
    ]
    assert {e["targetId"] for e in events} == {asset["id"]}
    assert events[1]["details"] == {"expiresAt": "2030-01-01T00:00:00.000Z"}
    assert events[2]["details"] == {"keys": ["a", "b"]}
    assert events[3]["details"] == {"tags": ["x"]}
    assert events[4]["details"]["size"] == 1 and events[4]["details"]["purgeAt"]
    assert {(e["actorType"], e["actorId"]) for e in events} == {("key", key["id"])}
    api.close()


def test_a_personal_key_is_audited_in_the_organization_it_acted_in(stack: Any, admin: Any) -> None:
    """A user in two organizations acts in B with a personal key: B's log has it, A's has not."""
    user = sign_up(stack.edge_url, "First")
    second = admin("create-org", "--name", "Second")
    admin("add-member", "--org", second["id"], "--user", user.email, "--role", "owner")
    key = admin("create-key", "--org", user.org_id, "--user", user.email, "--name", "laptop")
    headers = {"x-api-key": key["key"], "x-organization-id": second["id"]}
    with httpx.Client(base_url=stack.edge_url, headers=headers, timeout=60) as api:
        made = api.post("/api/folders", json={"name": "In B"})
        assert made.status_code == 201, made.text
    events = audit_events(user, second["id"], 1)
    assert [(e["action"], e["targetId"], e["actorId"], e["actorLabel"]) for e in events] == [
        ("folder.created", made.json()["id"], key["id"], "laptop")
    ]
    # Relayed together: B's event is in, so A's would be by now.
    assert audit_events(user, user.org_id) == []


def test_transform_preset_changes_are_audited_with_the_key(stack: Any, admin: Any) -> None:
    """Presets live in blob, outside metadata's events: edge records their changes itself."""
    owner = sign_up(stack.edge_url, "Presets audited")
    key = admin("create-key", "--org", owner.org_id, "--name", "design-system")
    api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key["key"]}, timeout=60)
    assert api.put("/api/transform-presets/card", json={"w": 320, "fmt": "webp"}).status_code == 200
    assert api.delete("/api/transform-presets/card").status_code == 200
    assert api.put("/api/transform-presets/thumb", json={"w": 1}).status_code == 400  # a built-in: refused

    lines = owner.http.get(f"/dashboard/o/{owner.org_id}/audit/export.jsonl").text.splitlines()
    events = sorted(
        (e for e in map(json.loads, lines) if e["targetType"] == "preset"), key=lambda e: e["createdAt"]
    )
    assert [(e["action"], e["targetId"], e["actorId"], e["actorLabel"]) for e in events] == [
        ("preset.updated", "card", key["id"], "design-system"),
        ("preset.deleted", "card", key["id"], "design-system"),
    ]
    assert events[0]["details"]["w"] == 320 and events[0]["details"]["fmt"] == "webp"


def test_a_backlog_past_64_kib_reaches_the_audit_log(stack: Any, admin: Any) -> None:
    """One folder delete of 161 long-named folders makes 161 events in one transaction, about
    100 KiB of JSON in one relay batch: auth refused it (413, its 64 KiB body bound) again and
    again, and no organization's change reached the audit log after it. The relay sends a batch
    in pieces below the bound auth reads that route's body to."""
    owner = sign_up(stack.edge_url, "Many folders")
    other = sign_up(stack.edge_url, "Bystander")
    key = admin("create-key", "--org", owner.org_id, "--name", "bulk")["key"]
    other_key = admin("create-key", "--org", other.org_id, "--name", "one")["key"]
    with (
        httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=60) as api,
        httpx.Client(base_url=stack.edge_url, headers={"x-api-key": other_key}, timeout=60) as theirs,
    ):
        parent = api.post("/api/folders", json={"name": "p"}).json()
        for i in range(160):
            made = api.post("/api/folders", json={"name": f"{i:04d}" + "x" * 200, "parentId": parent["id"]})
            assert made.status_code == 201, made.text
        audit_events(owner, owner.org_id, 161)
        assert api.delete(f"/api/folders/{parent['id']}").status_code == 200
        assert theirs.post("/api/folders", json={"name": "after"}).status_code == 201
    deleted = [e for e in audit_events(owner, owner.org_id, 322) if e["action"] == "folder.deleted"]
    assert len(deleted) == 161
    assert [e["action"] for e in audit_events(other, other.org_id, 1)] == ["folder.created"]
