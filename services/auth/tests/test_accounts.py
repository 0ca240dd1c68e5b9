"""Registration, sign-in, throttling, sessions, re-authentication, password change and reset."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from coffer_auth import devices, passwords, sessions
from coffer_auth.accounts import create_reset
from coffer_auth.config import Settings
from coffer_auth.models import AuditEvent, DashboardSession, LoginThrottle, PasswordReset, User
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.db import writer
from coffer_testkit.testing import assert_error

from .support import Api, age_session, session_hash, strong_password

pytestmark = pytest.mark.anyio


def _events(engine: Engine, action: str) -> list[AuditEvent]:
    with Session(engine) as s:
        return list(s.exec(select(AuditEvent).where(AuditEvent.action == action)))


async def test_register_opens_a_session_and_stores_only_hashes(api: Api, engine: Engine) -> None:
    out = await api.register(email="  Ada@Example.COM ")
    token = out["token"]
    assert token.startswith("cof_ses_") and len(token) == len("cof_ses_") + 43
    assert out["user"]["email"] == "ada@example.com"
    assert out["csrfToken"] and out["session"]["current"] is True
    with Session(engine) as s:
        user = s.exec(select(User)).one()
        row = s.exec(select(DashboardSession)).one()
    assert user.password_hash.startswith("$argon2id$")
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in {str(v) for v in row.model_dump().values()}
    [event] = _events(engine, "user.registered")
    assert (event.actor_label, event.ip, event.user_agent) == ("ada@example.com", "203.0.113.7", "pytest")

    me = await api.call("GET", "/sessions/current", token=token)
    assert me.status_code == 200, me.text
    body = me.json()
    assert body["user"]["id"] == out["user"]["id"] and body["csrfToken"] == out["csrfToken"]
    assert body["organizations"] == [] and body["organization"] is None
    assert body["user"]["emailVerifiedAt"] is None


async def test_register_refusals(api: Api) -> None:
    await api.register(email="taken@example.com")
    r = await api.call("POST", "/users", json={"email": "TAKEN@example.com", "password": strong_password()})
    assert_error(r, 409, "email_taken")
    r = await api.call("POST", "/users", json={"email": "no-at-sign", "password": strong_password()})
    assert_error(r, 400, "invalid_request")
    r = await api.call("POST", "/users", json={"email": "a@example.com", "password": "short"})
    assert_error(r, 400, "invalid_request")
    r = await api.call("POST", "/users", json={"email": "a@example.com", "password": "x" * 1025})
    assert_error(r, 400, "invalid_request")
    r = await api.call("POST", "/users", json={"email": "a@example.com", "password": "password1"})
    error = assert_error(r, 400, "weak_password")
    assert error["details"]["score"] < 2 and error["details"]["warning"] == "This is a very common password."
    # The email and "coffer" count as guessable words.
    r = await api.call("POST", "/users", json={"email": "zanzibar@example.com", "password": "zanzibar2024"})
    assert_error(r, 400, "weak_password")
    r = await api.call("POST", "/users", json={"email": "b@example.com", "password": "coffercoffer"})
    assert_error(r, 400, "weak_password")


@pytest.mark.parametrize("settings_overrides", [{"dashboard_signup": "closed"}])
async def test_signup_closed(api: Api) -> None:
    r = await api.call("POST", "/users", json={"email": "a@example.com", "password": strong_password()})
    assert_error(r, 403, "signup_closed")


async def test_an_email_lengthened_by_lower_casing_is_a_wrong_login(api: Api) -> None:
    """200 × "İ" is 205 characters, within the request's 320, and 405 once lower-cased: no
    account can have it, and the throttle's row could not hold it (500 on PostgreSQL)."""
    email = "\u0130" * 200 + "@example.com"
    assert len(email) <= 320 < len(email.lower())
    answer = await api.call("POST", "/sessions", json={"email": email, "password": strong_password()})
    assert assert_error(answer, 401, "unauthorized")["message"] == "Wrong email or password."


async def test_login_is_uniform_and_makes_a_new_session_each_time(api: Api) -> None:
    out = await api.register(email="a@example.com")
    wrong = await api.call(
        "POST", "/sessions", json={"email": "a@example.com", "password": strong_password()}
    )
    unknown = await api.call(
        "POST", "/sessions", json={"email": "nobody@example.com", "password": "whatever1"}
    )
    assert assert_error(wrong, 401, "unauthorized")["message"] == "Wrong email or password."
    assert assert_error(unknown, 401, "unauthorized")["message"] == "Wrong email or password."

    first = await api.call(
        "POST",
        "/sessions",
        json={"email": "A@example.com", "password": out["password"], "ip": "198.51.100.1"},
    )
    assert first.status_code == 201, first.text
    # Signing in again from that browser replaces its session (no fixation).
    second = await api.call(
        "POST",
        "/sessions",
        json={"email": "a@example.com", "password": out["password"], "userAgent": "Firefox"},
        headers={"x-session-hash": session_hash(first.json()["token"])},
    )
    assert second.status_code == 201
    assert second.json()["token"] != first.json()["token"]
    assert second.json()["csrfToken"] != first.json()["csrfToken"]
    gone = await api.call("GET", "/sessions/current", token=first.json()["token"])
    assert_error(gone, 401, "unauthorized")
    live = await api.call("GET", "/sessions/current", token=second.json()["token"])
    assert live.status_code == 200 and live.json()["session"]["userAgent"] == "Firefox"


async def test_a_sign_in_costs_one_verification_even_for_unknown_emails(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = await api.register(email="a@example.com")
    passwords.dummy_hash()
    calls: list[str] = []
    real = passwords.HASHER

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def verify(self, hash: str, password: str) -> bool:
            calls.append("verify")
            return real.verify(hash, password)

        def hash(self, password: str) -> str:
            calls.append("hash")
            return real.hash(password)

    monkeypatch.setattr(passwords, "HASHER", Counting())
    for email, password in (
        ("a@example.com", out["password"]),
        ("a@example.com", "wrong password"),
        ("nobody@example.com", "wrong password"),
    ):
        calls.clear()
        await api.call("POST", "/sessions", json={"email": email, "password": password})
        assert calls == ["verify"], (email, calls)


async def test_hashing_runs_at_most_four_at_once(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    out = await api.register(email="a@example.com")
    real = passwords.HASHER
    running = 0
    peak = 0
    changed = threading.Condition()

    class Slow:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def verify(self, hash: str, password: str) -> bool:
            nonlocal running, peak
            with changed:
                running += 1
                peak = max(peak, running)
                changed.notify_all()
                # Hold the worker thread until the limit is reached (on a loaded machine the
                # requests arrive slowly), then as long as argon2 would: a limiter that let a
                # fifth in would show it in `peak`.
                changed.wait_for(lambda: running >= passwords.HASH_CONCURRENCY, timeout=10)
            time.sleep(0.05)  # stand-in for argon2's 140 ms
            with changed:
                running -= 1
            return real.verify(hash, password)

    monkeypatch.setattr(passwords, "HASHER", Slow())
    # From twelve networks: each attempt is counted before its check (a success clears it),
    # and twelve at once from one network would pass its limit of five.
    bodies = [
        {"email": "a@example.com", "password": out["password"], "ip": f"192.0.2.{n}"} for n in range(12)
    ]
    answers = await asyncio.gather(*(api.call("POST", "/sessions", json=body) for body in bodies))
    assert [a.status_code for a in answers] == [201] * 12
    assert peak == passwords.HASH_CONCURRENCY


def _throttles(engine: Engine) -> list[tuple[str, str, int]]:
    with Session(engine) as s:
        return [(t.email, t.client, t.failures) for t in s.exec(select(LoginThrottle))]


async def test_throttle_after_five_failures_doubles_and_resets(api: Api, engine: Engine) -> None:
    out = await api.register(email="a@example.com")
    bad = {"email": "a@example.com", "password": "not the password", "ip": "192.0.2.7"}
    good = {**bad, "password": out["password"]}
    for _ in range(5):
        assert_error(await api.call("POST", "/sessions", json=bad), 401, "unauthorized")
    refused = await api.call("POST", "/sessions", json=good)
    error = assert_error(refused, 429, "rate_limited")
    assert 25 <= error["details"]["retryAfter"] <= 30
    assert refused.headers["retry-after"] == str(error["details"]["retryAfter"])
    assert error["message"] == f"Too many attempts. Try again in {error['details']['retryAfter']} s."

    def unblock(**values: Any) -> None:
        with Session(writer(engine)) as s:
            s.exec(update(LoginThrottle).values(**values))  # type: ignore[call-overload]
            s.commit()

    unblock(blocked_until=utcnow())
    assert_error(await api.call("POST", "/sessions", json=bad), 401, "unauthorized")
    doubled = assert_error(await api.call("POST", "/sessions", json=bad), 429, "rate_limited")
    assert 55 <= doubled["details"]["retryAfter"] <= 60
    # Counted for the network and, the browser being unknown, for the account (blocking at 20).
    assert sorted(_throttles(engine)) == [("a@example.com", "*", 6), ("a@example.com", "192.0.2.7", 6)]

    # Failures older than the window no longer count; a success resets everything.
    unblock(blocked_until=None, last_failed_at=utcnow() - timedelta(minutes=16))
    assert_error(await api.call("POST", "/sessions", json=bad), 401, "unauthorized")
    assert sorted(_throttles(engine)) == [("a@example.com", "*", 1), ("a@example.com", "192.0.2.7", 1)]
    ok = await api.call("POST", "/sessions", json=good)
    assert ok.status_code == 201
    assert _throttles(engine) == []


async def test_a_guesser_never_locks_the_owner_out_nor_learns_which_emails_exist(api: Api) -> None:
    """Issue 23: twenty wrong passwords an hour from anyone kept a known account refused even
    with its right password, and unknown emails never reached 429 (an enumeration oracle)."""
    out = await api.register(email="owner@example.com")
    answers: dict[str, list[int]] = {}
    for email in ("owner@example.com", "nobody@example.com"):
        guess = {"email": email, "password": "guess-123456", "ip": "198.51.100.66"}
        answers[email] = [(await api.call("POST", "/sessions", json=guess)).status_code for _ in range(20)]
    # Known or not, the guessing client sees the same answers.
    assert answers["owner@example.com"] == answers["nobody@example.com"] == [401] * 5 + [429] * 15
    owner = {"email": "owner@example.com", "password": out["password"], "ip": "203.0.113.5"}
    assert (await api.call("POST", "/sessions", json=owner)).status_code == 201
    # The guesser, even with the right password now, waits out its block.
    guesser = {**owner, "ip": "198.51.100.66"}
    assert_error(await api.call("POST", "/sessions", json=guesser), 429, "rate_limited")


async def test_the_addresses_of_one_ipv6_network_are_one_guesser(api: Api, engine: Engine) -> None:
    """Failures were counted per exact address: 40 addresses of one IPv6 /64, which any one
    host is given, made 200 guesses at one account and none was refused. An IPv6 client now
    counts as its /64 (an IPv4 one, also mapped into IPv6, as its address), so the sixth guess
    from that network waits; another network's owner signs in."""
    out = await api.register(email="a@example.com")
    for n in range(1, 6):
        guess = {"email": "a@example.com", "password": "guess-123456", "ip": f"2001:db8:7:7::{n:x}"}
        assert_error(await api.call("POST", "/sessions", json=guess), 401, "unauthorized")
    sixth = {"email": "a@example.com", "password": "guess-123456", "ip": "2001:db8:7:7:ffff::6"}
    assert_error(await api.call("POST", "/sessions", json=sixth), 429, "rate_limited")
    assert sorted(_throttles(engine)) == [
        ("a@example.com", "*", 5),
        ("a@example.com", "2001:db8:7:7::/64", 5),
    ]
    owner = {"email": "a@example.com", "password": out["password"], "ip": "2001:db8:7:8::1"}
    assert (await api.call("POST", "/sessions", json=owner)).status_code == 201
    assert sessions.client_of("::ffff:192.0.2.7") == sessions.client_of("192.0.2.7") == "192.0.2.7"
    assert sessions.client_of("not an address") == "not an address"


async def test_a_guesser_spread_over_many_networks_waits_and_the_owners_browser_does_not(api: Api) -> None:
    """The throttle counted per network alone: a guesser with a new network for every few
    guesses was never refused. Failures from browsers the account does not know now count for
    the account too: past twenty, every such browser waits, whatever its network. The owner's
    browser, known by the device token of an earlier sign-in, is not refused for them, and a
    made-up token is no way around the wait."""
    out = await api.register(email="a@example.com")
    device = out["deviceToken"]
    assert device.startswith("cof_dev_")
    for n in range(sessions.ACCOUNT_AFTER):
        guess = {"email": "a@example.com", "password": "guess-123456", "ip": f"198.51.{n}.1"}
        assert_error(await api.call("POST", "/sessions", json=guess), 401, "unauthorized")
    right = {"email": "a@example.com", "password": out["password"], "ip": "203.0.113.9"}
    refused = assert_error(await api.call("POST", "/sessions", json=right), 429, "rate_limited")
    assert 25 <= refused["details"]["retryAfter"] <= 30
    forged = {**right, "deviceToken": "cof_dev_" + secrets.token_urlsafe(32)}
    assert_error(await api.call("POST", "/sessions", json=forged), 429, "rate_limited")
    owner = await api.call("POST", "/sessions", json={**right, "deviceToken": device})
    assert owner.status_code == 201, owner.text
    assert owner.json()["deviceToken"] is None  # known: its cookie stays as it is
    # An unknown email is counted the same way: the answers tell no one which emails exist.
    for n in range(sessions.ACCOUNT_AFTER):
        guess = {"email": "nobody@example.com", "password": "guess-123456", "ip": f"198.51.{n}.1"}
        assert_error(await api.call("POST", "/sessions", json=guess), 401, "unauthorized")
    nobody = {"email": "nobody@example.com", "password": "guess-123456", "ip": "203.0.113.9"}
    assert_error(await api.call("POST", "/sessions", json=nobody), 429, "rate_limited")


async def test_a_known_browser_counts_only_its_own_failures(api: Api, engine: Engine) -> None:
    """A known browser's wrong passwords block that browser alone; its token is good for its
    own account only, and a user keeps their 20 most recent browsers."""
    out = await api.register(email="b@example.com")
    device = out["deviceToken"]
    wrong = {"email": "b@example.com", "password": "guess-123456", "ip": "192.0.2.8", "deviceToken": device}
    for _ in range(5):
        assert_error(await api.call("POST", "/sessions", json=wrong), 401, "unauthorized")
    right = {**wrong, "password": out["password"]}
    assert_error(await api.call("POST", "/sessions", json=right), 429, "rate_limited")
    known = "dev:" + hashlib.sha256(device.encode()).hexdigest()[:32]
    assert _throttles(engine) == [("b@example.com", known, 5)]
    # The same network without the token: not blocked by the browser's own count.
    fresh = await api.call("POST", "/sessions", json={**right, "deviceToken": None})
    assert fresh.status_code == 201, fresh.text
    assert fresh.json()["deviceToken"].startswith("cof_dev_") and fresh.json()["deviceToken"] != device
    # Another account's browser is unknown to this one, and is given a token of its own.
    other = await api.register(email="c@example.com")
    theirs = {"email": "c@example.com", "password": other["password"], "deviceToken": device}
    assert (await api.call("POST", "/sessions", json=theirs)).json()["deviceToken"] not in (None, device)
    for _ in range(25):
        assert (await api.call("POST", "/sessions", json={**right, "deviceToken": None})).status_code == 201
    with Session(engine) as s:
        kept = s.exec(select(devices.KnownDevice).where(devices.KnownDevice.user_id == out["user"]["id"]))
        assert len(list(kept)) == devices.MAX_PER_USER


async def test_throttle_is_capped_at_fifteen_minutes(engine: Engine) -> None:
    with Session(writer(engine)) as s:
        blocks = [sessions.record_failure(s, email="X@example.com", client="c") for _ in range(12)]
        s.commit()
    assert blocks[:4] == [None] * 4
    assert blocks[4:9] == [30, 60, 120, 240, 480]
    assert blocks[9:] == [900, 900, 900]
    # 2 ** failures overflowed a timedelta past about 60: a 500, and the failure not counted.
    with Session(writer(engine)) as s:
        assert {sessions.record_failure(s, email="Y@example.com", client="c") for _ in range(100)} == {
            None,
            30,
            60,
            120,
            240,
            480,
            900,
        }
        s.commit()


async def test_guesses_made_at_once_are_all_counted(api: Api, engine: Engine) -> None:
    """The throttle was checked before the password and counted after it: 100 guesses at once
    from 100 networks all passed the check (61 answered 401 and 39 a 500, none 429). Each
    attempt is now counted, its row locked, before its password is checked."""
    await api.register(email="a@example.com")
    guesses = [
        {"email": "a@example.com", "password": "guess-123456", "ip": f"198.51.{n}.1"}
        for n in range(2 * sessions.ACCOUNT_AFTER)
    ]
    answers = await asyncio.gather(*(api.call("POST", "/sessions", json=g) for g in guesses))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [401] * sessions.ACCOUNT_AFTER + [429] * sessions.ACCOUNT_AFTER
    assert ("a@example.com", "*", sessions.ACCOUNT_AFTER) in _throttles(engine)


async def test_sitting_out_the_longest_block_does_not_start_the_count_again(api: Api, engine: Engine) -> None:
    """The count started again 15 minutes after the last failure, the length of the longest
    block: a guesser who sat each one out had 20 fresh guesses every half hour. It now starts
    again only 15 minutes after the block's end; until then each guess waits the longest."""
    await api.register(email="a@example.com")
    for n in range(sessions.ACCOUNT_AFTER):
        guess = {"email": "a@example.com", "password": "guess-123456", "ip": f"198.51.{n}.1"}
        assert_error(await api.call("POST", "/sessions", json=guess), 401, "unauthorized")
    with Session(writer(engine)) as s:  # a 15-minute block from the last failure, just over
        s.exec(
            update(LoginThrottle).values(  # type: ignore[call-overload]
                last_failed_at=utcnow() - timedelta(minutes=16), blocked_until=utcnow() - timedelta(minutes=1)
            )
        )
        s.commit()
    guess = {"email": "a@example.com", "password": "guess-123456", "ip": "198.51.100.1"}
    assert_error(await api.call("POST", "/sessions", json=guess), 401, "unauthorized")
    assert_error(
        await api.call("POST", "/sessions", json={**guess, "ip": "198.51.101.1"}), 429, "rate_limited"
    )
    assert ("a@example.com", "*", sessions.ACCOUNT_AFTER + 1) in _throttles(engine)


async def test_a_new_password_forgets_every_browser_but_the_one_that_set_it(api: Api) -> None:
    """Whoever knew the old password may have signed in, and their browser stayed known: never
    made to wait for a guesser's failures. A password change forgets every known browser and
    makes the one that changed it known afresh."""
    out = await api.register(email="a@example.com")
    old_device, new_password = out["deviceToken"], strong_password()
    changed = await api.call(
        "POST",
        "/users/me/password",
        token=out["token"],
        json={"current": out["password"], "new": new_password},
    )
    assert changed.status_code == 200, changed.text
    new_device = changed.json()["deviceToken"]
    assert new_device.startswith("cof_dev_") and new_device != old_device
    for n in range(sessions.ACCOUNT_AFTER):
        guess = {"email": "a@example.com", "password": "guess-123456", "ip": f"198.51.{n}.1"}
        assert_error(await api.call("POST", "/sessions", json=guess), 401, "unauthorized")
    right = {"email": "a@example.com", "password": new_password, "ip": "203.0.113.9"}
    assert_error(
        await api.call("POST", "/sessions", json={**right, "deviceToken": old_device}), 429, "rate_limited"
    )
    assert (await api.call("POST", "/sessions", json={**right, "deviceToken": new_device})).status_code == 201


@pytest.mark.parametrize(
    ("field", "delta"),
    [("last_seen_at", timedelta(seconds=86401)), ("expires_at", timedelta(days=7, seconds=1))],
)
async def test_idle_and_absolute_timeouts(api: Api, engine: Engine, field: str, delta: timedelta) -> None:
    out = await api.register()
    assert (await api.call("GET", "/sessions/current", token=out["token"])).status_code == 200
    age_session(engine, out["session"]["id"], **{field: delta})
    assert_error(await api.call("GET", "/sessions/current", token=out["token"]), 401, "unauthorized")
    assert_error(await api.call("GET", "/users/me/sessions", token=out["token"]), 401, "unauthorized")


async def test_session_defaults(api: Api) -> None:
    out = await api.register()
    s = out["session"]
    from datetime import datetime

    def at(v: str) -> datetime:
        return datetime.fromisoformat(v.replace("Z", "+00:00"))

    assert at(s["expiresAt"]) - at(s["createdAt"]) == timedelta(seconds=604800)
    assert at(s["idleExpiresAt"]) - at(s["lastSeenAt"]) == timedelta(seconds=86400)
    assert at(s["reauthUntil"]) - at(s["authenticatedAt"]) == timedelta(seconds=7200)


async def test_last_seen_is_written_at_most_once_a_minute(api: Api, engine: Engine) -> None:
    out = await api.register()
    sid = out["session"]["id"]

    def seen() -> Any:
        with Session(engine) as s:
            row = s.get(DashboardSession, sid)
            assert row is not None
            return row.last_seen_at

    before = seen()
    await api.call("GET", "/sessions/current", token=out["token"])
    assert seen() == before
    age_session(engine, sid, last_seen_at=timedelta(seconds=61))
    aged = seen()
    await api.call("GET", "/sessions/current", token=out["token"])
    assert seen() > aged


async def test_current_with_organization(api: Api) -> None:
    a = await api.register()
    b = await api.register()
    org = await api.org(a["token"], "Acme")
    r = await api.call("GET", "/sessions/current", token=a["token"], org=org["id"])
    assert r.status_code == 200
    assert r.json()["organization"]["role"] == "owner"
    assert r.json()["organization"]["quotaBytes"] == 1024**3  # the self-service quota
    assert r.json()["session"]["lastOrgId"] == org["id"]
    assert_error(
        await api.call("GET", "/sessions/current", token=b["token"], org=org["id"]), 404, "not_found"
    )
    assert_error(
        await api.call("GET", "/sessions/current", token=b["token"], org="org_nope"), 404, "not_found"
    )
    # The last organization follows the user to their next session.
    again = await api.call("POST", "/sessions", json={"email": a["user"]["email"], "password": a["password"]})
    assert again.json()["session"]["lastOrgId"] == org["id"]


async def test_unknown_session_and_internal_token(api: Api, client: httpx.AsyncClient) -> None:
    assert_error(await api.call("GET", "/sessions/current", token="cof_ses_nope"), 401, "unauthorized")
    r = await client.get("/internal/v1/sessions/current", headers={"x-coffer-internal-token": "wrong"})
    assert_error(r, 401, "unauthorized")


async def test_reauth_window(api: Api, engine: Engine) -> None:
    out = await api.register()
    org = await api.org(out["token"])
    age_session(engine, out["session"]["id"], authenticated_at=timedelta(seconds=7201))
    refused = await api.call(
        "POST", f"/orgs/{org['id']}/keys", token=out["token"], json={"kind": "organization"}
    )
    assert_error(refused, 403, "reauth_required")
    wrong = await api.call(
        "POST", "/sessions/current/reauth", token=out["token"], json={"password": "nope nope"}
    )
    assert_error(wrong, 400, "wrong_password")
    again = await api.call(
        "POST", "/sessions/current/reauth", token=out["token"], json={"password": out["password"]}
    )
    assert again.status_code == 201, again.text
    new = again.json()
    assert new["token"] != out["token"] and new["session"]["lastOrgId"] == org["id"]
    assert_error(await api.call("GET", "/sessions/current", token=out["token"]), 401, "unauthorized")
    made = await api.call(
        "POST", f"/orgs/{org['id']}/keys", token=new["token"], json={"kind": "organization"}
    )
    assert made.status_code == 201, made.text


async def test_logout_and_session_management(api: Api, engine: Engine) -> None:
    out = await api.register(email="a@example.com")
    login = {"email": "a@example.com", "password": out["password"]}
    others = [(await api.call("POST", "/sessions", json=login)).json() for _ in range(3)]
    listed = await api.call("GET", "/users/me/sessions", token=out["token"])
    assert len(listed.json()["sessions"]) == 4
    assert [s["current"] for s in listed.json()["sessions"]].count(True) == 1

    r = await api.call("DELETE", f"/users/me/sessions/{others[0]['session']['id']}", token=out["token"])
    assert r.status_code == 200, r.text
    assert_error(await api.call("GET", "/sessions/current", token=others[0]["token"]), 401, "unauthorized")
    # Someone else's session id is not found, not revoked.
    b = await api.register()
    r = await api.call("DELETE", f"/users/me/sessions/{b['session']['id']}", token=out["token"])
    assert_error(r, 404, "not_found")

    assert_error(await api.call("DELETE", "/users/me/sessions", token=out["token"]), 400, "invalid_request")
    r = await api.call("DELETE", "/users/me/sessions?others=true", token=out["token"])
    assert r.json() == {"revoked": 2}
    for other in others[1:]:
        assert_error(await api.call("GET", "/sessions/current", token=other["token"]), 401, "unauthorized")
    assert len(_events(engine, "user.sessions_revoked")) == 2

    assert (await api.call("DELETE", "/sessions/current", token=out["token"])).json() == {"success": True}
    assert_error(await api.call("GET", "/sessions/current", token=out["token"]), 401, "unauthorized")
    assert (await api.call("DELETE", "/sessions/current", token=out["token"])).status_code == 200


async def test_revoking_sessions_needs_the_reauth_window(api: Api, engine: Engine) -> None:
    out = await api.register()
    age_session(engine, out["session"]["id"], authenticated_at=timedelta(hours=3))
    r = await api.call("DELETE", "/users/me/sessions?others=true", token=out["token"])
    assert_error(r, 403, "reauth_required")


async def test_password_change(api: Api, engine: Engine) -> None:
    out = await api.register(email="a@example.com")
    other = (
        await api.call("POST", "/sessions", json={"email": "a@example.com", "password": out["password"]})
    ).json()
    new = strong_password()
    wrong = await api.call(
        "POST", "/users/me/password", token=out["token"], json={"current": "not it at all", "new": new}
    )
    assert_error(wrong, 400, "wrong_password")
    weak = await api.call(
        "POST",
        "/users/me/password",
        token=out["token"],
        json={"current": out["password"], "new": "password1"},
    )
    assert_error(weak, 400, "weak_password")
    ok = await api.call(
        "POST", "/users/me/password", token=out["token"], json={"current": out["password"], "new": new}
    )
    assert ok.status_code == 200, ok.text
    changed = ok.json()
    assert changed["revoked"] == 1
    # It re-authenticated: a new session (new token and CSRF token) replaced the one it came in.
    assert changed["token"] != out["token"] and changed["csrfToken"] != out["csrfToken"]
    assert changed["user"]["email"] == "a@example.com"
    assert_error(await api.call("GET", "/sessions/current", token=other["token"]), 401, "unauthorized")
    assert_error(await api.call("GET", "/sessions/current", token=out["token"]), 401, "unauthorized")
    assert (await api.call("GET", "/sessions/current", token=changed["token"])).status_code == 200
    old_login = await api.call(
        "POST", "/sessions", json={"email": "a@example.com", "password": out["password"]}
    )
    assert_error(old_login, 401, "unauthorized")
    assert (
        await api.call("POST", "/sessions", json={"email": "a@example.com", "password": new})
    ).status_code == 201
    [event] = _events(engine, "user.password_changed")
    assert event.details == {"sessionsRevoked": 1}
    with Session(engine) as s:
        assert s.exec(select(User)).one().password_changed_at is not None

    third = (await api.call("POST", "/sessions", json={"email": "a@example.com", "password": new})).json()
    keep = await api.call(
        "POST",
        "/users/me/password",
        token=changed["token"],
        json={"current": new, "new": strong_password(), "revokeOthers": False},
    )
    assert keep.json()["revoked"] == 0
    assert (await api.call("GET", "/sessions/current", token=third["token"])).status_code == 200


async def test_password_reset(api: Api, engine: Engine) -> None:
    out = await api.register(email="a@example.com")
    with Session(writer(engine), expire_on_commit=False) as s:
        user = s.exec(select(User)).one()
        _, token = create_reset(s, user=user, ttl=timedelta(hours=1), created_by="cli")
        s.commit()
    await api.register(email="b@example.com")  # (a user's new link ends their earlier ones)
    with Session(writer(engine), expire_on_commit=False) as s:
        other = s.exec(select(User).where(User.email == "b@example.com")).one()
        _, expired = create_reset(s, user=other, ttl=timedelta(seconds=-1), created_by="cli")
        s.commit()
    h = hashlib.sha256(token.encode()).hexdigest()
    preview = await api.call("GET", f"/password-resets/{h}")
    assert preview.status_code == 200 and preview.json()["email"] == "a@example.com"
    assert_error(await api.call("GET", f"/password-resets/{'0' * 64}"), 404, "not_found")
    gone = await api.call("GET", f"/password-resets/{hashlib.sha256(expired.encode()).hexdigest()}")
    assert assert_error(gone, 410, "reset_gone")["details"]["status"] == "expired"

    weak = await api.call("POST", "/password-resets/consume", json={"tokenHash": h, "password": "password1"})
    assert_error(weak, 400, "weak_password")
    new = strong_password()
    done = await api.call("POST", "/password-resets/consume", json={"tokenHash": h, "password": new})
    assert done.status_code == 200, done.text
    assert done.json()["revokedSessions"] == 1
    assert_error(await api.call("GET", "/sessions/current", token=out["token"]), 401, "unauthorized")
    used = await api.call(
        "POST", "/password-resets/consume", json={"tokenHash": h, "password": strong_password()}
    )
    assert assert_error(used, 410, "reset_gone")["details"]["status"] == "used"
    assert (
        await api.call("POST", "/sessions", json={"email": "a@example.com", "password": new})
    ).status_code == 201


def _reset(engine: Engine, email: str) -> str:
    """A new reset link's token hash, as the operator's ``reset-password`` makes it."""
    with Session(writer(engine), expire_on_commit=False) as s:
        user = s.exec(select(User).where(User.email == email)).one()
        _, token = create_reset(s, user=user, ttl=timedelta(hours=1), created_by="cli")
        s.commit()
    return hashlib.sha256(token.encode()).hexdigest()


async def _reset_status(api: Api, token_hash: str) -> str | None:
    """None while the link is usable, else why not (``used``, ``expired``)."""
    r = await api.call("GET", f"/password-resets/{token_hash}")
    if r.status_code == 200:
        return None
    status: str = assert_error(r, 410, "reset_gone")["details"]["status"]
    return status


async def test_a_new_password_or_a_new_link_ends_every_earlier_reset_link(api: Api, engine: Engine) -> None:
    """Reset links outlived a password change, another link and the reset made with another
    link: whoever had an old one (a forwarded mail) could set the password again."""
    out = await api.register(email="a@example.com")
    first = _reset(engine, "a@example.com")
    second = _reset(engine, "a@example.com")
    assert await _reset_status(api, first) == "used" and await _reset_status(api, second) is None

    new = strong_password()
    changed = await api.call(
        "POST", "/users/me/password", token=out["token"], json={"current": out["password"], "new": new}
    )
    assert changed.status_code == 200, changed.text
    assert await _reset_status(api, second) == "used"
    again = await api.call(
        "POST", "/password-resets/consume", json={"tokenHash": second, "password": new + "x"}
    )
    assert_error(again, 410, "reset_gone")

    # Links issued before this rule (two usable at once): using one ends the other.
    third, fourth = _reset(engine, "a@example.com"), _reset(engine, "a@example.com")
    with Session(writer(engine)) as s:
        s.exec(update(PasswordReset).where(col(PasswordReset.token_hash) == third).values(used_at=None))
        s.commit()
    assert await _reset_status(api, third) is None and await _reset_status(api, fourth) is None
    done = await api.call(
        "POST", "/password-resets/consume", json={"tokenHash": fourth, "password": strong_password()}
    )
    assert done.status_code == 200, done.text
    assert await _reset_status(api, third) == "used"


async def test_re_authenticating_keeps_the_sessions_resumable_uploads(api: Api) -> None:
    """Re-authenticating replaces the session: the dashboard's resumable uploads, whose tokens
    name the session they were minted in, were refused and terminated at their next request.
    The tokens move to the new session; signing out still ends them."""
    out = await api.register()
    org = await api.org(out["token"])
    token_hash = hashlib.sha256(secrets.token_bytes(16)).hexdigest()
    minted = await api.call(
        "POST",
        f"/orgs/{org['id']}/upload-tokens",
        json={
            "tokenHash": token_hash,
            "userId": out["user"]["id"],
            "sessionId": out["session"]["id"],
            "maxBytes": 10,
            "expiresIn": 3600,
        },
    )
    assert minted.status_code == 201, minted.text
    grant = {"x-token-hash": token_hash}
    minter = {"minters": [{"organizationId": org["id"], "tokenId": minted.json()["id"]}]}

    renewed = await api.call(
        "POST", "/sessions/current/reauth", token=out["token"], json={"password": out["password"]}
    )
    assert renewed.status_code == 201, renewed.text
    assert (await api.call("GET", "/upload-tokens/grant", headers=grant)).status_code == 200
    assert (await api.call("POST", "/upload-tokens/minters", json=minter)).json()["acting"] == [True]

    assert (await api.call("DELETE", "/sessions/current", token=renewed.json()["token"])).status_code == 200
    assert_error(await api.call("GET", "/upload-tokens/grant", headers=grant), 401, "unauthorized")
    assert (await api.call("POST", "/upload-tokens/minters", json=minter)).json()["acting"] == [False]


def _held_after_verifying(
    monkeypatch: pytest.MonkeyPatch, *, rehash: bool
) -> tuple[asyncio.Event, asyncio.Event]:
    """The next password check answers only once the second event is set (the first says it
    has checked): the gap a busy hashing limiter, or argon2's own time, leaves between checking
    a password and opening the session. ``rehash``: as after a change of hashing parameters."""
    real, verified, release = passwords.run_verify, asyncio.Event(), asyncio.Event()

    async def verify(limiter: Any, password_hash: str | None, password: str) -> tuple[bool, str | None]:
        ok, again = await real(limiter, password_hash, password)
        if not verified.is_set():
            verified.set()
            await release.wait()
            if rehash and ok:
                again = passwords.hash_password(password)
        return ok, again

    monkeypatch.setattr(passwords, "run_verify", verify)
    return verified, release


@pytest.mark.parametrize("rehash", [False, True])
async def test_a_sign_in_checked_before_a_reset_opens_no_session_after_it(
    api: Api, engine: Engine, monkeypatch: pytest.MonkeyPatch, rehash: bool
) -> None:
    """A sign-in with the old password, checked just before the reset and opening its session
    just after, kept that session (the reset ends every session), and with a rehash wrote the
    old password's hash over the new one. It is now refused: the password it checked is no
    longer the account's."""
    out = await api.register(email="a@example.com")
    with Session(writer(engine), expire_on_commit=False) as s:
        _, token = create_reset(s, user=s.exec(select(User)).one(), ttl=timedelta(hours=1), created_by="cli")
        s.commit()
    verified, release = _held_after_verifying(monkeypatch, rehash=rehash)
    old = {"email": "a@example.com", "password": out["password"]}
    racing = asyncio.create_task(api.call("POST", "/sessions", json=old))
    await verified.wait()
    new = strong_password()
    reset = {"tokenHash": hashlib.sha256(token.encode()).hexdigest(), "password": new}
    assert (await api.call("POST", "/password-resets/consume", json=reset)).status_code == 200
    release.set()
    assert_error(await racing, 401, "unauthorized")
    assert (await api.call("POST", "/sessions", json={**old, "password": new})).status_code == 201
    assert_error(await api.call("POST", "/sessions", json=old), 401, "unauthorized")


async def test_a_sign_in_checked_before_a_password_change_opens_no_session_after_it(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a change that ends the other sessions (``revokeOthers``)."""
    out = await api.register(email="b@example.com")
    verified, release = _held_after_verifying(monkeypatch, rehash=False)
    old = {"email": "b@example.com", "password": out["password"]}
    racing = asyncio.create_task(api.call("POST", "/sessions", json=old))
    await verified.wait()
    change = {"current": out["password"], "new": strong_password(), "revokeOthers": True}
    changed = await api.call("POST", "/users/me/password", token=out["token"], json=change)
    assert changed.status_code == 200, changed.text
    release.set()
    assert_error(await racing, 401, "unauthorized")


@pytest.mark.real_argon2
async def test_production_hash_parameters_and_rehash(api: Api, engine: Engine) -> None:
    """argon2id with argon2-cffi's defaults (m = 64 MiB, t = 3, p = 4); an older hash is
    upgraded at the next successful sign-in."""
    from argon2 import PasswordHasher

    password = strong_password()
    with Session(writer(engine)) as s:
        s.add(
            User(
                id="usr_old",
                email="old@example.com",
                password_hash=PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1).hash(password),
                created_at=utcnow(),
            )
        )
        s.commit()
    ok = await api.call("POST", "/sessions", json={"email": "old@example.com", "password": password})
    assert ok.status_code == 201
    with Session(engine) as s:
        stored = s.get(User, "usr_old")
        assert stored is not None
    assert stored.password_hash.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    assert (
        await api.call("POST", "/sessions", json={"email": "old@example.com", "password": password})
    ).status_code == 201


@pytest.mark.parametrize(
    ("mode", "signup", "expected"), [("local", "", "open"), ("production", "", "closed")]
)
def test_signup_mode_defaults(tmp_path: Path, mode: str, signup: str, expected: str) -> None:
    settings = Settings(
        data_dir=tmp_path,
        mode=mode,
        internal_token=SecretStr(secrets.token_urlsafe(32)),
        dashboard_signup=signup,
    )
    assert settings.signup == expected
