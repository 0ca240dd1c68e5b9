"""Who may do what to whose keys, members and invitations in the dashboard (issue 23): an owner
acting on another member's things, a member acting on an owner's, and a user of another
organization, each with the exact status. A fresh team per action, so no action sees another's
effect."""

from __future__ import annotations

from typing import Any

import pytest

from .support import Api, join

pytestmark = pytest.mark.anyio


async def _team(api: Api) -> dict[str, Any]:
    owner = await api.register(email="owner@example.com")
    second = await api.register(email="second-owner@example.com")
    member = await api.register(email="member@example.com")
    outsider = await api.register(email="outsider@example.com")
    org = await api.org(owner["token"], "Acme")
    await api.org(outsider["token"], "Elsewhere")
    await join(api, owner, org["id"], second, role="owner")
    await join(api, owner, org["id"], member)
    keys = f"/orgs/{org['id']}/keys"
    made = {
        who: (await api.call("POST", keys, token=t["token"], json={"kind": "user"})).json()["apiKey"]["id"]
        for who, t in (("owner", owner), ("member", member))
    }
    org_key = (await api.call("POST", keys, token=owner["token"], json={"kind": "organization"})).json()
    invite = await api.call(
        "POST", f"/orgs/{org['id']}/invitations", token=second["token"], json={"email": "new@example.com"}
    )
    return {
        "org": org["id"],
        "tokens": {"owner": owner["token"], "member": member["token"], "outsider": outsider["token"]},
        "users": {"owner": owner["user"]["id"], "member": member["user"]["id"]},
        "keys": {**made, "organization": org_key["apiKey"]["id"]},
        "invitation": invite.json()["invitation"]["id"],
    }


# (who acts, what, on whose thing) -> status. "theirs" is the other person of the pair.
ACTIONS: list[tuple[str, str, str, int]] = [
    # An owner acting on a member's things.
    ("owner", "rotate key", "member", 403),
    ("owner", "delete key", "member", 403),
    ("owner", "rotate key", "organization", 201),
    ("owner", "delete key", "organization", 200),
    ("owner", "change role", "member", 200),
    ("owner", "remove", "member", 200),
    ("owner", "revoke invitation", "another owner's", 200),
    ("owner", "renew invitation", "another owner's", 201),
    # A member acting on an owner's things.
    ("member", "rotate key", "owner", 404),
    ("member", "delete key", "owner", 404),
    ("member", "rotate key", "organization", 403),
    ("member", "delete key", "organization", 403),
    ("member", "change role", "owner", 403),
    ("member", "remove", "owner", 403),
    ("member", "revoke invitation", "another owner's", 403),
    ("member", "renew invitation", "another owner's", 403),
    # A user of another organization: nothing here exists for them.
    ("outsider", "rotate key", "member", 404),
    ("outsider", "delete key", "organization", 404),
    ("outsider", "change role", "member", 404),
    ("outsider", "remove", "member", 404),
    ("outsider", "revoke invitation", "another owner's", 404),
    ("outsider", "renew invitation", "another owner's", 404),
]


async def _act(api: Api, team: dict[str, Any], who: str, action: str, whose: str) -> int:
    org, token = team["org"], team["tokens"][who]
    if action in ("rotate key", "delete key"):
        path = f"/orgs/{org}/keys/{team['keys'][whose]}"
        if action == "rotate key":
            rotated = await api.call("POST", f"{path}/rotate", token=token, json={"graceSeconds": 0})
            return rotated.status_code
        return (await api.call("DELETE", path, token=token)).status_code
    if action in ("change role", "remove"):
        path = f"/orgs/{org}/members/{team['users'][whose]}"
        if action == "change role":
            return (await api.call("PATCH", path, token=token, json={"role": "owner"})).status_code
        return (await api.call("DELETE", path, token=token)).status_code
    path = f"/orgs/{org}/invitations/{team['invitation']}"
    if action == "renew invitation":
        return (await api.call("POST", f"{path}/renew", token=token)).status_code
    return (await api.call("DELETE", path, token=token)).status_code


@pytest.mark.parametrize(("who", "action", "whose", "status"), ACTIONS)
async def test_who_may_act_on_whose_keys_members_and_invitations(
    api: Api, who: str, action: str, whose: str, status: int
) -> None:
    team = await _team(api)
    assert await _act(api, team, who, action, whose) == status
