"""Organizations and members: creation, rename, roles, removal, leaving, the last-owner guard,
and who may do what (non-members 404, members lacking the role 403)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from coffer_auth.models import AuditEvent, Membership
from coffer_testkit.testing import assert_error

from .support import Api, join

pytestmark = pytest.mark.anyio


def _actions(engine: Engine, org_id: str) -> list[str]:
    with Session(engine) as s:
        rows = s.exec(select(AuditEvent).where(AuditEvent.organization_id == org_id).order_by(AuditEvent.id))
        return [e.action for e in rows]


async def _team(api: Api) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """An owner and a member (who joined through an invitation) of one organization."""
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"], "Acme")
    member = await api.register(email="member@example.com")
    await join(api, owner, org["id"], member)
    return owner, member, org


async def test_create_get_rename(api: Api, engine: Engine) -> None:
    owner, member, org = await _team(api)
    assert org["role"] == "owner" and org["memberCount"] == 1 and org["id"].startswith("org_")
    got = await api.call("GET", f"/orgs/{org['id']}", token=member["token"])
    assert got.json()["role"] == "member" and got.json()["memberCount"] == 2

    assert_error(
        await api.call("POST", "/orgs", token=owner["token"], json={"name": "  "}), 400, "invalid_request"
    )
    assert_error(
        await api.call("POST", "/orgs", token=owner["token"], json={"name": "x" * 256}),
        400,
        "invalid_request",
    )
    assert_error(await api.call("POST", "/orgs", json={"name": "No session"}), 400, "invalid_request")

    renamed = await api.call("PATCH", f"/orgs/{org['id']}", token=owner["token"], json={"name": " Acme Inc "})
    assert renamed.json()["name"] == "Acme Inc"
    forbidden = await api.call("PATCH", f"/orgs/{org['id']}", token=member["token"], json={"name": "Mine"})
    assert_error(forbidden, 403, "forbidden")

    outsider = await api.register()
    for method, path in (
        ("GET", ""),
        ("PATCH", ""),
        ("GET", "/members"),
        ("GET", "/keys"),
        ("GET", "/audit"),
    ):
        r = await api.call(method, f"/orgs/{org['id']}{path}", token=outsider["token"], json={"name": "x"})
        assert_error(r, 404, "not_found")
    assert_error(await api.call("GET", "/orgs/org_missing", token=outsider["token"]), 404, "not_found")
    assert _actions(engine, org["id"]) == [
        "org.created",
        "member.invited",
        "invitation.accepted",
        "org.renamed",
    ]

    current = await api.call("GET", "/sessions/current", token=member["token"])
    assert [(o["name"], o["role"]) for o in current.json()["organizations"]] == [("Acme Inc", "member")]


async def test_members_and_roles(api: Api, engine: Engine) -> None:
    owner, member, org = await _team(api)
    listed = await api.call("GET", f"/orgs/{org['id']}/members", token=member["token"])
    assert [(m["email"], m["role"]) for m in listed.json()["members"]] == [
        ("owner@example.com", "owner"),
        ("member@example.com", "member"),
    ]
    path = f"/orgs/{org['id']}/members/{member['user']['id']}"
    assert_error(
        await api.call("PATCH", path, token=member["token"], json={"role": "owner"}), 403, "forbidden"
    )
    assert_error(
        await api.call("PATCH", path, token=owner["token"], json={"role": "admin"}), 400, "invalid_request"
    )
    promoted = await api.call("PATCH", path, token=owner["token"], json={"role": "owner"})
    assert promoted.json()["role"] == "owner"
    missing = await api.call(
        "PATCH", f"/orgs/{org['id']}/members/usr_nope", token=owner["token"], json={"role": "owner"}
    )
    assert_error(missing, 404, "not_found")
    with Session(engine) as s:
        [event] = s.exec(select(AuditEvent).where(AuditEvent.action == "member.role_changed")).all()
    assert event.details == {"from": "member", "to": "owner"}
    assert (event.actor_label, event.target_label, event.ip) == (
        "owner@example.com",
        "member@example.com",
        "203.0.113.7",
    )


@pytest.mark.parametrize("how", ["demote", "remove", "leave"])
async def test_the_last_owner_stays(api: Api, engine: Engine, how: str) -> None:
    owner, member, org = await _team(api)
    me = f"/orgs/{org['id']}/members/{owner['user']['id']}"
    call = ("PATCH", me, {"role": "member"}) if how == "demote" else ("DELETE", me, None)
    before = _actions(engine, org["id"])
    refused = await api.call(call[0], call[1], token=owner["token"], json=call[2])
    error = assert_error(refused, 409, "last_owner")
    assert error["message"].startswith("Make someone else owner first")
    with Session(engine) as s:
        roles = {m.user_id: m.role for m in s.exec(select(Membership))}
    assert roles == {owner["user"]["id"]: "owner", member["user"]["id"]: "member"}
    assert _actions(engine, org["id"]) == before

    # With a second owner, it works.
    promote = f"/orgs/{org['id']}/members/{member['user']['id']}"
    assert (await api.call("PATCH", promote, token=owner["token"], json={"role": "owner"})).status_code == 200
    done = await api.call(call[0], call[1], token=owner["token"], json=call[2])
    assert done.status_code == 200, done.text


async def test_remove_and_leave(api: Api, engine: Engine) -> None:
    owner, member, org = await _team(api)
    other = await api.register(email="other@example.com")
    await join(api, owner, org["id"], other)
    # A member cannot remove someone else, but can leave.
    r = await api.call("DELETE", f"/orgs/{org['id']}/members/{other['user']['id']}", token=member["token"])
    assert_error(r, 403, "forbidden")
    r = await api.call("DELETE", f"/orgs/{org['id']}/members/{member['user']['id']}", token=member["token"])
    assert r.status_code == 200
    assert_error(await api.call("GET", f"/orgs/{org['id']}", token=member["token"]), 404, "not_found")
    r = await api.call("DELETE", f"/orgs/{org['id']}/members/{other['user']['id']}", token=owner["token"])
    assert r.status_code == 200
    assert _actions(engine, org["id"])[-2:] == ["member.left", "member.removed"]


def test_two_owners_demoting_each_other_at_once_leave_one_owner(engine: Engine) -> None:
    """The organization row is locked while owners are counted: of two concurrent demotions
    (each owner demoting the other), exactly one wins."""
    import threading

    from coffer_auth import orgs
    from coffer_auth.audit import OPERATOR
    from coffer_auth.models import Organization, Role, User
    from coffer_kit.contract.errors import CofferError
    from coffer_kit.contract.timeutil import utcnow
    from coffer_kit.db import writer

    with Session(writer(engine)) as s:
        s.add(Organization(id="org_r", name="R", quota_bytes=1, created_at=utcnow()))
        for uid in ("usr_a", "usr_b"):
            s.add(User(id=uid, email=f"{uid}@example.com", password_hash="-", created_at=utcnow()))
        s.flush()
        for uid in ("usr_a", "usr_b"):
            s.add(Membership(organization_id="org_r", user_id=uid, role="owner", created_at=utcnow()))
        s.commit()

    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def demote(user_id: str) -> None:
        barrier.wait()
        with Session(writer(engine)) as s:
            try:
                orgs.change_role(s, OPERATOR, org_id="org_r", user_id=user_id, role=Role.member)
                s.commit()
                outcomes.append("ok")
            except CofferError as exc:
                outcomes.append(exc.code)

    threads = [threading.Thread(target=demote, args=(u,)) for u in ("usr_a", "usr_b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["last_owner", "ok"]
    with Session(engine) as s:
        roles = sorted(
            m.role for m in s.exec(select(Membership).where(Membership.organization_id == "org_r"))
        )
    assert roles == ["member", "owner"]


@pytest.mark.parametrize("settings_overrides", [{"dashboard_max_owned_orgs": 2}])
async def test_one_person_owns_a_bounded_number_of_self_service_organizations(api: Api) -> None:
    """Issue 23: any user could create unlimited organizations, each with 10 GiB."""
    out = await api.register(email="many@example.com")
    made = [await api.call("POST", "/orgs", token=out["token"], json={"name": f"O{i}"}) for i in range(3)]
    assert [m.status_code for m in made] == [201, 201, 409]
    error = assert_error(made[2], 409, "organization_limit")
    assert "You own 2 organizations" in error["message"]
    # Self-service organizations get the self-service quota (1 GiB), not the operator's 10 GiB.
    assert made[0].json()["quotaBytes"] == 1024**3
