"""The audit log: read by owners with filters and a cursor, written by edge for file events,
swept after the retention."""

from __future__ import annotations

import logging
from datetime import timedelta

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from coffer_auth.deps import AuthState
from coffer_auth.main import AUDIT_BATCHES_PER_PASS, sweep
from coffer_auth.models import AuditEvent, DashboardSession
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.db import writer
from coffer_kit.state import state_of
from coffer_testkit.testing import assert_error

from .support import Api, age_session, join

pytestmark = pytest.mark.anyio


async def test_read_filter_and_page(api: Api) -> None:
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"], "Acme")
    member = await api.register(email="member@example.com")
    await join(api, owner, org["id"], member)
    for name in ("a", "b", "c"):
        r = await api.call(
            "POST", f"/orgs/{org['id']}/keys", token=owner["token"], json={"kind": "user", "name": name}
        )
        assert r.status_code == 201
    log = f"/orgs/{org['id']}/audit"
    assert_error(await api.call("GET", log, token=member["token"]), 403, "forbidden")

    everything = (await api.call("GET", log, token=owner["token"])).json()
    actions = [e["action"] for e in everything["events"]]
    assert actions == ["key.created"] * 3 + ["invitation.accepted", "member.invited", "org.created"]
    assert everything["nextBefore"] is None
    newest = everything["events"][0]
    assert (newest["actorType"], newest["actorLabel"], newest["ip"], newest["userAgent"]) == (
        "user",
        "owner@example.com",
        "203.0.113.7",
        "pytest",
    )
    assert newest["targetLabel"] == "c" and newest["details"]["kind"] == "user"
    assert newest["requestId"]

    pages: list[str] = []
    before: str | None = None
    while True:
        params = {"limit": 2, **({"before": before} if before else {})}
        page = (await api.call("GET", log, token=owner["token"], params=params)).json()
        pages += [e["action"] for e in page["events"]]
        before = page["nextBefore"]
        if before is None:
            break
        assert "+" not in before and " " not in before  # safe in a query string as is
    assert pages == actions

    keys_only = await api.call("GET", log, token=owner["token"], params={"action": "key."})
    assert len(keys_only.json()["events"]) == 3
    exact = await api.call("GET", log, token=owner["token"], params={"action": "member.invited"})
    assert [e["action"] for e in exact.json()["events"]] == ["member.invited"]
    by_member = await api.call("GET", log, token=owner["token"], params={"actor": "member@example.com"})
    assert [e["action"] for e in by_member.json()["events"]] == ["invitation.accepted"]
    future = (utcnow() + timedelta(hours=1)).isoformat()
    assert (await api.call("GET", log, token=owner["token"], params={"since": future})).json()["events"] == []
    assert (
        len((await api.call("GET", log, token=owner["token"], params={"until": future})).json()["events"])
        == 6
    )
    # Garbage, a time before the year 1 once in UTC, an id past 64 bits (the last two were 500s).
    for before in ("garbage", "0001-01-01T00:00:00+14:00~5", "2020-01-01T00:00:00Z~" + "9" * 26):
        bad = await api.call("GET", log, token=owner["token"], params={"before": before})
        assert assert_error(bad, 400, "invalid_request")["details"]["field"] == "before", before
    assert_error(
        await api.call("GET", log, token=owner["token"], params={"limit": 501}), 400, "invalid_request"
    )


async def test_edge_records_file_events(api: Api) -> None:
    owner = await api.register(email="owner@example.com")
    org = await api.org(owner["token"])
    log = f"/orgs/{org['id']}/audit"
    made = await api.call(
        "POST",
        log,
        token=owner["token"],
        headers={"x-request-id": "req_from_edge"},
        json={
            "action": "asset.uploaded",
            "targetType": "asset",
            "targetId": "ast_1",
            "targetLabel": "a.png",
            "details": {"size": 5},
        },
    )
    assert made.status_code == 201, made.text
    event = made.json()
    assert (event["action"], event["requestId"], event["actorLabel"]) == (
        "asset.uploaded",
        "req_from_edge",
        "owner@example.com",
    )
    assert_error(
        await api.call("POST", log, token=owner["token"], json={"action": "key.deleted"}),
        400,
        "invalid_request",
    )
    outsider = await api.register()
    r = await api.call("POST", log, token=outsider["token"], json={"action": "folder.created"})
    assert_error(r, 404, "not_found")


async def test_sweep_drops_old_events_and_dead_sessions(
    api: Api, client: httpx.AsyncClient, engine: Engine
) -> None:
    owner = await api.register()
    live = await api.register()
    org = await api.org(owner["token"])
    with Session(writer(engine)) as s:
        s.exec(  # type: ignore[call-overload]
            update(AuditEvent)
            .where(col(AuditEvent.action) == "org.created")
            .values(created_at=utcnow() - timedelta(days=366))
        )
        s.commit()
    age_session(engine, owner["session"]["id"], last_seen_at=timedelta(days=2))
    ended, old = sweep(client.app)  # type: ignore[attr-defined]
    assert (ended, old) == (1, 1)
    with Session(engine) as s:
        assert [
            e.action for e in s.exec(select(AuditEvent).where(AuditEvent.organization_id == org["id"]))
        ] == []
        assert [r.id for r in s.exec(select(DashboardSession))] == [live["session"]["id"]]


async def test_long_client_headers_are_cut_not_fatal(api: Api) -> None:
    out = await api.register()
    org = await api.org(out["token"])
    r = await api.call(
        "POST",
        f"/orgs/{org['id']}/audit",
        token=out["token"],
        headers={"x-client-ip": "1" * 300, "x-client-user-agent": "u" * 3000},
        json={"action": "folder.created"},
    )
    assert r.status_code == 201, r.text
    assert (len(r.json()["ip"]), len(r.json()["userAgent"])) == (64, 255)
    login = await api.call(
        "POST",
        "/sessions",
        json={
            "email": out["user"]["email"],
            "password": out["password"],
            "userAgent": "u" * 5000,
            "ip": "2" * 300,
        },
    )
    assert login.status_code == 201, login.text
    assert len(login.json()["session"]["userAgent"]) == 255


@pytest.mark.parametrize("settings_overrides", [{"mode": "production", "dashboard_signup": "open"}])
async def test_no_secret_reaches_the_logs(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    """Session, CSRF, key and invitation secrets, and passwords, never appear in any log record
    (production mode: no mail_not_sent records)."""
    secrets_seen: list[str] = []
    with caplog.at_level(logging.DEBUG):
        owner = await api.register(email="owner@example.com")
        secrets_seen += [owner["token"], owner["csrfToken"], owner["password"]]
        bad = await api.call(
            "POST", "/sessions", json={"email": "owner@example.com", "password": "wrong-one-1"}
        )
        assert bad.status_code == 401
        login = await api.call(
            "POST", "/sessions", json={"email": "owner@example.com", "password": owner["password"]}
        )
        secrets_seen += [login.json()["token"], login.json()["csrfToken"]]
        org = await api.org(owner["token"])
        key = await api.call("POST", f"/orgs/{org['id']}/keys", token=owner["token"], json={"kind": "user"})
        invite = await api.call(
            "POST", f"/orgs/{org['id']}/invitations", token=owner["token"], json={"email": "b@example.com"}
        )
        secrets_seen += [key.json()["key"], invite.json()["token"]]
    logged = caplog.text + "".join(str(vars(r)) for r in caplog.records)
    assert any(getattr(r, "event", None) == "login" for r in caplog.records)
    for secret in secrets_seen:
        assert secret not in logged
    assert "cof_" not in logged


async def test_sweep_is_bounded_per_pass_and_counted(
    api: Api, client: httpx.AsyncClient, engine: Engine
) -> None:
    """Retention (docs/operations.md): a pass deletes at most AUDIT_BATCHES_PER_PASS batches of
    AuthTuning.audit_retention_batch entries, the next passes the rest; each counted by kind."""
    await api.register()  # the app is up (its start-up pass has begun)
    state = state_of(client.app, AuthState)  # type: ignore[attr-defined]
    state.settings.auth_tuning.audit_retention_batch = 3
    old = utcnow() - timedelta(days=state.settings.audit_retention_days + 1)
    with Session(writer(engine)) as s:
        for _ in range(2 * 3 * AUDIT_BATCHES_PER_PASS + 5):
            s.add(AuditEvent(actor_type="system", action="org.created", created_at=old))
        s.add(AuditEvent(actor_type="system", action="org.created", created_at=utcnow()))
        s.commit()

    def pruned() -> float:
        return REGISTRY.get_sample_value("coffer_retention_pruned_total", {"kind": "audit"}) or 0.0

    before = pruned()
    # At least 35 remain whatever the start-up pass took: this pass meets its bound.
    total = sweep(client.app)[1]  # type: ignore[attr-defined]
    assert total == 3 * AUDIT_BATCHES_PER_PASS
    while more := sweep(client.app)[1]:  # type: ignore[attr-defined]
        assert more <= 3 * AUDIT_BATCHES_PER_PASS
        total += more
    with Session(engine) as s:
        left = list(s.exec(select(AuditEvent).where(col(AuditEvent.action) == "org.created")))
    assert len(left) == 1  # the recent one
    assert total >= 3 * AUDIT_BATCHES_PER_PASS + 5 and pruned() - before >= total
