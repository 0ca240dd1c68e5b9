"""Webhook endpoints in process against metadata (SQLite and PostgreSQL): URLs refused with the
operator's allowlist empty (each internal range, a name resolving to one, http), the limit of
10 per organization, another organization's endpoint 404, secrets sealed at rest, each change
audited; and the dispatcher's own refusal at connection time against a real receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from pydantic import SecretStr, ValidationError
from sqlalchemy import text

from coffer_kit.contract.ids import new_id
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.wire import ACTOR_HEADER
from coffer_kit.db import Database, make_engine
from coffer_metadata.config import Settings
from coffer_metadata.webhooks.dispatch import dispatcher as dispatch_module
from coffer_metadata.webhooks.dispatch.claim import Job, _fair_pick
from coffer_metadata.webhooks.dispatch.dispatcher import Dispatcher
from coffer_metadata.webhooks.safety import AddressPolicy
from coffer_metadata.webhooks.secrets import SecretBox
from coffer_testkit.webhooks import webhook_receiver

pytestmark = pytest.mark.anyio

AS_KEY = {ACTOR_HEADER: json.dumps({"type": "key", "id": "key_01JD0000000000000000000000"})}
EVENTS = ["asset.created", "folder.deleted"]

REFUSED = [
    "https://127.0.0.1/hook",
    "https://127.1.2.3:8443/hook",
    "https://localhost/hook",  # a name resolving to loopback
    "https://10.0.0.1/hook",
    "https://172.16.5.4/hook",
    "https://192.168.1.1/hook",
    "https://169.254.169.254/latest/meta-data/",
    "https://100.64.0.1/hook",  # carrier-grade NAT
    "https://0.0.0.0/hook",
    "https://[::1]/hook",
    "https://[fd00::1]/hook",  # IPv6 unique local
    "https://[fe80::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",  # IPv4-mapped loopback
    "https://[::]/hook",
    "https://[::a9fe:a9fe]/hook",  # IPv4-compatible 169.254.169.254
    "https://[::ffff:0:a9fe:a9fe]/hook",  # SIIT 169.254.169.254
    "https://[fec0::1]/hook",  # site-local
    "https://[2002:a9fe:a9fe::1]/hook",  # 6to4 of 169.254.169.254
    "https://[2002:808:808::1]/hook",  # 6to4, even of a public address
    "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook",  # Teredo
    "https://[64:ff9b::a9fe:a9fe]/hook",  # NAT64
    "https://192.88.99.1/hook",  # 6to4 relay anycast
    "https://224.0.0.1/hook",  # multicast
    "http://example.com/hook",  # http is not allowed by default
    "ftp://example.com/hook",
    "https://user:pw@example.com/hook",
    "https:///hook",
    "not a url",
    "https://exa\x00mple.com/hook",
    "https://" + "a" * 300 + ".com/hook",  # not a host name
    # Names the idna codec takes and the sender's parser (yarl) does not: every send failed.
    "https://xn--a.com/hook",
    "https://xn--.com/hook",
    "https://a\u200db.com/hook",
]


# 2130706433 (127.0.0.1) in "segmented digits", U+1FBF0-U+1FBF9.
SEGMENTED_LOOPBACK = "".join(chr(0x1FBF0 + int(d)) for d in "2130706433")


def base(org: str) -> str:
    return f"/internal/v1/orgs/{org}/webhooks"


@pytest.mark.parametrize("url", REFUSED)
async def test_internal_and_malformed_urls_are_refused(api: httpx.AsyncClient, url: str) -> None:
    org = new_id("org")
    answer = await api.post(base(org), json={"url": url, "events": EVENTS}, headers=AS_KEY)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_request"
    assert answer.json()["error"]["details"]["field"] == "url"
    assert (await api.get(base(org))).json() == {"webhooks": []}


@pytest.mark.parametrize(
    ("url", "read_as"),
    [
        # The idna codec made these an xn-- name (not resolved: accepted); the sender's URL
        # parser (yarl) reads 2130706433, 127.0.0.1.
        (f"https://{SEGMENTED_LOOPBACK}/x", "2130706433"),
        ("https://2130706433/x", "2130706433"),
        ("https://0x7f.1/x", "0x7f.1"),
    ],
)
async def test_a_number_not_written_as_a_dotted_quad_is_refused(
    api: httpx.AsyncClient, url: str, read_as: str
) -> None:
    """URL parsers and inet_aton read each as 127.0.0.1; only a.b.c.d is taken as an address."""
    answer = await api.post(base(new_id("org")), json={"url": url, "events": EVENTS}, headers=AS_KEY)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"] == (
        f"The URL's host is refused: {read_as} is a number but not an IPv4 address written a.b.c.d."
    )


async def test_a_refused_name_does_not_say_what_it_resolves_to(api: httpx.AsyncClient) -> None:
    """Naming the address mapped internal DNS names for anyone who may make a webhook."""
    answer = await api.post(
        base(new_id("org")), json={"url": "https://localhost/h", "events": EVENTS}, headers=AS_KEY
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"] == (
        "The URL's host is refused: localhost resolves to an internal address; webhooks may not reach it."
    )


async def test_an_update_to_an_internal_url_is_refused(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    created = await api.post(
        base(org), json={"url": "https://93.184.215.7/h", "events": EVENTS}, headers=AS_KEY
    )
    assert created.status_code == 201, created.text
    path = f"{base(org)}/{created.json()['id']}"
    answer = await api.patch(path, json={"url": "https://169.254.169.254/"}, headers=AS_KEY)
    assert answer.status_code == 400
    assert (await api.get(path)).json()["url"] == "https://93.184.215.7/h"


async def test_at_most_ten_endpoints_and_another_organizations_are_404(api: httpx.AsyncClient) -> None:
    org, other = new_id("org"), new_id("org")
    ids = []
    for n in range(10):
        answer = await api.post(
            base(org), json={"url": f"https://93.184.215.{n}/h", "events": EVENTS}, headers=AS_KEY
        )
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["id"])
    over = await api.post(
        base(org), json={"url": "https://93.184.215.99/h", "events": EVENTS}, headers=AS_KEY
    )
    assert over.status_code == 409
    listed = (await api.get(base(org))).json()["webhooks"]
    assert [w["id"] for w in listed] == ids and all("secret" not in w for w in listed)
    theirs = f"{base(other)}/{ids[0]}"
    for method, suffix in [
        ("GET", ""),
        ("PATCH", ""),
        ("DELETE", ""),
        ("POST", "/rotate-secret"),
        ("POST", "/test"),
        ("GET", "/deliveries"),
        ("POST", f"/deliveries/{new_id('whd')}/redeliver"),
    ]:
        kwargs: dict[str, Any] = {"json": {"description": "x"}} if method == "PATCH" else {}
        answer = await api.request(method, theirs + suffix, headers=AS_KEY, **kwargs)
        assert answer.status_code == 404, (method, suffix, answer.text)
    assert (await api.get(f"{base(org)}/{ids[0]}")).status_code == 200


async def test_secrets_are_sealed_at_rest_and_changes_audited(
    api: httpx.AsyncClient, database_url: str
) -> None:
    org = new_id("org")
    created = (
        await api.post(base(org), json={"url": "https://93.184.215.5/h", "events": EVENTS}, headers=AS_KEY)
    ).json()
    rotated = (await api.post(f"{base(org)}/{created['id']}/rotate-secret", headers=AS_KEY)).json()
    assert rotated["secret"] != created["secret"] and rotated["previousSecretExpiresAt"]
    # Requests Coffer sends on demand are audited too (not changes, but someone's doing).
    ping = await api.post(f"{base(org)}/{created['id']}/test", headers=AS_KEY)
    assert ping.status_code == 202, ping.text
    again = await api.post(
        f"{base(org)}/{created['id']}/deliveries/{ping.json()['id']}/redeliver", headers=AS_KEY
    )
    assert again.status_code == 202, again.text
    assert (await api.delete(f"{base(org)}/{created['id']}", headers=AS_KEY)).json() == {"success": True}
    engine = make_engine(database_url)
    with engine.connect() as conn:
        kinds = list(
            conn.execute(
                text("SELECT type FROM events WHERE organization_id = :o ORDER BY created_at, id"), {"o": org}
            ).scalars()
        )
    engine.dispose()
    assert kinds == [
        "webhook.created",
        "webhook.secret_rotated",
        "webhook.tested",
        "webhook.redelivered",
        "webhook.deleted",
    ]
    box = SecretBox(secrets.token_urlsafe(32))
    sealed = box.seal(created["secret"])
    assert created["secret"] not in sealed and box.open(sealed) == created["secret"]
    with pytest.raises(Exception):  # noqa: B017, PT011 - cryptography's InvalidTag
        SecretBox(secrets.token_urlsafe(32)).open(sealed)


async def test_the_stored_secret_is_not_the_secret(api: httpx.AsyncClient, database_url: str) -> None:
    org = new_id("org")
    created = (
        await api.post(base(org), json={"url": "https://93.184.215.6/h", "events": EVENTS}, headers=AS_KEY)
    ).json()
    engine = make_engine(database_url)
    with engine.connect() as conn:
        stored = conn.execute(
            text("SELECT secret FROM webhook_endpoints WHERE id = :i"), {"i": created["id"]}
        ).scalar()
    engine.dispose()
    raw = created["secret"].removeprefix("whsec_")
    assert stored and raw not in stored and stored.startswith("v1:")


def test_production_refuses_an_empty_or_short_secret_key(tmp_path: Any) -> None:
    common = {"mode": "production", "data_dir": tmp_path, "internal_token": SecretStr("t" * 40)}
    for key in ("", "short"):
        with pytest.raises(ValidationError):
            Settings(metadata_webhook_secret_key=SecretStr(key), metadata_database_url="sqlite://", **common)
    with pytest.raises(ValidationError):
        Settings(metadata_webhook_allowed_networks="10.0.0.0/33", data_dir=tmp_path)


def test_the_policy() -> None:
    policy = AddressPolicy([])
    for address in ("8.8.8.8", "2001:4860:4860::8888", "1.1.1.1"):
        policy.check(address)
    allowed = AddressPolicy(["127.0.0.0/8", "fd00::/8"])
    allowed.check("127.0.0.1")
    allowed.check("fd00::5")
    with pytest.raises(OSError, match="internal"):
        allowed.check("10.0.0.1")


@pytest.fixture
def local_receiver() -> Iterator[tuple[str, list[bytes]]]:
    got: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(self.rfile.read(int(self.headers.get("content-length", "0"))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"{server.server_address[1]}", got
    server.shutdown()
    server.server_close()


def _job(url: str) -> Job:
    return Job(
        delivery_id=new_id("whd"),
        endpoint_id=new_id("whk"),
        org_id=new_id("org"),
        event_id=new_id("evt"),
        event_type="ping",
        body=b"{}",
        trace=None,
        attempts=0,
        retry_until=utcnow() + timedelta(days=1),
        url=url,
        secrets=["whsec_" + "A" * 44],
        lease_token="t",
        lease_until=utcnow() + timedelta(minutes=1),
    )


async def test_a_receiver_that_never_answers_is_given_up_after_the_delivery_timeout(
    database_url: str, tmp_path: Any
) -> None:
    """The timeout is CONTRACT §11's 10 s unless the tuning shortens it; the lease must outlast
    it by 2 s, so a lease never ends while its send may still be answered."""
    assert Settings(data_dir=tmp_path).metadata_webhook_tuning.delivery_timeout_seconds == 10
    tuning = {"delivery_timeout_seconds": 10, "lease_seconds": 11}
    with pytest.raises(ValidationError, match="lease_seconds"):
        Settings(data_dir=tmp_path, metadata_webhook_tuning=tuning)
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), never answers
    settings = Settings(
        metadata_database_url=database_url,
        data_dir=tmp_path,
        metadata_webhook_allow_http=True,
        metadata_webhook_allowed_networks="127.0.0.0/8",
        metadata_webhook_tuning={"delivery_timeout_seconds": 0.5, "lease_seconds": 2.5},
    )
    engine = make_engine(database_url)
    dispatcher = Dispatcher(settings, Database(engine))
    try:
        outcome = await dispatcher.send(_job(f"http://127.0.0.1:{silent.getsockname()[1]}/h"))
    finally:
        await dispatcher.close()
        engine.dispose()
        silent.close()
    assert outcome.status is None and outcome.error == "no answer within 0.5 s", outcome
    assert 500 <= outcome.latency_ms < 5000, outcome


@pytest.mark.parametrize("allowlist", ["", "127.0.0.0/8"])
async def test_the_dispatcher_refuses_an_internal_address_when_it_connects(
    local_receiver: tuple[str, list[bytes]], database_url: str, tmp_path: Any, allowlist: str
) -> None:
    """The check is made on the address the connection goes to: a name that resolves to
    loopback (localhost), or a loopback literal, is refused unless the operator allowlists it;
    so is a literal written with ideographic full stops, which the HTTP client reads as one."""
    port, got = local_receiver
    settings = Settings(
        metadata_database_url=database_url,
        data_dir=tmp_path,
        metadata_webhook_allow_http=True,
        metadata_webhook_allowed_networks=allowlist,
    )
    engine = make_engine(database_url)
    dispatcher = Dispatcher(settings, Database(engine))
    try:
        urls = (
            f"http://localhost:{port}/h",
            f"http://127.0.0.1:{port}/h",
            f"http://127\u30020\u30020\u30021:{port}/h",
        )
        for url in urls:
            outcome = await dispatcher.send(_job(url))
            if allowlist:
                assert (outcome.status, outcome.error) == (204, None)
            else:
                assert outcome.status is None and "internal" in (outcome.error or ""), outcome
    finally:
        await dispatcher.close()
        engine.dispose()
    assert len(got) == (3 if allowlist else 0)


async def test_the_dispatcher_refuses_a_number_not_written_as_a_dotted_quad(
    local_receiver: tuple[str, list[bytes]], database_url: str, tmp_path: Any
) -> None:
    """A URL saved before creation refused these: each is 127.0.0.1 to a resolver that asks
    inet_aton; the sender takes only a.b.c.d as an address, even where loopback is allowed."""
    port, got = local_receiver
    settings = Settings(
        metadata_database_url=database_url,
        data_dir=tmp_path,
        metadata_webhook_allow_http=True,
        metadata_webhook_allowed_networks="127.0.0.0/8",
    )
    engine = make_engine(database_url)
    dispatcher = Dispatcher(settings, Database(engine))
    try:
        errors = []
        for host in (SEGMENTED_LOOPBACK, "2130706433", "0x7f.1", "127.1"):
            outcome = await dispatcher.send(_job(f"http://{host}:{port}/h"))
            errors.append((outcome.status, outcome.error))
    finally:
        await dispatcher.close()
        engine.dispose()
    assert got == []
    assert errors == [
        (None, f"refused: {host} is a number but not an IPv4 address written a.b.c.d")
        for host in ("2130706433", "2130706433", "0x7f.1", "127.1")
    ]


async def test_a_url_the_sender_cannot_read_is_a_failed_attempt_not_a_crash(
    database_url: str, tmp_path: Any
) -> None:
    """One saved before the check above (or past it): a crashed send was given back at once,
    due again at once, without an attempt recorded, for the retry window's three days."""
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path)
    engine = make_engine(database_url)
    dispatcher = Dispatcher(settings, Database(engine))
    try:
        outcome = await dispatcher.send(_job("https://xn--a.com/hook"))
    finally:
        await dispatcher.close()
        engine.dispose()
    assert outcome.status is None and "cannot be sent to" in (outcome.error or ""), outcome


def test_claims_take_organizations_in_turn_within_the_endpoint_bound() -> None:
    rows = [SimpleNamespace(id=f"a{n}", endpoint_id="ea", organization_id="A") for n in range(50)]
    rows += [SimpleNamespace(id=f"b{n}", endpoint_id="eb", organization_id="B") for n in range(3)]
    picked = _fair_pick(rows, busy={}, cap=4, free=64)
    assert picked.count("b0") == 1 and len([p for p in picked if p.startswith("a")]) == 4
    assert len([p for p in picked if p.startswith("b")]) == 3
    # An endpoint already at its bound (across dispatchers) gets nothing more.
    assert _fair_pick(rows, busy={"ea": 4}, cap=4, free=64) == ["b0", "b1", "b2"]
    assert len(_fair_pick(rows, busy={}, cap=4, free=2)) == 2


async def test_leases_five_days_of_failures_and_410(
    api: httpx.AsyncClient, database_url: str, tmp_path: Any
) -> None:
    """Two dispatchers never hold one delivery at once; a lease that ended can be taken again;
    an endpoint failing for 5 days is disabled, and one answering 410 at once (both audited)."""

    from coffer_metadata.webhooks.dispatch.record import Outcome

    org = new_id("org")
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path)
    made = []
    for n in range(2):
        answer = await api.post(
            base(org), json={"url": f"https://93.184.216.{n}/h", "events": EVENTS}, headers=AS_KEY
        )
        made.append(answer.json()["id"])
    engine = make_engine(database_url)
    now = utcnow()
    _pings(engine, org, made, now)
    one, two = Dispatcher(settings, Database(engine)), Dispatcher(settings, Database(engine))
    first = one.claim(64)
    assert sorted(j.endpoint_id for j in first) == sorted(made)
    assert two.claim(64) == []  # leased by the first
    with engine.begin() as conn:  # the first dispatcher died: its leases end
        conn.execute(
            text("UPDATE webhook_deliveries SET lease_until = :t"), {"t": now - timedelta(seconds=1)}
        )
    again = two.claim(64)
    assert sorted(j.delivery_id for j in again) == sorted(j.delivery_id for j in first)
    assert all(
        j.event_id == f.event_id
        for j, f in zip(
            sorted(again, key=lambda j: j.delivery_id),
            sorted(first, key=lambda j: j.delivery_id),
            strict=True,
        )
    )

    failing, gone = sorted(again, key=lambda j: made.index(j.endpoint_id))
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE webhook_endpoints SET failing_since = :t WHERE id = :i"),
            {"t": now - timedelta(days=5, seconds=1), "i": failing.endpoint_id},
        )
    two.record([(failing, Outcome(500, None, "no", 5, now)), (gone, Outcome(410, None, "bye", 5, now))])
    views = {w["id"]: w for w in (await api.get(base(org))).json()["webhooks"]}
    assert (views[failing.endpoint_id]["enabled"], views[failing.endpoint_id]["disabledReason"]) == (
        False,
        "failing",
    )
    assert (views[gone.endpoint_id]["enabled"], views[gone.endpoint_id]["disabledReason"]) == (False, "gone")
    with engine.connect() as conn:
        disabled = conn.execute(
            text("SELECT count(*) FROM events WHERE organization_id = :o AND type = 'webhook.disabled'"),
            {"o": org},
        ).scalar()
        statuses = dict(conn.execute(text("SELECT endpoint_id, status FROM webhook_deliveries")).all())
    engine.dispose()
    assert disabled == 2
    assert statuses[gone.endpoint_id] == "failed" and statuses[failing.endpoint_id] == "pending"
    log = (await api.get(f"{base(org)}/{failing.endpoint_id}/deliveries")).json()["deliveries"]
    assert [(a["attempt"], a["result"], a["responseStatus"], a["response"]) for a in log] == [
        (1, "failed", 500, "no")
    ]


def test_deliveries_past_their_window_are_given_up(database_url: str, tmp_path: Any) -> None:
    """A delivery whose attempts never got recorded (a dispatcher dying at each) stops after
    its retry window instead of being resent forever."""
    from sqlalchemy.orm import Session

    from coffer_metadata.models import WebhookDelivery as DeliveryRow
    from coffer_metadata.webhooks import service

    engine = make_engine(database_url)
    old = utcnow() - timedelta(days=4)
    values = service.new_delivery(
        endpoint_id=new_id("whk"),
        org_id=new_id("org"),
        event_id=new_id("evt"),
        type="ping",
        body="{}",
        trace=None,
        scope=0,
        now=old,
        retry_for=3 * 86400,
    )
    with Session(engine) as session:
        session.add(DeliveryRow(**values))
        session.commit()
    dispatcher = Dispatcher(Settings(metadata_database_url=database_url, data_dir=tmp_path), Database(engine))
    assert dispatcher.expire() == 1
    with engine.connect() as conn:
        status = conn.execute(
            text("SELECT status FROM webhook_deliveries WHERE id = :i"), {"i": values["id"]}
        ).scalar()
    engine.dispose()
    assert status == "failed"


async def test_a_dispatcher_alone_on_a_quick_endpoint_leases_ahead_and_gives_back_what_it_cannot_send(
    api: httpx.AsyncClient, database_url: str, tmp_path: Any
) -> None:
    """Prefetch: alone on an endpoint, a dispatcher leases PREFETCH times the endpoint bound
    (another then takes none); marked slow, it leases only the bound. A queued delivery whose
    lease would end before a send could is never sent: its lease goes back in the next cycle
    and another dispatcher takes it at once."""

    from coffer_metadata.webhooks.dispatch.claim import PREFETCH

    org = new_id("org")
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path)
    cap = settings.metadata_webhook_tuning.endpoint_concurrency
    made = await api.post(
        base(org), json={"url": "https://93.184.216.34/h", "events": EVENTS}, headers=AS_KEY
    )
    endpoint = made.json()["id"]
    engine = make_engine(database_url)
    _pings(engine, org, [endpoint] * (cap * PREFETCH + 5), utcnow())
    one, two = Dispatcher(settings, Database(engine)), Dispatcher(settings, Database(engine))
    try:
        two._slow.add(endpoint)
        assert len(two.claim(512)) == cap  # slow: the bound only
        assert one.claim(512) == []  # another holds leases there: not alone, and at the bound
        with engine.begin() as conn:
            conn.execute(text("UPDATE webhook_deliveries SET lease_token = NULL, lease_until = NULL"))
        leased = one.claim(512)
        assert len(leased) == cap * PREFETCH
        assert two.claim(512) == []  # over the bound already

        for job in leased:
            one._queued.setdefault(job.endpoint_id, deque()).append(job)
            job.lease_until = utcnow() + timedelta(seconds=5)  # ends before a 10 s send could
        one._pump()
        assert not one.tasks and len(one._released) == cap * PREFETCH
        one.cycle([], one._released, 0, {})
        with engine.connect() as conn:
            held = conn.execute(text("SELECT count(*) FROM webhook_deliveries WHERE lease_token IS NOT NULL"))
            assert held.scalar() == 0
        assert len(two.claim(512)) == cap  # two is still marked slow: the bound
    finally:
        engine.dispose()


async def test_a_lease_read_that_fails_after_the_commit_records_each_send_once(
    api: httpx.AsyncClient, database_url: str, tmp_path: Any
) -> None:
    """The deliveries a cycle leased are read after its commit (not while it holds SQLite's
    write lock). If that read fails, the cycle has still recorded what it was given: it
    answers no jobs instead of raising (which would have the next cycle record the same sends
    again), and what it leased waits for its lease to end."""
    from coffer_metadata.webhooks.dispatch.record import Outcome

    class Unreadable(Dispatcher):
        def _leased(self, *_args: Any) -> list[Any]:
            raise OSError("the read failed")

    org = new_id("org")
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path)
    made = await api.post(
        base(org), json={"url": "https://93.184.216.34/h", "events": EVENTS}, headers=AS_KEY
    )
    endpoint = made.json()["id"]
    engine = make_engine(database_url)
    try:
        _pings(engine, org, [endpoint], utcnow())
        dispatcher = Unreadable(settings, engine)
        [sent] = Dispatcher(settings, Database(engine)).claim(8)
        _pings(engine, org, [endpoint], utcnow())  # a second, due: the cycle leases it
        ended = [(sent, Outcome(500, None, "no", 5, utcnow()))]
        assert dispatcher.cycle(ended, [], 8, {}) == []
        assert dispatcher.cycle([], [], 0, {}) == []
        with engine.connect() as conn:
            attempts = conn.execute(text("SELECT count(*) FROM webhook_attempts")).scalar()
            leased = conn.execute(
                text("SELECT count(*) FROM webhook_deliveries WHERE lease_token IS NOT NULL")
            ).scalar()
        assert (attempts, leased) == (1, 1)
    finally:
        engine.dispose()


async def test_the_idle_read_sees_what_a_cycle_would_find(
    api: httpx.AsyncClient, database_url: str, tmp_path: Any
) -> None:
    """With nothing to record, a dispatcher runs its cycle (a worker-thread trip and three
    reads) only when one read on the event loop says an event waits to be fanned out or a
    delivery is due. Whatever the cycle would fan out or lease, the read must see, or
    deliveries stall: checked here state by state, at the due time to the second."""
    org = new_id("org")
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path)
    endpoint = await _public_endpoint(api, org)
    database = Database.open(database_url)
    engine = database.engine
    dispatcher, other = Dispatcher(settings, database), Dispatcher(settings, Database(engine))
    # A whole second: on SQLite the time is compared as the column stores it (text), where
    # "12:00:05+00:00" would sort before "12:00:05.000000".
    now = utcnow().replace(microsecond=0)
    later = now + timedelta(hours=1)
    try:
        assert await dispatcher._work_waiting(now)  # the endpoint's audit event
        assert dispatcher.cycle([], [], 64, {}) == []  # fanned out: not a delivery
        assert not await dispatcher._work_waiting(now)

        _pings(engine, org, [endpoint], later)
        assert not await dispatcher._work_waiting(now)  # not due yet
        assert await dispatcher._work_waiting(later)  # due at that very second

        _pings(engine, org, [endpoint], now)
        assert await dispatcher._work_waiting(now)
        [leased] = other.claim(64)
        assert not await dispatcher._work_waiting(now)  # another dispatcher holds it
        assert dispatcher.cycle([], [], 64, {}) == []

        with engine.begin() as conn:  # its lease ended, but the endpoint is disabled
            conn.execute(text("UPDATE webhook_deliveries SET lease_token = NULL, lease_until = NULL"))
            conn.execute(text("UPDATE webhook_endpoints SET enabled = false"))
        assert not await dispatcher._work_waiting(now)
        assert dispatcher.cycle([], [], 64, {}) == []

        with engine.begin() as conn:
            conn.execute(text("UPDATE webhook_endpoints SET enabled = true"))
        assert await dispatcher._work_waiting(now)
        assert [job.delivery_id for job in dispatcher.cycle([], [], 64, {})] == [leased.delivery_id]
    finally:
        await database.aclose()


async def test_an_idle_dispatcher_leaves_its_cycle_alone_until_there_is_work(
    api: httpx.AsyncClient, database_url: str, tmp_path: Any
) -> None:
    """Idle steps run no cycle; a due delivery is leased and sent at the next step, and the
    step after records its attempt."""

    class Counted(Dispatcher):
        cycles = 0

        def cycle(self, *args: Any) -> list[Job]:
            self.cycles += 1
            return super().cycle(*args)

    org = new_id("org")
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path)
    endpoint = await _public_endpoint(api, org)
    database = Database.open(database_url)
    engine = database.engine
    dispatcher = Counted(settings, database)
    try:
        await dispatcher.step()  # the endpoint's audit event is fanned out
        for _ in range(3):
            await dispatcher.step()
        assert dispatcher.cycles == 1

        with engine.begin() as conn:  # refused when it connects: an attempt at once, no network
            conn.execute(text("UPDATE webhook_endpoints SET url = 'https://127.0.0.1/h'"))
        _pings(engine, org, [endpoint], utcnow())
        await dispatcher.step()
        assert (dispatcher.cycles, len(dispatcher.tasks)) == (2, 1)
        await asyncio.wait(set(dispatcher.tasks))
        await dispatcher.step()
        await dispatcher.step()  # retried in 5 s: idle again
        assert dispatcher.cycles == 3
        with engine.connect() as conn:
            attempts = conn.execute(text("SELECT count(*) FROM webhook_attempts")).scalar()
        assert attempts == 1
    finally:
        await dispatcher.close()
        await database.aclose()


async def _public_endpoint(api: httpx.AsyncClient, org: str) -> str:
    made = await api.post(
        base(org), json={"url": "https://93.184.216.34/h", "events": EVENTS}, headers=AS_KEY
    )
    return str(made.json()["id"])


def _pings(engine: Any, org: str, endpoints: list[str], now: Any) -> None:
    """A due "ping" delivery to each of ``endpoints`` (one per entry), written straight in."""
    from sqlalchemy.orm import Session

    from coffer_metadata.models import WebhookDelivery as DeliveryRow
    from coffer_metadata.webhooks import service

    with Session(engine) as session:
        for endpoint in endpoints:
            event_id = new_id("evt")
            body = service.body_of(event_id=event_id, type="ping", created_at=now, org_id=org, data={})
            values = service.new_delivery(
                endpoint_id=endpoint,
                org_id=org,
                event_id=event_id,
                type="ping",
                body=body,
                trace=None,
                scope=0,
                now=now,
                retry_for=3600,
            )
            session.add(DeliveryRow(**values))
        session.commit()


async def test_a_receiver_answering_a_nul_byte_stops_no_delivery(
    metadata_app: Any, database_url: str, tmp_path: Any
) -> None:
    """An organization's receiver answers "ok\\0" to two pings: the dispatcher recorded both
    attempts in one insert, which PostgreSQL refused (no NUL in text), every cycle, so no
    delivery of any organization went out again. Now the answer is kept with U+FFFD."""
    loopback = {"metadata_webhook_allow_http": True, "metadata_webhook_allowed_networks": "127.0.0.0/8"}
    engine = make_engine(database_url)
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path, **loopback)
    dispatcher = Dispatcher(settings, Database(engine))
    evil_org, good_org = new_id("org"), new_id("org")
    try:
        with webhook_receiver() as receiver:
            receiver.answers["/evil"] = lambda _got: (200, b"ok\x00")
            async with metadata_app(**loopback) as api:
                made = {}
                for org, path in ((evil_org, "/evil"), (good_org, "/good")):
                    body = {"url": receiver.url + path, "events": EVENTS}
                    made[org] = (await api.post(base(org), json=body, headers=AS_KEY)).json()["id"]
                for _ in range(2):
                    ping = await api.post(f"{base(evil_org)}/{made[evil_org]}/test", headers=AS_KEY)
                    assert ping.status_code == 202
                for _ in range(3):  # the evil answers recorded, then the other organization's ping sent
                    await dispatcher.step()
                    if dispatcher.tasks:
                        await asyncio.wait(set(dispatcher.tasks))
                    if not receiver.on("/good"):
                        ping = await api.post(f"{base(good_org)}/{made[good_org]}/test", headers=AS_KEY)
                        assert ping.status_code == 202
                log = (await api.get(f"{base(evil_org)}/{made[evil_org]}/deliveries")).json()
            assert len(receiver.on("/good")) == 1
    finally:
        await dispatcher.close()
        engine.dispose()
    assert [(d["result"], d["response"]) for d in log["deliveries"]] == [("succeeded", "ok\ufffd")] * 2


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # writers at once
async def test_creations_at_once_keep_to_ten_endpoints(api: httpx.AsyncClient) -> None:
    """Twelve creations at once beside eight endpoints: each counted eight (READ COMMITTED)
    and the organization ended with up to 20, each event sent to all of them. Now they take
    turns: two more, ten 409s."""
    org = new_id("org")
    for n in range(8):
        made = await api.post(
            base(org), json={"url": f"https://93.184.216.{n}/h", "events": EVENTS}, headers=AS_KEY
        )
        assert made.status_code == 201, made.text

    async def create(n: int) -> int:
        url = f"https://93.184.217.{n}/h"
        return (await api.post(base(org), json={"url": url, "events": EVENTS}, headers=AS_KEY)).status_code

    codes = await asyncio.gather(*(create(n) for n in range(12)))
    listed = (await api.get(base(org))).json()["webhooks"]
    assert (sorted(codes), len(listed)) == ([201] * 2 + [409] * 10, 10)


async def test_an_attempt_the_database_refuses_holds_back_no_other_organization(
    metadata_app: Any, database_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the database refuses in one organization's attempt (a NUL was one), the cycle
    that recorded it with everyone's failed again and again: no fan-out, no lease, no other
    delivery. The sends are recorded one by one then, and only the refused one waits for its
    lease to end."""
    loopback = {"metadata_webhook_allow_http": True, "metadata_webhook_allowed_networks": "127.0.0.0/8"}
    engine = make_engine(database_url)
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path, **loopback)
    dispatcher = Dispatcher(settings, Database(engine))
    poisoned, other = new_id("org"), new_id("org")
    writes = dispatch_module.write_records

    def refusing(connection: Any, records: list[Any]) -> None:
        if any(r.job.org_id == poisoned for r in records):
            raise sa.exc.DataError("INSERT INTO webhook_attempts", {}, ValueError("refused"))
        writes(connection, records)

    monkeypatch.setattr(dispatch_module, "write_records", refusing)
    try:
        with webhook_receiver() as receiver:
            async with metadata_app(**loopback) as api:
                made = {}
                for org in (poisoned, other):
                    body = {"url": f"{receiver.url}/{org}", "events": EVENTS}
                    made[org] = (await api.post(base(org), json=body, headers=AS_KEY)).json()["id"]
                assert (
                    await api.post(f"{base(poisoned)}/{made[poisoned]}/test", headers=AS_KEY)
                ).status_code == 202
                for _ in range(4):  # the refused record, then the other organization's ping sent
                    await dispatcher.step()
                    if dispatcher.tasks:
                        await asyncio.wait(set(dispatcher.tasks))
                    if not receiver.on(f"/{other}"):
                        ping = await api.post(f"{base(other)}/{made[other]}/test", headers=AS_KEY)
                        assert ping.status_code == 202
                log = (await api.get(f"{base(other)}/{made[other]}/deliveries")).json()
            assert len(receiver.on(f"/{other}")) == 1
    finally:
        await dispatcher.close()
        engine.dispose()
    assert [d["result"] for d in log["deliveries"]] == ["succeeded"]


def _succeeded_delivery(c: Any, *, endpoint: str, org: str, event: str, scope: int) -> str:
    """A succeeded delivery of a ``folder.created`` event, planned in ``scope``; its id."""
    from coffer_kit.contract.ids import WEBHOOK_DELIVERY
    from coffer_metadata.models import WebhookDelivery

    delivery = new_id(WEBHOOK_DELIVERY)
    c.execute(
        sa.insert(WebhookDelivery.__table__),  # type: ignore[attr-defined]
        {
            **{"id": delivery, "endpoint_id": endpoint, "organization_id": org, "event_id": event},
            **{"event_type": "folder.created", "body": "{}", "status": "succeeded", "attempts": 1},
            **{"next_attempt_at": None, "retry_until": utcnow() + timedelta(days=3)},
            **{"scope": scope, "created_at": utcnow()},
        },
    )
    return delivery


async def test_a_subtree_key_redelivers_only_its_subtrees_events(api: httpx.AsyncClient, engine: Any) -> None:
    """An endpoint that heard the whole organization, then narrowed (by an owner) to a subtree:
    a key of that subtree, which may set the endpoint's URL, could redeliver the organization's
    other events there. Each redelivery is now checked as fan-out checks an event."""
    from coffer_kit.contract.wire import SUBTREE_HEADER
    from coffer_metadata.models import Event, WebhookEndpoint

    org = new_id("org")

    async def folder(name: str, parent: str | None = None) -> str:
        made = await api.post(
            f"/internal/v1/orgs/{org}/folders", json={"name": name, "parentId": parent}, headers=AS_KEY
        )
        assert made.status_code == 201, made.text
        return made.json()["id"]  # type: ignore[no-any-return]

    public, private = await folder("public"), await folder("private")
    plans, docs = await folder("acquisition-plans", private), await folder("docs", public)
    hook = await api.post(
        base(org), json={"url": "https://93.184.215.7/h", "events": ["folder.created"]}, headers=AS_KEY
    )
    endpoint = hook.json()["id"]
    assert (
        await api.patch(f"{base(org)}/{endpoint}", json={"folderId": public}, headers=AS_KEY)
    ).status_code == 200
    deliveries = {}
    with engine.begin() as c:
        endpoints = WebhookEndpoint.__table__  # type: ignore[attr-defined]
        scope = c.execute(sa.select(endpoints.c.scope).where(endpoints.c.id == endpoint)).scalar_one()
        for made in (plans, docs):
            event = c.execute(
                sa.select(Event.__table__.c.id).where(  # type: ignore[attr-defined]
                    Event.__table__.c.type == "folder.created",  # type: ignore[attr-defined]
                    Event.__table__.c.data.contains(made),  # type: ignore[attr-defined]
                )
            ).scalar_one()
            # (as though planned since the narrowing: the event is checked too)
            deliveries[made] = _succeeded_delivery(c, endpoint=endpoint, org=org, event=event, scope=scope)
    confined = {**AS_KEY, SUBTREE_HEADER: public}

    def redeliver(made: str, headers: dict[str, str]) -> Any:
        return api.post(f"{base(org)}/{endpoint}/deliveries/{deliveries[made]}/redeliver", headers=headers)

    assert (await redeliver(plans, confined)).status_code == 404
    assert (await redeliver(docs, confined)).status_code == 202
    assert (await redeliver(plans, AS_KEY)).status_code == 202  # the organization's own key: all


@dataclass
class Sending:
    """The metadata app beside a dispatcher that sends to a receiver on loopback, for one
    organization: the two subtree-key tests below."""

    api: httpx.AsyncClient
    dispatcher: Dispatcher
    receiver: Any
    engine: Any
    org: str = field(default_factory=lambda: new_id("org"))

    async def folder(self, name: str, parent: str | None = None) -> str:
        body = {"name": name, "parentId": parent}
        made = await self.api.post(f"/internal/v1/orgs/{self.org}/folders", json=body, headers=AS_KEY)
        assert made.status_code == 201, made.text
        return made.json()["id"]  # type: ignore[no-any-return]

    async def logged(self, endpoint: str, count: int) -> None:
        """Send until the endpoint's log holds ``count`` attempts."""
        for _ in range(20):
            log = (await self.api.get(f"{base(self.org)}/{endpoint}/deliveries", headers=AS_KEY)).json()
            if log["total"] >= count:
                return
            await self.dispatcher.step()
            if self.dispatcher.tasks:
                await asyncio.wait(set(self.dispatcher.tasks))
        raise AssertionError(f"{log['total']} of {count} deliveries in the log")

    def sent(self) -> dict[str, str]:
        """The folder.created events the receiver got: folder name → event id."""
        bodies = [json.loads(r.body) for r in self.receiver.on("/h")]
        return {body["data"]["folder"]["name"]: body["id"] for body in bodies}


@contextlib.asynccontextmanager
async def sending(metadata_app: Any, database_url: str, tmp_path: Any) -> AsyncIterator[Sending]:
    loopback = {"metadata_webhook_allow_http": True, "metadata_webhook_allowed_networks": "127.0.0.1/32"}
    engine = make_engine(database_url)
    settings = Settings(metadata_database_url=database_url, data_dir=tmp_path, **loopback)
    dispatcher = Dispatcher(settings, Database(engine))
    try:
        with webhook_receiver() as receiver:
            async with metadata_app(**loopback) as api:
                yield Sending(api, dispatcher, receiver, engine)
    finally:
        await dispatcher.close()
        engine.dispose()


async def test_a_subtree_key_sees_only_the_deliveries_made_since_the_endpoint_was_narrowed(
    metadata_app: Any, database_url: str, tmp_path: Any
) -> None:
    """An endpoint that heard the whole organization, then narrowed (by an owner) to a subtree
    a key may reach: the key listed the endpoint's whole log, events of the organization's
    other folders among it (their types and ids, the receiver's answers). It now sees what the
    endpoint sent since its folder filter last changed; a fan-out planned before the change and
    written after it counts as before."""
    from coffer_kit.contract.wire import SUBTREE_HEADER
    from coffer_metadata.webhooks.dispatch import fanout

    async with sending(metadata_app, database_url, tmp_path) as it:
        api, org, engine = it.api, it.org, it.engine
        public, private = await it.folder("public"), await it.folder("private")
        body = {"url": f"{it.receiver.url}/h", "events": ["folder.created"]}
        endpoint = (await api.post(base(org), json=body, headers=AS_KEY)).json()["id"]
        await it.folder("acquisition-plans", private)
        await it.logged(endpoint, 1)
        await it.folder("drafts", private)
        planned = fanout.plan_fan_out(engine, now=utcnow(), retry_for=60)  # before the change
        narrowed = await api.patch(f"{base(org)}/{endpoint}", json={"folderId": public}, headers=AS_KEY)
        assert narrowed.status_code == 200, narrowed.text
        with engine.begin() as connection:  # written after it
            fanout.write_fan_out(connection, planned, postgresql=engine.dialect.name == "postgresql")
        await it.folder("docs", public)
        await it.logged(endpoint, 3)

        log = f"{base(org)}/{endpoint}/deliveries"
        confined = {**AS_KEY, SUBTREE_HEADER: public}
        owner_view = (await api.get(log, headers=AS_KEY)).json()
        key_view = (await api.get(log, headers=confined)).json()
        key_pages = (await api.get(log, params={"total": "false", "limit": 1}, headers=confined)).json()
        sent = it.sent()
    assert sorted(sent) == ["acquisition-plans", "docs", "drafts"]
    assert sorted(d["eventId"] for d in owner_view["deliveries"]) == sorted(sent.values())
    assert owner_view["total"] == 3
    assert [d["eventId"] for d in key_view["deliveries"]] == [sent["docs"]]
    assert key_view["total"] == 1
    assert [d["eventId"] for d in key_pages["deliveries"]] == [sent["docs"]]
    assert key_pages["nextCursor"] is None


async def test_a_folder_moved_into_a_keys_subtree_brings_no_deliveries_from_before(
    metadata_app: Any, database_url: str, tmp_path: Any
) -> None:
    """An endpoint limited to a folder outside a key's subtree, then the folder moved (by an
    owner) into it: the key listed, and could redeliver, what the endpoint sent when no key of
    that subtree reached it (a deleted folder's name among it). A move is a new scope too."""
    from coffer_kit.contract.wire import SUBTREE_HEADER

    async with sending(metadata_app, database_url, tmp_path) as it:
        api, org = it.api, it.org
        public, private = await it.folder("public"), await it.folder("private")
        secret = await it.folder("secret", private)
        body = {"url": f"{it.receiver.url}/h", "events": ["folder.created"], "folderId": secret}
        endpoint = (await api.post(base(org), json=body, headers=AS_KEY)).json()["id"]
        await it.folder("acquisition-plans", secret)
        await it.logged(endpoint, 1)
        confined = {**AS_KEY, SUBTREE_HEADER: public}
        log = f"{base(org)}/{endpoint}/deliveries"
        assert (await api.get(log, headers=confined)).status_code == 404  # not its endpoint yet
        (old,) = (await api.get(log, headers=AS_KEY)).json()["deliveries"]

        moved = await api.patch(
            f"/internal/v1/orgs/{org}/folders/{secret}", json={"parentId": public}, headers=AS_KEY
        )
        assert moved.status_code == 200, moved.text
        seen = (await api.get(log, headers=confined)).json()
        redeliver = f"{log}/{old['deliveryId']}/redeliver"
        assert (await api.post(redeliver, headers=confined)).status_code == 404
        await it.folder("docs", secret)
        await it.logged(endpoint, 2)
        after = (await api.get(log, headers=confined)).json()
        owner = (await api.get(log, headers=AS_KEY)).json()
        sent = it.sent()
    assert (seen["deliveries"], seen["total"]) == ([], 0)
    assert [d["eventId"] for d in after["deliveries"]] == [sent["docs"]]
    assert sorted(d["eventId"] for d in owner["deliveries"]) == sorted(sent.values())
    assert sorted(sent) == ["acquisition-plans", "docs"]


@pytest.mark.parametrize("raised_by", ["filter", "move"])
async def test_a_url_change_after_the_scope_rose_sends_none_of_the_earlier_retries(
    metadata_app: Any, database_url: str, tmp_path: Any, raised_by: str
) -> None:
    """An endpoint failing (503) holds a retry of an event of ``private``; an owner then
    narrows its filter to ``public`` (or moves its folder there), and a key of ``public``
    sets the endpoint's URL to its own receiver: the retry sent the ``private`` event there,
    while the key's log showed nothing. The retries of before the change now end, unsent."""
    from coffer_kit.contract.wire import SUBTREE_HEADER

    async with sending(metadata_app, database_url, tmp_path) as it:
        api, org, engine = it.api, it.org, it.engine
        it.receiver.answers["/h"] = lambda _got: (503, b"down")
        public, private = await it.folder("public"), await it.folder("private")
        body: dict[str, Any] = {"url": f"{it.receiver.url}/h", "events": ["folder.created"]}
        if raised_by == "move":
            body["folderId"] = await it.folder("secret", private)
        endpoint = (await api.post(base(org), json=body, headers=AS_KEY)).json()["id"]
        await it.folder("acquisition-plans", body.get("folderId", private))
        await it.logged(endpoint, 1)  # failed: retried in 5 s
        if raised_by == "filter":
            changed = await api.patch(f"{base(org)}/{endpoint}", json={"folderId": public}, headers=AS_KEY)
        else:
            changed = await api.patch(
                f"/internal/v1/orgs/{org}/folders/{body['folderId']}",
                json={"parentId": public},
                headers=AS_KEY,
            )
        assert changed.status_code == 200, changed.text
        confined = {**AS_KEY, SUBTREE_HEADER: public}
        taken = await api.patch(
            f"{base(org)}/{endpoint}", json={"url": f"{it.receiver.url}/attacker"}, headers=confined
        )
        assert taken.status_code == 200, taken.text
        mine = {"e": endpoint, "t": utcnow()}
        with engine.begin() as c:  # the retry due now
            c.execute(text("UPDATE webhook_deliveries SET next_attempt_at = :t WHERE endpoint_id = :e"), mine)
        for _ in range(3):
            await it.dispatcher.step()
            if it.dispatcher.tasks:
                await asyncio.wait(set(it.dispatcher.tasks))
        with engine.connect() as c:
            found = c.execute(text("SELECT status FROM webhook_deliveries WHERE endpoint_id = :e"), mine)
            statuses = list(found.scalars())
        log = (await api.get(f"{base(org)}/{endpoint}/deliveries", headers=AS_KEY)).json()
        key_log = (await api.get(f"{base(org)}/{endpoint}/deliveries", headers=confined)).json()
    assert it.receiver.on("/attacker") == []
    assert statuses == ["failed"]
    assert [(d["result"], d["error"]) for d in log["deliveries"]] == [
        ("failed", "not sent: the endpoint's URL changed after its folder filter did"),
        ("failed", None),
    ]
    assert key_log["total"] == 0


async def test_a_subtree_key_is_told_when_its_deliverys_event_is_no_longer_kept(
    api: httpx.AsyncClient, engine: Any
) -> None:
    """A subtree key redelivers a delivery only while its event is kept (the outbox's 7 days:
    the event says whether it was of the key's subtree); its log lists the delivery for 30.
    The 404 says why for one the key's log lists, and nothing of one it does not."""
    from coffer_kit.contract.wire import SUBTREE_HEADER
    from coffer_metadata.models import Event, WebhookEndpoint

    org = new_id("org")

    async def folder(name: str) -> str:
        made = await api.post(f"/internal/v1/orgs/{org}/folders", json={"name": name}, headers=AS_KEY)
        assert made.status_code == 201, made.text
        return made.json()["id"]  # type: ignore[no-any-return]

    hook = await api.post(
        base(org), json={"url": "https://93.184.215.7/h", "events": ["folder.created"]}, headers=AS_KEY
    )
    endpoint = hook.json()["id"]
    private, public = await folder("private"), await folder("public")
    narrowed = await api.patch(f"{base(org)}/{endpoint}", json={"folderId": public}, headers=AS_KEY)
    assert narrowed.status_code == 200, narrowed.text
    events, endpoints = Event.__table__, WebhookEndpoint.__table__  # type: ignore[attr-defined]
    deliveries = {}
    with engine.begin() as c:
        scope = c.execute(sa.select(endpoints.c.scope).where(endpoints.c.id == endpoint)).scalar_one()
        # private's planned while the endpoint heard everything, public's since it was narrowed
        for made, planned_in in ((private, scope - 1), (public, scope)):
            event = c.execute(
                sa.select(events.c.id).where(events.c.type == "folder.created", events.c.data.contains(made))
            ).scalar_one()
            deliveries[made] = _succeeded_delivery(
                c, endpoint=endpoint, org=org, event=event, scope=planned_in
            )
        c.execute(sa.delete(events).where(events.c.organization_id == org))  # retention pruned them
    confined = {**AS_KEY, SUBTREE_HEADER: public}

    def redeliver(made: str, headers: dict[str, str]) -> Any:
        return api.post(f"{base(org)}/{endpoint}/deliveries/{deliveries[made]}/redeliver", headers=headers)

    kept = await redeliver(public, confined)
    assert kept.status_code == 404, kept.text
    assert kept.json()["error"]["message"] == (
        f"Delivery {deliveries[public]} cannot be redelivered by this key: its event is no longer kept."
    )
    outside = await redeliver(private, confined)
    assert outside.status_code == 404, outside.text
    assert outside.json()["error"]["message"] == f"Delivery {deliveries[private]} does not exist."
    assert (await redeliver(public, AS_KEY)).status_code == 202  # the organization's key: its whole log
    assert (await redeliver(private, AS_KEY)).status_code == 202
