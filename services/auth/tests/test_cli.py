"""coffer-auth's admin commands: audit events with actor "operator", the last-owner guard,
explicit roles, and the reset, invite and revoke-sessions commands."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from coffer_auth import cli
from coffer_auth.config import Settings
from coffer_auth.models import AuditEvent, Membership
from coffer_testkit.testing import assert_error

from .support import Api, strong_password

pytestmark = pytest.mark.anyio


class Admin:
    def __init__(self, settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
        self.settings = settings
        self.capsys = capsys

    def __call__(self, *argv: str) -> dict[str, Any]:
        rc = cli.main(list(argv), settings=self.settings)
        out, err = self.capsys.readouterr()
        assert rc == 0, err
        result: dict[str, Any] = json.loads(out)
        return result

    def fails(self, *argv: str) -> dict[str, Any]:
        rc = cli.main(list(argv), settings=self.settings)
        out, err = self.capsys.readouterr()
        assert rc == 1 and out == "", (out, err)
        error: dict[str, Any] = json.loads(err)["error"]
        return error


@pytest.fixture
def admin(settings: Settings, capsys: pytest.CaptureFixture[str]) -> Admin:
    return Admin(settings, capsys)


def _events(engine: Engine) -> list[AuditEvent]:
    with Session(engine) as s:
        return list(s.exec(select(AuditEvent).order_by(AuditEvent.id)))  # type: ignore[arg-type]


async def test_operator_commands_are_audited_and_guarded(admin: Admin, engine: Engine) -> None:
    org = admin("create-org", "--name", "Acme")
    a = admin("create-user", "--email", "a@example.com", f"--password={strong_password()}")
    b = admin("create-user", "--email", "b@example.com", f"--password={strong_password()}")
    admin("add-member", "--org", org["id"], "--user", a["id"], "--role", "owner")
    admin("add-member", "--org", org["id"], "--user", "B@example.com")
    # An existing membership is never silently changed.
    again = admin.fails("add-member", "--org", org["id"], "--user", b["id"], "--role", "owner")
    assert again["code"] == "already_member"
    # The last owner cannot be removed or demoted, by the operator either.
    assert admin.fails("remove-member", "--org", org["id"], "--user", a["id"])["code"] == "last_owner"
    assert (
        admin.fails("set-role", "--org", org["id"], "--user", a["id"], "--role", "member")["code"]
        == "last_owner"
    )
    with Session(engine) as s:
        assert {m.user_id: m.role for m in s.exec(select(Membership))} == {
            a["id"]: "owner",
            b["id"]: "member",
        }
    assert admin("set-role", "--org", org["id"], "--user", b["id"], "--role", "owner")["role"] == "owner"
    admin("remove-member", "--org", org["id"], "--user", "a@example.com")
    admin("set-quota", "--org", org["id"], "--quota-bytes", "5")
    # Past the column's 64 bits: an error in the envelope, not the driver's OverflowError.
    for too_big in (str(2**63), "9" * 30):
        assert (
            admin.fails("set-quota", "--org", org["id"], "--quota-bytes", too_big)["code"]
            == "invalid_request"
        )
        assert "quotaBytes" in admin.fails("create-org", "--name", "Big", "--quota-bytes", too_big)["message"]
    key = admin("create-key", "--org", org["id"], "--name", "ci")
    admin("delete-key", key["id"])

    events = _events(engine)
    assert {(e.actor_type, e.actor_label) for e in events} == {("operator", "operator")}
    assert [e.action for e in events] == [
        "org.created",
        "user.registered",
        "user.registered",
        "member.added",
        "member.added",
        "member.role_changed",
        "member.removed",
        "org.quota_changed",
        "key.created",
        "key.deleted",
    ]
    assert events[7].details == {"from": 10 * 1024**3, "to": 5}
    assert key["key"] not in json.dumps([e.details for e in events])


async def test_reset_password(admin: Admin, api: Api) -> None:
    user = await api.register(email="a@example.com")
    out = admin("reset-password", "--email", "A@example.com")
    prefix = "https://coffer.test/dashboard/reset/"
    assert out["url"].startswith(prefix + "cof_rst_")
    token = out["url"].removeprefix(prefix)
    expires = datetime.fromisoformat(out["expiresAt"].replace("Z", "+00:00"))
    assert 3590 < (expires - datetime.now(expires.tzinfo)).total_seconds() <= 3600
    new = strong_password()
    h = hashlib.sha256(token.encode()).hexdigest()
    done = await api.call("POST", "/password-resets/consume", json={"tokenHash": h, "password": new})
    assert done.status_code == 200, done.text
    assert_error(await api.call("GET", "/sessions/current", token=user["token"]), 401, "unauthorized")
    assert (
        await api.call("POST", "/sessions", json={"email": "a@example.com", "password": new})
    ).status_code == 201
    assert admin.fails("reset-password", "--email", "nobody@example.com")["code"] == "not_found"


async def test_create_invite_and_revoke_sessions(admin: Admin, api: Api, engine: Engine) -> None:
    org = admin("create-org", "--name", "Acme")
    out = admin("create-invite", "--org", org["id"], "--email", "b@example.com", "--role", "owner")
    prefix = "https://coffer.test/dashboard/invite/"
    token = out["url"].removeprefix(prefix)
    assert token.startswith("cof_inv_") and out["role"] == "owner"
    b = await api.register(email="b@example.com")
    h = hashlib.sha256(token.encode()).hexdigest()
    accepted = await api.call("POST", "/invitations/accept", token=b["token"], json={"tokenHash": h})
    assert accepted.status_code == 200 and accepted.json()["role"] == "owner"
    assert (
        admin.fails("create-invite", "--org", "org_nope", "--email", "x@example.com")["code"] == "not_found"
    )

    second = await api.call("POST", "/sessions", json={"email": "b@example.com", "password": b["password"]})
    assert admin("revoke-sessions", "--user", "b@example.com") == {"userId": b["user"]["id"], "revoked": 2}
    for token in (b["token"], second.json()["token"]):
        assert_error(await api.call("GET", "/sessions/current", token=token), 401, "unauthorized")
    assert _events(engine)[-1].action == "user.sessions_revoked"
