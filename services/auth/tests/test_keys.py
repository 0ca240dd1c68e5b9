"""API keys from the dashboard: list, create (shown once), delete, rotate with a grace; who may."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from coffer_auth import admin
from coffer_auth.models import AuditEvent
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.limits import MAX_KEYS_PER_ORG
from coffer_kit.contract.wire import Principal
from coffer_testkit.testing import assert_error

from .support import Api, age_session, join

pytestmark = pytest.mark.anyio


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _resolve(engine: Engine, key: str, org: str | None = None) -> Principal | CofferError:
    with Session(engine) as s:
        try:
            return admin.resolve_principal(
                s, key_hash=hashlib.sha256(key.encode()).hexdigest(), organization_id=org
            ).principal
        except CofferError as exc:
            return exc


async def _team(api: Api) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"], "Acme")
    member = await api.register(email="member@example.com")
    await join(api, owner, org["id"], member)
    return owner, member, org


async def test_create_list_delete(api: Api, engine: Engine) -> None:
    owner, member, org = await _team(api)
    keys = f"/orgs/{org['id']}/keys"
    made = await api.call(
        "POST",
        keys,
        token=owner["token"],
        json={"kind": "organization", "name": "ci", "expiresIn": 30 * 86400},
    )
    assert made.status_code == 201, made.text
    secret = made.json()["key"]
    assert re.fullmatch(r"cof_org_[0-9A-Za-z]{32}", secret)
    key = made.json()["apiKey"]
    assert (key["name"], key["kind"], key["prefix"], key["user"]) == ("ci", "organization", secret[:12], None)
    assert key["createdBy"]["email"] == "owner@example.com" and key["lastUsedAt"] is None
    assert _at(key["expiresAt"]) - _at(key["createdAt"]) == timedelta(days=30)
    assert isinstance(_resolve(engine, secret), Principal)

    mine = await api.call("POST", keys, token=member["token"], json={"kind": "user"})
    assert mine.status_code == 201, mine.text
    assert mine.json()["key"].startswith("cof_usr_") and mine.json()["apiKey"]["expiresAt"] is None
    assert mine.json()["apiKey"]["user"]["email"] == "member@example.com"
    theirs = await api.call("POST", keys, token=owner["token"], json={"kind": "user", "name": "laptop"})

    # Members see organization keys and their own personal keys; owners see all.
    def names(r: Any) -> list[tuple[str, str]]:
        return sorted((k["kind"], k["user"]["email"] if k["user"] else "-") for k in r.json()["keys"])

    assert names(await api.call("GET", keys, token=member["token"])) == [
        ("organization", "-"),
        ("user", "member@example.com"),
    ]
    assert len((await api.call("GET", keys, token=owner["token"])).json()["keys"]) == 3
    mine_everywhere = await api.call("GET", "/users/me/keys", token=member["token"])
    assert [(k["id"], k["organizationName"]) for k in mine_everywhere.json()["keys"]] == [
        (mine.json()["apiKey"]["id"], "Acme")
    ]
    # The secret is never listed again.
    for r in (await api.call("GET", keys, token=owner["token"]), mine_everywhere):
        assert secret not in r.text and mine.json()["key"] not in r.text

    # Members cannot make, delete or rotate organization keys, nor touch others' keys.
    assert_error(
        await api.call("POST", keys, token=member["token"], json={"kind": "organization"}), 403, "forbidden"
    )
    assert_error(await api.call("DELETE", f"{keys}/{key['id']}", token=member["token"]), 403, "forbidden")
    r = await api.call("POST", f"{keys}/{key['id']}/rotate", token=member["token"], json={"graceSeconds": 0})
    assert_error(r, 403, "forbidden")
    assert_error(
        await api.call("DELETE", f"{keys}/{theirs.json()['apiKey']['id']}", token=member["token"]),
        404,
        "not_found",
    )
    assert_error(await api.call("DELETE", f"{keys}/key_nope", token=owner["token"]), 404, "not_found")
    assert_error(
        await api.call("POST", keys, token=owner["token"], json={"kind": "organization", "expiresIn": 0}),
        400,
        "invalid_request",
    )
    assert_error(
        await api.call("POST", keys, token=owner["token"], json={"kind": "root"}), 400, "invalid_request"
    )

    # A member deletes their own key; an owner deletes any.
    assert (
        await api.call("DELETE", f"{keys}/{mine.json()['apiKey']['id']}", token=member["token"])
    ).status_code == 200
    assert (await api.call("DELETE", f"{keys}/{key['id']}", token=owner["token"])).status_code == 200
    assert isinstance(_resolve(engine, secret), CofferError)
    with Session(engine) as s:
        events = s.exec(select(AuditEvent).where(AuditEvent.action.in_(["key.created", "key.deleted"]))).all()  # type: ignore[attr-defined]
    deleted = [e for e in events if e.action == "key.deleted" and e.target_id == key["id"]]
    assert deleted[0].details == {
        "kind": "organization",
        "prefix": secret[:12],
        "name": "ci",
        "expiresAt": key["expiresAt"],
        "scopes": ["full"],
        "folderId": None,
        "networks": [],
    }
    assert len(events) == 5


async def test_key_of_another_org_is_not_found(api: Api) -> None:
    owner, _, org = await _team(api)
    other = await api.org(owner["token"], "Other")
    made = await api.call(
        "POST", f"/orgs/{other['id']}/keys", token=owner["token"], json={"kind": "organization"}
    )
    r = await api.call(
        "DELETE", f"/orgs/{org['id']}/keys/{made.json()['apiKey']['id']}", token=owner["token"]
    )
    assert_error(r, 404, "not_found")
    listed = await api.call("GET", f"/orgs/{org['id']}/keys", token=owner["token"])
    assert listed.json()["keys"] == []


@pytest.mark.parametrize("grace", [0, 3600])
async def test_rotate(api: Api, engine: Engine, grace: int) -> None:
    owner, _, org = await _team(api)
    keys = f"/orgs/{org['id']}/keys"
    old = (
        await api.call(
            "POST",
            keys,
            token=owner["token"],
            json={"kind": "organization", "name": "ci", "expiresIn": 86400 * 90},
        )
    ).json()
    rotated = await api.call(
        "POST", f"{keys}/{old['apiKey']['id']}/rotate", token=owner["token"], json={"graceSeconds": grace}
    )
    assert rotated.status_code == 201, rotated.text
    body = rotated.json()
    new = body["apiKey"]
    assert body["key"] != old["key"] and new["name"] == "ci" and new["kind"] == "organization"
    assert _at(new["expiresAt"]) - _at(new["createdAt"]) == timedelta(days=90)  # same lifetime
    assert isinstance(_resolve(engine, body["key"]), Principal)
    old_now = _resolve(engine, old["key"])
    if grace == 0:
        assert body["previous"] is None
        assert isinstance(old_now, CofferError) and old_now.status == 401
    else:
        assert isinstance(old_now, Principal)
        assert _at(body["previous"]["expiresAt"]) - _at(new["createdAt"]) == timedelta(seconds=3600)
    with Session(engine) as s:
        [event] = s.exec(select(AuditEvent).where(AuditEvent.action == "key.rotated")).all()
    assert event.details is not None and event.details["graceSeconds"] == grace
    assert event.details["newKeyId"] == new["id"]
    r = await api.call(
        "POST", f"{keys}/{new['id']}/rotate", token=owner["token"], json={"graceSeconds": 604801}
    )
    assert_error(r, 400, "invalid_request")


async def test_grace_never_extends_a_key(api: Api) -> None:
    owner, _, org = await _team(api)
    keys = f"/orgs/{org['id']}/keys"
    old = (await api.call("POST", keys, token=owner["token"], json={"kind": "user", "expiresIn": 60})).json()
    body = (
        await api.call(
            "POST", f"{keys}/{old['apiKey']['id']}/rotate", token=owner["token"], json={"graceSeconds": 86400}
        )
    ).json()
    assert body["previous"]["expiresAt"] == old["apiKey"]["expiresAt"]
    assert body["apiKey"]["kind"] == "user" and body["apiKey"]["user"]["email"] == "owner@example.com"


async def test_minting_and_rotating_need_the_reauth_window(api: Api, engine: Engine) -> None:
    owner, member, org = await _team(api)
    keys = f"/orgs/{org['id']}/keys"
    made = (await api.call("POST", keys, token=owner["token"], json={"kind": "organization"})).json()
    age_session(engine, owner["session"]["id"], authenticated_at=timedelta(hours=2, seconds=1))
    assert_error(
        await api.call("POST", keys, token=owner["token"], json={"kind": "user"}), 403, "reauth_required"
    )
    r = await api.call(
        "POST", f"{keys}/{made['apiKey']['id']}/rotate", token=owner["token"], json={"graceSeconds": 0}
    )
    assert_error(r, 403, "reauth_required")
    r = await api.call(
        "PATCH",
        f"/orgs/{org['id']}/members/{member['user']['id']}",
        token=owner["token"],
        json={"role": "owner"},
    )
    assert_error(r, 403, "reauth_required")
    r = await api.call("DELETE", f"/orgs/{org['id']}/members/{member['user']['id']}", token=owner["token"])
    assert_error(r, 403, "reauth_required")
    # Deleting a key does not need it.
    assert (
        await api.call("DELETE", f"{keys}/{made['apiKey']['id']}", token=owner["token"])
    ).status_code == 200


async def test_removed_member_keys_stop_for_that_org(api: Api, engine: Engine) -> None:
    owner, member, org = await _team(api)
    key = (
        await api.call("POST", f"/orgs/{org['id']}/keys", token=member["token"], json={"kind": "user"})
    ).json()["key"]
    assert isinstance(_resolve(engine, key), Principal)
    r = await api.call("DELETE", f"/orgs/{org['id']}/members/{member['user']['id']}", token=owner["token"])
    assert r.status_code == 200
    refused = _resolve(engine, key, org["id"])
    assert isinstance(refused, CofferError) and refused.status == 403


async def test_an_owner_cannot_take_over_a_members_personal_key(api: Api, engine: Engine) -> None:
    """Issue 23: an owner of A who rotated a member's personal key was shown a key that acts
    in the member's other organizations, where the owner is not a member."""
    owner, member, org = await _team(api)
    elsewhere = await api.org(member["token"], "Member's own")
    keys = f"/orgs/{org['id']}/keys"
    body = {"kind": "user", "name": "laptop"}
    made = (await api.call("POST", keys, token=member["token"], json=body)).json()
    key_id = made["apiKey"]["id"]

    # The owner sees the key (it can act in A) but can neither rotate nor delete it.
    listed = (await api.call("GET", keys, token=owner["token"])).json()["keys"]
    assert [(k["id"], k["user"]["email"]) for k in listed] == [(key_id, "member@example.com")]
    r = await api.call("POST", f"{keys}/{key_id}/rotate", token=owner["token"], json={"graceSeconds": 0})
    assert_error(r, 403, "forbidden")
    assert "cof_usr_" not in r.text
    assert_error(await api.call("DELETE", f"{keys}/{key_id}", token=owner["token"]), 403, "forbidden")
    # Nor from an organization the owner is not in: 404, as for any organization of others.
    rotate_there = f"/orgs/{elsewhere['id']}/keys/{key_id}/rotate"
    r = await api.call("POST", rotate_there, token=owner["token"], json={"graceSeconds": 0})
    assert_error(r, 404, "not_found")
    principal = _resolve(engine, made["key"], elsewhere["id"])
    assert isinstance(principal, Principal) and principal.key_id == key_id
    with Session(engine) as s:
        assert s.exec(select(AuditEvent).where(AuditEvent.action == "key.rotated")).all() == []

    # Its own user rotates it, from any organization it acts in.
    r = await api.call("POST", rotate_there, token=member["token"], json={"graceSeconds": 0})
    assert r.status_code == 201, r.text
    assert r.json()["apiKey"]["user"]["email"] == "member@example.com"
    assert r.json()["apiKey"]["organizationId"] == org["id"]


async def test_each_organization_lists_the_keys_that_act_in_it_with_their_use_there(
    api: Api, engine: Engine
) -> None:
    owner, member, org = await _team(api)
    elsewhere = await api.org(member["token"], "Member's own")
    made = (
        await api.call("POST", f"/orgs/{org['id']}/keys", token=member["token"], json={"kind": "user"})
    ).json()
    key_id, key_hash = made["apiKey"]["id"], hashlib.sha256(made["key"].encode()).hexdigest()
    with Session(engine) as s:
        used = admin.resolve_principal(s, key_hash=key_hash, organization_id=elsewhere["id"]).last_used_at
        admin.touch_key(s, key_id=key_id, organization_id=elsewhere["id"], last_used_at=used)
        s.commit()

    async def last_used(org_id: str, token: str) -> list[Any]:
        r = await api.call("GET", f"/orgs/{org_id}/keys", token=token)
        return [(k["id"], k["lastUsedAt"]) for k in r.json()["keys"]]

    # Made in A, used only in B: B's page (the member owns B) shows the use, A's does not.
    [(listed, when)] = await last_used(elsewhere["id"], member["token"])
    assert listed == key_id and when is not None
    assert await last_used(org["id"], owner["token"]) == [(key_id, None)]
    with Session(engine) as s:
        assert admin.resolve_principal(s, key_hash=key_hash, organization_id=org["id"]).last_used_at is None


async def test_a_key_lives_at_most_ten_years(api: Api) -> None:
    owner, _, org = await _team(api)
    keys = f"/orgs/{org['id']}/keys"
    far = {"kind": "user", "expiresIn": 3650 * 86400 + 1}
    assert_error(await api.call("POST", keys, token=owner["token"], json=far), 400, "invalid_request")
    r = await api.call("POST", keys, token=owner["token"], json={**far, "expiresIn": 3650 * 86400})
    assert r.status_code == 201, r.text


async def test_the_dashboard_and_the_operator_keep_the_bound_of_keys_too(api: Api, engine: Engine) -> None:
    """An organization's 100 keys are its bound however they are made: the key API (edge's
    tests/api/test_keys.py), the dashboard, and the operator's ``create-key``."""
    owner, _, org = await _team(api)
    keys = f"/orgs/{org['id']}/keys"
    made = [
        (await api.call("POST", keys, token=owner["token"], json={"kind": "user"})).status_code
        for _ in range(MAX_KEYS_PER_ORG)
    ]
    assert made == [201] * MAX_KEYS_PER_ORG
    assert_error(await api.call("POST", keys, token=owner["token"], json={"kind": "user"}), 409, "conflict")
    some = (await api.call("GET", keys, token=owner["token"])).json()["keys"][0]["id"]
    graced = await api.call("POST", f"{keys}/{some}/rotate", token=owner["token"], json={"graceSeconds": 60})
    assert_error(graced, 409, "conflict")
    at_once = await api.call("POST", f"{keys}/{some}/rotate", token=owner["token"], json={"graceSeconds": 0})
    assert at_once.status_code == 201, at_once.text
    with Session(engine) as s, pytest.raises(CofferError) as refused:
        admin.create_key(s, org_id=org["id"], user_id=None, name="ops", expires_in=None)
    assert refused.value.status == 409
    assert len((await api.call("GET", keys, token=owner["token"])).json()["keys"]) == MAX_KEYS_PER_ORG


async def test_keys_of_a_member_who_left_take_no_room(api: Api) -> None:
    """A member's personal keys stay theirs when they leave (hidden here, acting nowhere here):
    they filled the organization's 100 for good, and nobody in it could delete them."""
    owner, member, org = await _team(api)
    keys = f"/orgs/{org['id']}/keys"
    for _ in range(MAX_KEYS_PER_ORG):
        made = await api.call("POST", keys, token=member["token"], json={"kind": "user"})
        assert made.status_code == 201, made.text
    full = await api.call("POST", keys, token=owner["token"], json={"kind": "organization"})
    assert_error(full, 409, "conflict")
    gone = await api.call("DELETE", f"/orgs/{org['id']}/members/{member['user']['id']}", token=owner["token"])
    assert gone.status_code == 200, gone.text
    made = await api.call("POST", keys, token=owner["token"], json={"kind": "organization"})
    assert made.status_code == 201, made.text


async def test_a_key_rotated_from_another_organizations_page_is_audited_in_its_own(api: Api) -> None:
    """A personal key made in A, rotated from B's page: A's log holds the rotation (as it holds
    the key's creation and would hold its deletion), and B's log nothing of A's key."""
    owner, _, org = await _team(api)
    other = (await api.org(owner["token"], "B"))["id"]
    made = await api.call("POST", f"/orgs/{org['id']}/keys", token=owner["token"], json={"kind": "user"})
    key_id = made.json()["apiKey"]["id"]
    rotated = await api.call(
        "POST", f"/orgs/{other}/keys/{key_id}/rotate", token=owner["token"], json={"graceSeconds": 0}
    )
    assert rotated.status_code == 201, rotated.text

    async def rotations(org_id: str) -> list[str]:
        log = (await api.call("GET", f"/orgs/{org_id}/audit", token=owner["token"])).json()
        return [e["targetId"] for e in log["events"] if e["action"] == "key.rotated"]

    assert (await rotations(org["id"]), await rotations(other)) == ([key_id], [])


async def test_a_graced_rotation_counts_in_the_keys_own_organization(api: Api) -> None:
    """A personal key made in A is listed (and rotated) on B's page too: its graced rotation
    adds a key to A, and is refused at A's bound wherever it is asked."""
    owner, _, org = await _team(api)
    other = (await api.org(owner["token"], "B"))["id"]
    keys = f"/orgs/{org['id']}/keys"
    made = [
        (await api.call("POST", keys, token=owner["token"], json={"kind": "user"}))
        for _ in range(MAX_KEYS_PER_ORG)
    ]
    assert {m.status_code for m in made} == {201}
    key_id = made[0].json()["apiKey"]["id"]
    for page in (org["id"], other):
        rotated = await api.call(
            "POST", f"/orgs/{page}/keys/{key_id}/rotate", token=owner["token"], json={"graceSeconds": 60}
        )
        assert_error(rotated, 409, "conflict")
    assert len((await api.call("GET", keys, token=owner["token"])).json()["keys"]) == MAX_KEYS_PER_ORG


async def test_minters_say_until_when_each_key_acts(api: Api) -> None:
    """edge reuses a minter's answer for a few seconds, never past its key's expiry: auth says
    when that is (none for a key without one, or a minter gone)."""
    owner = await api.register()
    org = (await api.org(owner["token"]))["id"]
    made = {}
    for name, expiry in (("lasting", None), ("expiring", 600)):
        body = {"kind": "organization", "name": name, **({"expiresIn": expiry} if expiry else {})}
        answer = await api.call("POST", f"/orgs/{org}/keys", token=owner["token"], json=body)
        assert answer.status_code == 201, answer.text
        made[name] = answer.json()["apiKey"]
    refs = [{"organizationId": org, "keyId": made[name]["id"]} for name in ("lasting", "expiring")]
    refs.append({"organizationId": org, "keyId": "key_gone"})
    answer = (await api.call("POST", "/upload-tokens/minters", json={"minters": refs})).json()
    assert answer["acting"] == [True, True, False]
    assert answer["actingUntil"] == [None, made["expiring"]["expiresAt"], None]
