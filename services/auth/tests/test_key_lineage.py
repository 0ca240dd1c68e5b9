"""What a key's makers bound: the keys an owner's personal key made end with that owner's
authority (removed, left, demoted), the upload tokens of a removed member's earlier keys stay
ended when they come back, and no key takes over the key that made it."""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from coffer_auth import cli
from coffer_auth.config import Settings
from coffer_auth.models import AuditEvent
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.wire import Principal
from coffer_testkit.testing import assert_error

from .support import Api, join
from .test_keys import _resolve

pytestmark = pytest.mark.anyio


async def _owners(api: Api) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """An organization with two owners (so either can go), the second's own organization aside."""
    first = await api.register(email="first@example.com")
    org = await api.org(first["token"], "Acme")
    second = await api.register(email="second@example.com")
    await join(api, first, org["id"], second, role="owner")
    return first, second, org


async def _personal(api: Api, who: dict[str, Any], org: dict[str, Any]) -> tuple[str, str]:
    made = await api.call("POST", f"/orgs/{org['id']}/keys", token=who["token"], json={"kind": "user"})
    assert made.status_code == 201, made.text
    return made.json()["key"], made.json()["apiKey"]["id"]


async def _made_by(api: Api, org: dict[str, Any], maker_id: str, **body: Any) -> tuple[str, str]:
    """A key made through the key API by the key ``maker_id``."""
    made = await api.call(
        "POST", f"/orgs/{org['id']}/api-keys", headers={"x-caller-key-id": maker_id}, json=body
    )
    assert made.status_code == 201, made.text
    return made.json()["key"], made.json()["apiKey"]["id"]


def _refused(engine: Engine, secret: str, org_id: str) -> int | None:
    found = _resolve(engine, secret, org_id)
    return found.status if isinstance(found, CofferError) else None


def _operator(settings: Settings, capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli.main(list(argv), settings=settings) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize("how", ["removed", "left", "operator", "demoted"])
async def test_an_owners_personal_key_takes_the_organization_keys_it_made_when_the_owner_goes(
    api: Api, engine: Engine, settings: Settings, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """An organization key made by an owner's personal key kept every right (keys, upload
    tokens) after that owner was removed, left or was demoted: it now ends with their
    authority, and so do the keys it made; the owner's keys elsewhere and the organization's
    other keys act on."""
    first, second, org = await _owners(api)
    own = await api.org(second["token"], "Second's own")
    personal_secret, personal = await _personal(api, second, org)
    child_secret, child = await _made_by(api, org, personal, kind="organization", name="ci")
    grandchild_secret, grandchild = await _made_by(api, org, child, name="ci-cdn")
    elsewhere_secret, _ = await _made_by(api, own, personal, kind="organization", name="own ci")
    by_first_secret, _ = await _made_by(
        api, org, (await _personal(api, first, org))[1], kind="organization", name="first's"
    )
    dashboard = await api.call(
        "POST", f"/orgs/{org['id']}/keys", token=first["token"], json={"kind": "organization"}
    )
    assert isinstance(_resolve(engine, child_secret), Principal)

    if how == "operator":
        _operator(settings, capsys, "remove-member", "--org", org["id"], "--user", second["user"]["id"])
    else:
        method, by, body = {
            "removed": ("DELETE", first, None),
            "left": ("DELETE", second, None),
            "demoted": ("PATCH", first, {"role": "member"}),
        }[how]
        member = f"/orgs/{org['id']}/members/{second['user']['id']}"
        r = await api.call(method, member, token=by["token"], json=body)
        assert r.status_code == 200, r.text

    assert _refused(engine, child_secret, org["id"]) == 401
    assert _refused(engine, grandchild_secret, org["id"]) == 401
    refused = await api.call(
        "POST", f"/orgs/{org['id']}/api-keys", headers={"x-caller-key-id": child}, json={"name": "x"}
    )
    assert_error(refused, 401, "unauthorized")
    # What the owner's authority did not make acts on: their key in their own organization
    # and what it made there, another owner's keys, the dashboard's keys.
    assert _refused(engine, elsewhere_secret, own["id"]) is None
    assert _refused(engine, personal_secret, own["id"]) is None
    assert _refused(engine, by_first_secret, org["id"]) is None
    assert _refused(engine, dashboard.json()["key"], org["id"]) is None
    if how == "demoted":  # still a member: their own key acts here, as a member's
        assert _refused(engine, personal_secret, org["id"]) is None
    with Session(engine) as s:
        deleted = s.exec(select(AuditEvent).where(AuditEvent.action == "key.deleted")).all()
    assert {e.target_id: e.details and e.details.get("parentKeyId") for e in deleted} == {
        child: None,
        grandchild: child,
    }
    assert all(e.details and e.details["makerNoLongerOwner"] for e in deleted)


async def test_the_keys_an_owner_made_revoke_their_signed_urls_when_the_owner_goes(api: Api) -> None:
    _, second, org = await _owners(api)
    _, personal = await _personal(api, second, org)
    _, child = await _made_by(api, org, personal, kind="organization")
    r = await api.call("DELETE", f"/orgs/{org['id']}/members/{second['user']['id']}", token=second["token"])
    assert r.status_code == 200, r.text
    queued = {
        (q["organizationId"], q["authority"])
        for q in (await api.call("GET", "/grant-revocations")).json()["revocations"]
    }
    assert (org["id"], f"key:{child}") in queued


async def test_a_token_of_a_rotated_personal_key_stays_ended_when_its_member_comes_back(api: Api) -> None:
    """Removal deleted the tokens of the member's current personal keys only: one minted before
    a rotation (which follows the rotation to the new key) acted again once they were back."""
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"], "Acme")
    member = await api.register(email="member@example.com")
    await join(api, owner, org["id"], member)
    _, old = await _personal(api, member, org)
    token = "cof_upl_" + secrets.token_hex(16)
    token_hash = hashlib.sha256(token.encode()).hexdigest()
    minted = await api.call(
        "POST",
        f"/orgs/{org['id']}/upload-tokens",
        json={"tokenHash": token_hash, "keyId": old, "maxBytes": 10, "expiresIn": 3600},
    )
    assert minted.status_code == 201, minted.text
    rotated = await api.call(
        "POST", f"/orgs/{org['id']}/keys/{old}/rotate", token=member["token"], json={"graceSeconds": 0}
    )
    assert rotated.status_code == 201, rotated.text
    grant = {"x-token-hash": token_hash}
    assert (await api.call("GET", "/upload-tokens/grant", headers=grant)).status_code == 200
    r = await api.call("DELETE", f"/orgs/{org['id']}/members/{member['user']['id']}", token=owner["token"])
    assert r.status_code == 200, r.text
    await join(api, owner, org["id"], member)
    assert_error(await api.call("GET", "/upload-tokens/grant", headers=grant), 401, "unauthorized")


@pytest.mark.parametrize("action", ["rotate", "delete"])
async def test_a_key_cannot_rotate_or_delete_the_keys_that_made_it(
    api: Api, engine: Engine, action: str
) -> None:
    """A key as wide as its maker rotated it without grace: the maker's holder was locked out and
    the child's held a maker-equivalent key made by nobody, which outlived the child."""
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"], "Acme")
    made = await api.call(
        "POST", f"/orgs/{org['id']}/keys", token=owner["token"], json={"kind": "organization"}
    )
    maker_secret, maker = made.json()["key"], made.json()["apiKey"]["id"]
    _, child = await _made_by(api, org, maker, name="child")
    _, grandchild = await _made_by(api, org, child, name="grandchild")
    keys = f"/orgs/{org['id']}/api-keys"
    for caller, target in ((child, maker), (grandchild, maker), (grandchild, child)):
        headers = {"x-caller-key-id": caller}
        if action == "rotate":
            r = await api.call("POST", f"{keys}/{target}/rotate", headers=headers, json={"graceSeconds": 0})
        else:
            r = await api.call("DELETE", f"{keys}/{target}", headers=headers)
        assert_error(r, 403, "forbidden")
    assert isinstance(_resolve(engine, maker_secret), Principal)
    # Nor the key its maker replaced, in its grace.
    rotated = await api.call(
        "POST", f"/orgs/{org['id']}/keys/{maker}/rotate", token=owner["token"], json={"graceSeconds": 3600}
    )
    assert rotated.status_code == 201, rotated.text
    if action == "rotate":
        r = await api.call(
            "POST", f"{keys}/{maker}/rotate", headers={"x-caller-key-id": child}, json={"graceSeconds": 0}
        )
    else:
        r = await api.call("DELETE", f"{keys}/{maker}", headers={"x-caller-key-id": child})
    assert_error(r, 403, "forbidden")
    # Downwards, and itself, as before.
    headers = {"x-caller-key-id": child}
    if action == "rotate":
        r = await api.call("POST", f"{keys}/{grandchild}/rotate", headers=headers, json={"graceSeconds": 0})
        assert r.status_code == 201, r.text
        r = await api.call("POST", f"{keys}/{child}/rotate", headers=headers, json={"graceSeconds": 0})
        assert r.status_code == 201, r.text
    else:
        assert (await api.call("DELETE", f"{keys}/{grandchild}", headers=headers)).status_code == 200
        assert (await api.call("DELETE", f"{keys}/{child}", headers=headers)).status_code == 200
