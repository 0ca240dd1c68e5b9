"""Signed URLs die with their authority: what ends one queues it, per organization, in the same
transaction (coffer_auth.grants), and edge drains the queue (``/internal/v1/grant-revocations``)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from coffer_auth import cli
from coffer_auth.config import Settings
from coffer_testkit.testing import assert_error

from .support import Api, join, strong_password
from .test_keys import _team

pytestmark = pytest.mark.anyio

QUEUE = "/grant-revocations"


async def _queue(api: Api, **params: Any) -> list[dict[str, Any]]:
    r = await api.call("GET", QUEUE, params=params)
    assert r.status_code == 200, r.text
    revocations: list[dict[str, Any]] = r.json()["revocations"]
    return revocations


async def _queued(api: Api) -> set[tuple[str, str]]:
    return {(r["organizationId"], r["authority"]) for r in await _queue(api)}


async def _key(api: Api, who: dict[str, Any], org: dict[str, Any], kind: str = "organization") -> str:
    made = await api.call("POST", f"/orgs/{org['id']}/keys", token=who["token"], json={"kind": kind})
    assert made.status_code == 201, made.text
    key_id: str = made.json()["apiKey"]["id"]
    return key_id


async def _rotate(api: Api, who: dict[str, Any], org: dict[str, Any], key_id: str, grace: int) -> str:
    r = await api.call(
        "POST", f"/orgs/{org['id']}/keys/{key_id}/rotate", token=who["token"], json={"graceSeconds": grace}
    )
    assert r.status_code == 201, r.text
    new_id: str = r.json()["apiKey"]["id"]
    return new_id


async def _delete(api: Api, who: dict[str, Any], org: dict[str, Any], key_id: str) -> None:
    r = await api.call("DELETE", f"/orgs/{org['id']}/keys/{key_id}", token=who["token"])
    assert r.status_code == 200, r.text


def _operator(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli.main(list(argv), settings=settings) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


async def test_a_key_deleted_through_the_key_api_is_queued_for_its_organization(api: Api) -> None:
    owner, _, org = await _team(api)
    caller, doomed = await _key(api, owner, org), await _key(api, owner, org)
    before = int(time.time())
    r = await api.call("DELETE", f"/orgs/{org['id']}/api-keys/{doomed}", headers={"x-caller-key-id": caller})
    assert r.status_code == 200, r.text
    [revocation] = await _queue(api)
    assert revocation["organizationId"] == org["id"] and revocation["authority"] == f"key:{doomed}"
    assert before - 1 <= revocation["revokedAt"] <= int(time.time())
    assert isinstance(revocation["seq"], int)


async def test_a_deleted_key_takes_the_keys_it_made_and_replaced(api: Api) -> None:
    """Rotated twice (the first replaced at once, its row gone; the second in its grace), then
    deleted: the URLs of all three die. A key it made through the key API dies with it."""
    owner, _, org = await _team(api)
    first = await _key(api, owner, org)
    second = await _rotate(api, owner, org, first, grace=0)
    third = await _rotate(api, owner, org, second, grace=3600)
    made = await api.call(
        "POST", f"/orgs/{org['id']}/api-keys", headers={"x-caller-key-id": third}, json={"name": "child"}
    )
    assert made.status_code == 201, made.text
    child = made.json()["apiKey"]["id"]
    assert await _queued(api) == set()  # a rotation ends no authority
    await _delete(api, owner, org, third)
    assert await _queued(api) == {(org["id"], f"key:{k}") for k in (first, second, third, child)}


async def test_a_line_of_rotations_without_grace_is_revoked_whole(api: Api) -> None:
    """Each rotation without grace deletes the old key's row: walking the successors' links
    back stopped at the first row gone, and the first key's week-long URLs outlived the line.
    Each key now keeps the ids of every key it replaced."""
    owner, _, org = await _team(api)
    line = [await _key(api, owner, org)]
    for _ in range(3):
        line.append(await _rotate(api, owner, org, line[-1], grace=0))
    await _delete(api, owner, org, line[-1])
    assert await _queued(api) == {(org["id"], f"key:{k}") for k in line}


async def test_a_personal_key_deleted_is_queued_in_every_organization_of_its_user(api: Api) -> None:
    owner, member, org = await _team(api)
    other = await api.org(owner["token"], "Other")
    await join(api, owner, other["id"], member)
    alone = await api.org(owner["token"], "Alone")  # the member is not in it
    personal = await _key(api, member, org, kind="user")
    await _delete(api, member, other, personal)  # (from another organization's page)
    assert await _queued(api) == {(org["id"], f"key:{personal}"), (other["id"], f"key:{personal}")}
    assert alone["id"] not in {r["organizationId"] for r in await _queue(api)}


async def test_a_removed_member_is_queued_with_their_personal_keys_there_only(api: Api) -> None:
    owner, member, org = await _team(api)
    other = await api.org(owner["token"], "Other")
    await join(api, owner, other["id"], member)
    old = await _key(api, member, org, kind="user")
    personal = await _rotate(api, member, org, old, grace=0)
    org_key = await _key(api, owner, org)  # not the member's: it goes on acting
    user = f"user:{member['user']['id']}"
    r = await api.call("DELETE", f"/orgs/{org['id']}/members/{member['user']['id']}", token=owner["token"])
    assert r.status_code == 200, r.text
    removed = {(org["id"], user), (org["id"], f"key:{personal}"), (org["id"], f"key:{old}")}
    assert await _queued(api) == removed
    assert f"key:{org_key}" not in {a for _, a in removed}
    # Leaving is removal too; the owner stays and queues nothing.
    r = await api.call("DELETE", f"/orgs/{other['id']}/members/{member['user']['id']}", token=member["token"])
    assert r.status_code == 200, r.text
    left = {(other["id"], user), (other["id"], f"key:{personal}"), (other["id"], f"key:{old}")}
    assert await _queued(api) == removed | left


async def test_rotations_and_sign_outs_queue_nothing(api: Api) -> None:
    owner, member, org = await _team(api)
    personal = await _key(api, member, org, kind="user")
    await _rotate(api, member, org, personal, grace=3600)
    await _rotate(api, owner, org, await _key(api, owner, org), grace=0)
    r = await api.call("DELETE", "/sessions/current", token=member["token"])
    assert r.status_code == 200, r.text
    assert await _queue(api) == []


async def test_the_queue_is_oldest_first_and_bounded(api: Api) -> None:
    owner, _, org = await _team(api)
    keys = [await _key(api, owner, org) for _ in range(3)]
    for key in keys:
        await _delete(api, owner, org, key)
    queue = await _queue(api)
    assert [r["authority"] for r in queue] == [f"key:{k}" for k in keys]
    assert [r["seq"] for r in queue] == sorted(r["seq"] for r in queue)
    assert await _queue(api, limit=2) == queue[:2]
    assert await _queue(api, limit=1000) == queue
    for bad in (0, 1001, "many"):
        assert_error(await api.call("GET", QUEUE, params={"limit": bad}), 400, "invalid_request")


async def test_relayed_revocations_leave_the_queue_and_only_they(api: Api) -> None:
    owner, _, org = await _team(api)
    keys = [await _key(api, owner, org) for _ in range(3)]
    for key in keys:
        await _delete(api, owner, org, key)
    first, second, third = await _queue(api)
    acked = [first["seq"], third["seq"], third["seq"] + 1000]  # an unknown seq is ignored
    r = await api.call("POST", f"{QUEUE}/relayed", json={"seqs": acked})
    assert r.status_code == 200 and r.json() == {"deleted": 2}, r.text
    assert await _queue(api) == [second]
    again = await api.call("POST", f"{QUEUE}/relayed", json={"seqs": acked})
    assert again.json() == {"deleted": 0}  # an acknowledgement repeated
    # A seq acknowledged is never handed out again (SQLite too): a late second acknowledgement
    # of it cannot take a revocation queued since.
    await api.call("POST", f"{QUEUE}/relayed", json={"seqs": [second["seq"]]})
    await _delete(api, owner, org, await _key(api, owner, org))
    [later] = await _queue(api)
    assert later["seq"] > third["seq"]


async def test_the_operators_commands_queue_too(
    api: Api, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    org = _operator(settings, capsys, "create-org", "--name", "Acme")
    owner = _operator(
        settings, capsys, "create-user", "--email", "a@example.com", f"--password={strong_password()}"
    )
    member = _operator(
        settings, capsys, "create-user", "--email", "b@example.com", f"--password={strong_password()}"
    )
    _operator(settings, capsys, "add-member", "--org", org["id"], "--user", owner["id"], "--role", "owner")
    _operator(settings, capsys, "add-member", "--org", org["id"], "--user", member["id"])
    key = _operator(settings, capsys, "create-key", "--org", org["id"], "--name", "ci")
    personal = _operator(settings, capsys, "create-key", "--org", org["id"], "--user", member["id"])
    _operator(settings, capsys, "delete-key", key["id"])
    assert await _queued(api) == {(org["id"], f"key:{key['id']}")}
    _operator(settings, capsys, "remove-member", "--org", org["id"], "--user", member["id"])
    assert await _queued(api) == {
        (org["id"], f"key:{key['id']}"),
        (org["id"], f"user:{member['id']}"),
        (org["id"], f"key:{personal['id']}"),
    }
