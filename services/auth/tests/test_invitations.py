"""Invitations: a link shown once, single use, bound to an email, with its four states."""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from coffer_auth.models import Invitation
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.db import writer
from coffer_testkit.testing import assert_error

from .support import Api, age_session, join, strong_password

pytestmark = pytest.mark.anyio


def _h(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _expire(engine: Engine, invitation_id: str) -> None:
    with Session(writer(engine)) as s:
        s.exec(  # type: ignore[call-overload]
            update(Invitation)
            .where(col(Invitation.id) == invitation_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
        s.commit()


async def test_invite_accept_and_states(api: Api, engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"], "Acme")
    base = f"/orgs/{org['id']}/invitations"
    with caplog.at_level(logging.INFO, logger="coffer.auth"):
        made = await api.call(
            "POST", base, token=owner["token"], json={"email": "B@Example.com", "role": "owner"}
        )
    assert made.status_code == 201, made.text
    body = made.json()
    token = body["token"]
    assert token.startswith("cof_inv_")
    assert body["url"] == f"https://coffer.test/dashboard/invite/{token}"
    inv = body["invitation"]
    assert (inv["email"], inv["role"], inv["status"]) == ("b@example.com", "owner", "pending")
    assert inv["invitedBy"]["email"] == "owner@example.com"
    # Local mode: the link that a mailer would have sent is logged (and only then).
    [mail] = [r for r in caplog.records if getattr(r, "event", None) == "mail_not_sent"]
    assert mail.url == body["url"]
    with Session(engine) as s:
        stored = s.get(Invitation, inv["id"])
        assert stored is not None and stored.token_hash == _h(token)

    again = await api.call("POST", base, token=owner["token"], json={"email": "b@example.com"})
    assert_error(again, 409, "invitation_pending")
    assert_error(
        await api.call("POST", base, token=owner["token"], json={"email": "nope"}), 400, "invalid_request"
    )
    self_invite = await api.call("POST", base, token=owner["token"], json={"email": "owner@example.com"})
    assert_error(self_invite, 409, "already_member")

    preview = await api.call("GET", f"/invitations/{_h(token)}")
    assert preview.status_code == 200
    assert (preview.json()["organizationName"], preview.json()["email"]) == ("Acme", "b@example.com")
    assert_error(await api.call("GET", f"/invitations/{'0' * 64}"), 404, "not_found")

    wrong = await api.register(email="c@example.com")
    mismatch = await api.call(
        "POST", "/invitations/accept", token=wrong["token"], json={"tokenHash": _h(token)}
    )
    assert (
        assert_error(mismatch, 409, "invitation_email_mismatch")["message"]
        == "This invitation is for b@example.com."
    )

    b = await api.register(email="b@example.com", invitationTokenHash=_h(token))
    accepted = await api.call("POST", "/invitations/accept", token=b["token"], json={"tokenHash": _h(token)})
    assert accepted.status_code == 200, accepted.text
    assert (accepted.json()["id"], accepted.json()["role"]) == (org["id"], "owner")
    used = await api.call("POST", "/invitations/accept", token=b["token"], json={"tokenHash": _h(token)})
    assert assert_error(used, 410, "invitation_gone")["details"]["status"] == "accepted"
    assert assert_error(await api.call("GET", f"/invitations/{_h(token)}"), 410, "invitation_gone")

    listed = (await api.call("GET", base, token=owner["token"])).json()["invitations"]
    assert [(i["status"], i["acceptedBy"]["email"]) for i in listed] == [("accepted", "b@example.com")]
    assert_error(
        await api.call("DELETE", f"{base}/{inv['id']}", token=owner["token"]), 409, "invitation_accepted"
    )
    assert_error(
        await api.call("POST", base, token=owner["token"], json={"email": "b@example.com"}),
        409,
        "already_member",
    )


async def test_expired_revoked_and_renewed(api: Api, engine: Engine) -> None:
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"])
    base = f"/orgs/{org['id']}/invitations"
    first = (await api.call("POST", base, token=owner["token"], json={"email": "b@example.com"})).json()
    _expire(engine, first["invitation"]["id"])
    gone = await api.call("GET", f"/invitations/{_h(first['token'])}")
    assert assert_error(gone, 410, "invitation_gone")["details"]["status"] == "expired"
    listed = (await api.call("GET", base, token=owner["token"])).json()["invitations"]
    assert [i["status"] for i in listed] == ["expired"]

    # An expired invitation does not block a new one; "New link" re-issues.
    renewed = await api.call("POST", f"{base}/{first['invitation']['id']}/renew", token=owner["token"])
    assert renewed.status_code == 201, renewed.text
    second = renewed.json()
    assert second["token"] != first["token"] and second["invitation"]["email"] == "b@example.com"
    assert (await api.call("GET", f"/invitations/{_h(second['token'])}")).status_code == 200

    r = await api.call("DELETE", f"{base}/{second['invitation']['id']}", token=owner["token"])
    assert r.status_code == 200
    assert (
        await api.call("DELETE", f"{base}/{second['invitation']['id']}", token=owner["token"])
    ).status_code == 200
    revoked = await api.call("GET", f"/invitations/{_h(second['token'])}")
    assert assert_error(revoked, 410, "invitation_gone")["details"]["status"] == "revoked"
    statuses = [
        i["status"] for i in (await api.call("GET", base, token=owner["token"])).json()["invitations"]
    ]
    assert statuses == ["revoked", "revoked"]  # the renewed one, and the expired one it replaced

    b = await api.register(email="b@example.com")
    r = await api.call(
        "POST", "/invitations/accept", token=b["token"], json={"tokenHash": _h(second["token"])}
    )
    assert_error(r, 410, "invitation_gone")


async def test_members_cannot_invite(api: Api) -> None:
    owner = await api.register()
    org = await api.org(owner["token"])
    member = await api.register(email="m@example.com")
    made = await api.call(
        "POST", f"/orgs/{org['id']}/invitations", token=owner["token"], json={"email": "m@example.com"}
    )
    await api.call(
        "POST", "/invitations/accept", token=member["token"], json={"tokenHash": _h(made.json()["token"])}
    )
    r = await api.call(
        "POST", f"/orgs/{org['id']}/invitations", token=member["token"], json={"email": "x@example.com"}
    )
    assert_error(r, 403, "forbidden")
    r = await api.call(
        "DELETE", f"/orgs/{org['id']}/invitations/{made.json()['invitation']['id']}", token=member["token"]
    )
    assert_error(r, 403, "forbidden")
    assert (await api.call("GET", f"/orgs/{org['id']}/invitations", token=member["token"])).status_code == 200


@pytest.mark.parametrize("settings_overrides", [{"dashboard_signup": "invite"}])
async def test_invite_only_signup(api: Api) -> None:
    owner_password = strong_password()
    r = await api.call("POST", "/users", json={"email": "a@example.com", "password": owner_password})
    assert_error(r, 403, "signup_closed")


@pytest.mark.parametrize("settings_overrides", [{"dashboard_signup": "invite"}])
async def test_invite_only_signup_with_a_link(api: Api, engine: Engine) -> None:
    from coffer_auth import invitations
    from coffer_auth.audit import OPERATOR
    from coffer_auth.models import Organization, Role

    with Session(writer(engine), expire_on_commit=False) as s:
        org = Organization(id="org_x", name="Acme", quota_bytes=1, created_at=utcnow())
        s.add(org)
        s.flush()
        _, token = invitations.create(
            s,
            OPERATOR,
            org=org,
            email="b@example.com",
            role=Role.member,
            invited_by=None,
            ttl=timedelta(days=1),
        )
        s.commit()
    r = await api.call(
        "POST",
        "/users",
        json={"email": "c@example.com", "password": strong_password(), "invitationTokenHash": _h(token)},
    )
    assert_error(r, 409, "invitation_email_mismatch")
    # The organization's name is guessable context for the password check.
    r = await api.call(
        "POST",
        "/users",
        json={"email": "b@example.com", "password": "acmeacme", "invitationTokenHash": _h(token)},
    )
    assert_error(r, 400, "weak_password")
    b = await api.register(email="b@example.com", invitationTokenHash=_h(token))
    r = await api.call("POST", "/invitations/accept", token=b["token"], json={"tokenHash": _h(token)})
    assert r.status_code == 200 and r.json()["name"] == "Acme"


@pytest.mark.parametrize("settings_overrides", [{"mode": "production", "dashboard_signup": "open"}])
async def test_production_never_logs_links(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    owner = await api.register()
    org = await api.org(owner["token"])
    with caplog.at_level(logging.DEBUG):
        made = await api.call(
            "POST", f"/orgs/{org['id']}/invitations", token=owner["token"], json={"email": "b@example.com"}
        )
    assert made.status_code == 201
    assert made.json()["token"] not in caplog.text
    assert not [r for r in caplog.records if getattr(r, "event", None) == "mail_not_sent"]


@pytest.mark.parametrize("settings_overrides", [{"mode": "production"}])
async def test_production_without_a_signup_mode_is_closed(api: Api) -> None:
    r = await api.call("POST", "/users", json={"email": "a@example.com", "password": strong_password()})
    assert_error(r, 403, "signup_closed")


async def test_an_owners_invitation_and_a_new_link_need_the_reauth_window(api: Api, engine: Engine) -> None:
    """Issue 23: inviting an owner and renewing a link skipped the password prompt that minting
    a key asks for, though each hands out a live link (an owner's: the whole organization)."""
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"])
    base = f"/orgs/{org['id']}/invitations"
    made = await api.call("POST", base, token=owner["token"], json={"email": "m@example.com"})
    assert made.status_code == 201, made.text
    age_session(engine, owner["session"]["id"], authenticated_at=timedelta(hours=2, seconds=1))

    as_owner = {"email": "o@example.com", "role": "owner"}
    assert_error(await api.call("POST", base, token=owner["token"], json=as_owner), 403, "reauth_required")
    renew = f"{base}/{made.json()['invitation']['id']}/renew"
    assert_error(await api.call("POST", renew, token=owner["token"]), 403, "reauth_required")
    # A member's invitation still needs no password; nothing was made by the refusals.
    r = await api.call("POST", base, token=owner["token"], json={"email": "n@example.com"})
    assert r.status_code == 201, r.text
    listed = (await api.call("GET", base, token=owner["token"])).json()["invitations"]
    assert sorted(i["email"] for i in listed) == ["m@example.com", "n@example.com"]


@pytest.mark.parametrize("loses", ["removed", "demoted"])
async def test_an_owners_links_die_with_their_ownership(api: Api, loses: str) -> None:
    """An owner who is removed or demoted can no longer bring anyone in: the links they made
    are revoked (an owner invitation accepted after that made an owner)."""
    first = await api.register()
    org = (await api.org(first["token"]))["id"]
    second = await api.register()
    await join(api, first, org, second, role="owner")
    made = await api.call(
        "POST",
        f"/orgs/{org}/invitations",
        token=second["token"],
        json={"email": "m@example.com", "role": "owner"},
    )
    assert made.status_code == 201, made.text
    by_first = await api.call(
        "POST",
        f"/orgs/{org}/invitations",
        token=first["token"],
        json={"email": "k@example.com", "role": "member"},
    )
    target = f"/orgs/{org}/members/{second['user']['id']}"
    if loses == "removed":
        done = await api.call("DELETE", target, token=first["token"])
    else:
        done = await api.call("PATCH", target, token=first["token"], json={"role": "member"})
    assert done.status_code == 200, done.text
    invited = await api.register(email="m@example.com")
    accepted = await api.call(
        "POST", "/invitations/accept", token=invited["token"], json={"tokenHash": _h(made.json()["token"])}
    )
    assert_error(accepted, 410, "invitation_gone")
    listed = (await api.call("GET", f"/orgs/{org}/invitations", token=first["token"])).json()["invitations"]
    states = {i["email"]: i["status"] for i in listed}
    assert (states["m@example.com"], states["k@example.com"]) == ("revoked", "pending")
    assert by_first.status_code == 201  # (another owner's link lives on)


async def test_a_new_link_never_makes_a_second_pending_invitation(api: Api) -> None:
    owner = await api.register()
    org = (await api.org(owner["token"]))["id"]
    invitations = f"/orgs/{org}/invitations"
    first = await api.call(
        "POST", invitations, token=owner["token"], json={"email": "x@example.com", "role": "owner"}
    )
    old = first.json()["invitation"]["id"]
    assert (await api.call("DELETE", f"{invitations}/{old}", token=owner["token"])).status_code == 200
    again = await api.call(
        "POST", invitations, token=owner["token"], json={"email": "x@example.com", "role": "member"}
    )
    assert again.status_code == 201, again.text
    renewed = await api.call("POST", f"{invitations}/{old}/renew", token=owner["token"])
    assert_error(renewed, 409, "invitation_pending")
    listed = (await api.call("GET", invitations, token=owner["token"])).json()["invitations"]
    assert [(i["role"], i["status"]) for i in listed if i["status"] == "pending"] == [("member", "pending")]
