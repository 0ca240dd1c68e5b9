"""The webhook dispatcher: delivers the outbox's events to the endpoints that subscribed.

A role of metadata (``coffer-metadata dispatch``), its own process and Deployment: it reads
and writes metadata's database, never answers the public, and its failures (a receiver that
hangs, a burst of retries) never slow metadata's API. Several replicas may run:

1. **Fan-out.** Events not yet dispatched become one delivery per matching endpoint (type,
   folder subtree), and are marked dispatched, in one transaction (PostgreSQL: the events are
   claimed ``FOR UPDATE SKIP LOCKED``; SQLite has one writer). A unique (endpoint, event)
   pair makes a second fan-out of one event impossible.
2. **Claim.** Due deliveries are leased with a conditional update (only a row whose lease has
   ended can be taken), so two dispatchers never send one delivery at once; a dispatcher
   killed mid-send leaves a lease that ends, and another sends the delivery again: with the
   same ``webhook-id``. At most COFFER_METADATA_WEBHOOK_ENDPOINT_CONCURRENCY deliveries of one
   endpoint are in flight across all dispatchers, and claims go round-robin across
   organizations, so a receiver that hangs holds a few slots for 10 s, never the queue. A
   dispatcher that alone holds an endpoint's leases, and whose last send to it was quick,
   leases up to PREFETCH times that bound and sends them within it from its own queue: a
   fast receiver costs one claim per PREFETCH rounds of sends, not one per round. A queued
   delivery whose lease would end before its send could is released, never sent.
3. **Send** (safety.py: https, pinned public addresses, no redirects, 10 s, 1 KiB read), then
   **record** the attempt and schedule the retry (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, then
   every 10 h, ±10 %, until about 3 days after the event); 410 disables the endpoint at once,
   5 days of failures too (both audited as ``webhook.disabled``).

A **cycle** does all three writes (record what ended, fan out, claim) in one transaction, at
most once per COFFER_METADATA_WEBHOOK_CYCLE_GAP_SECONDS (0.1 s): on SQLite each is a turn
of the one write lock that the API's uploads wait for, so the dispatcher takes it about
ten times a second under load, however many deliveries that is. The loop wakes every
COFFER_METADATA_WEBHOOK_POLL_SECONDS (0.1 s) and when a send ends. With nothing to record,
one read on the event loop first says whether the cycle would find anything to fan out or
lease (``_WORK_WAITING``): an idle dispatcher makes no worker-thread trip and takes no lock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import socket
import time
from collections import Counter as Tally
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import sqlalchemy as sa
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from fastapi import FastAPI
from prometheus_client import Counter, Histogram
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session

from coffer_kit.app import base_app
from coffer_kit.db import Database, DatabaseState, KeyedRead, database_check, writer
from coffer_kit.health import health_router
from coffer_kit.ids import WEBHOOK_ATTEMPT, new_id
from coffer_kit.metrics import metrics_router, register_gauge
from coffer_kit.state import clear_state, install_state, installed_state
from coffer_kit.timeutil import as_utc, utcnow
from coffer_kit.tracing import tracer, tracing_enabled
from coffer_kit.webhooks import DELIVERY_TIMEOUT_SECONDS, EVENT_TYPES, RESPONSE_KEEP_BYTES
from coffer_kit.wire import SYSTEM
from coffer_metadata import events as outbox
from coffer_metadata.config import Settings
from coffer_metadata.models import Event, Folder
from coffer_metadata.models import WebhookAttempt as AttemptRow
from coffer_metadata.models import WebhookDelivery as DeliveryRow
from coffer_metadata.models import WebhookEndpoint as EndpointRow
from coffer_metadata.webhooks import service
from coffer_metadata.webhooks.safety import AddressPolicy, RefusedAddress, literal_address
from coffer_metadata.webhooks.secrets import SecretBox, signatures

log = logging.getLogger("coffer.metadata.webhooks")
T = TypeVar("T")

_events = Event.__table__  # type: ignore[attr-defined]
_endpoints = EndpointRow.__table__  # type: ignore[attr-defined]
_deliveries = DeliveryRow.__table__  # type: ignore[attr-defined]
_attempts = AttemptRow.__table__  # type: ignore[attr-defined]
_folders = Folder.__table__  # type: ignore[attr-defined]

# Events fanned out per transaction, and due deliveries looked at per claim.
FAN_OUT_BATCH = 500
CLAIM_WINDOW = 500
# A dispatcher alone on a quick endpoint leases up to this many times its concurrency bound.
PREFETCH = 8
# A send slower than this (or failing) marks its endpoint slow: no prefetch for it.
QUICK_SECONDS = 1.0
# How often deliveries past their retry window are given up (those whose record never
# happened: a dispatcher that died at each attempt).
EXPIRE_EVERY_SECONDS = 60.0
# Parent links followed to decide whether a folder is inside an endpoint's folder.
MAX_FOLDER_DEPTH = 1000
USER_AGENT = "Coffer-Webhooks/1"

# The cycle's statements, built once: an expression built and keyed for every call costs
# several times a prebuilt one's execution, and a cycle runs a dozen (bench/results/journal.md,
# "What changed at noon, priced A/B in one session").
_IDS = "ids"
_PENDING_EVENTS = (
    sa.select(_events)
    .where(_events.c.dispatched.is_(False))
    .order_by(_events.c.created_at, _events.c.id)
    .limit(FAN_OUT_BATCH)
)
_ORG_ENDPOINTS = (
    sa.select(
        _endpoints.c.id,
        _endpoints.c.organization_id,
        _endpoints.c.events,
        _endpoints.c.folder_id,
        _endpoints.c.created_at,
    )
    .where(
        _endpoints.c.organization_id.in_(sa.bindparam(_IDS, expanding=True)), _endpoints.c.enabled.is_(True)
    )
    .order_by(_endpoints.c.created_at)
)
_FOLDER_PARENT = sa.select(_folders.c.parent_id).where(_folders.c.id == sa.bindparam("folder"))
_UNDISPATCHED = sa.select(_events.c.id).where(
    _events.c.id.in_(sa.bindparam(_IDS, expanding=True)), _events.c.dispatched.is_(False)
)
_UNDISPATCHED_SKIP_LOCKED = _UNDISPATCHED.with_for_update(skip_locked=True)
_NEW_DELIVERIES = sa.insert(_deliveries)
_MARK_DISPATCHED = (
    sa.update(_events).where(_events.c.id.in_(sa.bindparam(_IDS, expanding=True))).values(dispatched=True)
)
_LEASED = (
    sa.select(_deliveries.c.endpoint_id, sa.func.count())
    .where(_deliveries.c.status == "pending", _deliveries.c.lease_until > sa.bindparam("now"))
    .group_by(_deliveries.c.endpoint_id)
)
_FREE = sa.or_(_deliveries.c.lease_until.is_(None), _deliveries.c.lease_until < sa.bindparam("now"))
_DUE_FROM = _deliveries.join(_endpoints, _endpoints.c.id == _deliveries.c.endpoint_id)
_DUE_WHERE = (
    _deliveries.c.status == "pending",
    _deliveries.c.next_attempt_at <= sa.bindparam("now"),
    _FREE,
    _endpoints.c.enabled.is_(True),
)
_DUE = (
    sa.select(_deliveries.c.id, _deliveries.c.endpoint_id, _deliveries.c.organization_id)
    .select_from(_DUE_FROM)
    .where(*_DUE_WHERE)
    .order_by(_deliveries.c.next_attempt_at)
    .limit(CLAIM_WINDOW)
)
# Whether a cycle could find anything to fan out or lease: an event not yet dispatched, or a
# delivery _DUE would answer. One indexed read on the event loop, where a cycle's plan is a
# worker-thread trip and three reads: an idle dispatcher asks this ten times a second.
_WORK_WAITING = KeyedRead(
    sa.select(
        sa.or_(
            sa.exists().where(_events.c.dispatched.is_(False)),
            sa.exists(sa.select(_deliveries.c.id).select_from(_DUE_FROM).where(*_DUE_WHERE)),
        ).label("waiting")
    )
)
_DUE_ELSEWHERE = _DUE.where(_deliveries.c.endpoint_id.not_in(sa.bindparam("saturated", expanding=True)))
_LEASE = (
    sa.update(_deliveries)
    .where(_deliveries.c.id.in_(sa.bindparam(_IDS, expanding=True)), _deliveries.c.status == "pending", _FREE)
    .values(lease_token=sa.bindparam("token"), lease_until=sa.bindparam("until"))
)
_LEASED_JOBS = (
    sa.select(
        _deliveries,
        _endpoints.c.url,
        _endpoints.c.secret,
        _endpoints.c.previous_secret,
        _endpoints.c.previous_secret_expires_at,
    )
    .join(_endpoints, _endpoints.c.id == _deliveries.c.endpoint_id)
    .where(_deliveries.c.lease_token == sa.bindparam("token"))
)
_RELEASE = (
    sa.update(_deliveries)
    .where(
        _deliveries.c.id.in_(sa.bindparam(_IDS, expanding=True)),
        _deliveries.c.lease_token.in_(sa.bindparam("tokens", expanding=True)),
    )
    .values(lease_token=None, lease_until=None)
)
_EXISTING = sa.select(_deliveries.c.id).where(_deliveries.c.id.in_(sa.bindparam(_IDS, expanding=True)))
_RECORD = (
    sa.update(_deliveries)
    .where(_deliveries.c.id == sa.bindparam("b_id"), _deliveries.c.lease_token == sa.bindparam("b_token"))
    .values(
        status=sa.bindparam("b_status"),
        attempts=sa.bindparam("b_attempts"),
        next_attempt_at=sa.bindparam("b_next"),
        lease_token=None,
        lease_until=None,
    )
)
_NEW_ATTEMPTS = sa.insert(_attempts)
_MARKED_FAILING = sa.select(_endpoints.c.id).where(
    _endpoints.c.id.in_(sa.bindparam(_IDS, expanding=True)), _endpoints.c.failing_since.is_not(None)
)

DELIVERIES = Counter(
    "coffer_webhook_deliveries_total",
    "Webhook delivery attempts by result: succeeded (2xx), failed (another status), gone (410: the "
    "endpoint is disabled), error (no answer: refused address, connection, timeout).",
    ["result"],
)
LATENCY = Histogram(
    "coffer_webhook_delivery_seconds",
    "Time from sending a webhook to its answer (or failure).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


class PublicOnlyResolver(AbstractResolver):
    """aiohttp's resolver, refusing a host if any address it resolves to is internal (safety.py:
    aiohttp connects to exactly the addresses checked here). Here, not in safety.py: the API's
    processes never load aiohttp."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            self.policy.check(result["host"])
        return results

    async def close(self) -> None:
        await self._inner.close()


@dataclass(slots=True)
class Job:
    """A claimed delivery, with what sending it needs."""

    delivery_id: str
    endpoint_id: str
    org_id: str
    event_id: str
    event_type: str
    body: bytes
    trace: str | None
    attempts: int
    retry_until: datetime
    url: str
    secrets: list[str]
    lease_token: str
    lease_until: datetime


@dataclass(slots=True)
class Outcome:
    status: int | None
    error: str | None
    response: str | None
    latency_ms: int
    started_at: datetime


@dataclass(slots=True)
class _FanOut:
    """Events to mark dispatched, and the delivery rows they make."""

    event_ids: list[str]
    deliveries: list[dict[str, Any]]


@dataclass(slots=True)
class _Candidate:
    """A delivery about to be made, as the claim's read answers one that exists."""

    id: str
    endpoint_id: str
    organization_id: str


@dataclass(slots=True)
class _Record:
    """An ended send, as rows: the delivery's next step (bound parameters) and the attempt."""

    job: Job
    ok: bool
    gone: bool
    delivery: dict[str, Any]
    attempt: dict[str, Any]


@dataclass
class Dispatcher:
    settings: Settings
    database: Database
    engine: Engine = field(init=False)
    box: SecretBox = field(init=False)
    policy: AddressPolicy = field(init=False)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.engine = self.database.engine
        self.box = SecretBox(self.settings.webhook_secret())
        self.policy = AddressPolicy(self.settings.webhook_networks())
        self.schedule = self.settings.retry_schedule()
        self.postgresql = self.engine.dialect.name == "postgresql"
        self._wake = asyncio.Event()
        self._stopping = False
        self._http: aiohttp.ClientSession | None = None
        self._expired_at = 0.0
        # Leased and not yet sent (by endpoint), sending, sent and not yet recorded, and leases
        # to give back: what this dispatcher holds.
        self._queued: dict[str, deque[Job]] = {}
        self._sending: dict[str, int] = {}
        self._ended: list[tuple[Job, Outcome]] = []
        self._released: list[Job] = []
        self._slow: set[str] = set()
        self._more = False

    # The loop -------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the HTTP client the deliveries go through."""
        connector = aiohttp.TCPConnector(
            resolver=PublicOnlyResolver(self.policy), use_dns_cache=False, limit=0, ttl_dns_cache=None
        )
        # trust_env stays off: no proxy from the environment carries a webhook elsewhere.
        self._http = aiohttp.ClientSession(connector=connector, headers={"User-Agent": USER_AGENT})

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def run(self) -> None:
        """Cycle (record, fan out, claim) and send until stopped."""
        await self.open()
        try:
            while not self._stopping:
                started = time.monotonic()
                try:
                    await self.step()
                except Exception:
                    log.exception("webhook dispatch failed; retrying")
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.metadata_webhook_poll_seconds)
                self._wake.clear()
                rest = self.settings.metadata_webhook_cycle_gap_seconds - (time.monotonic() - started)
                if rest > 0 and not self._stopping:
                    await asyncio.sleep(rest)  # a rate bound: what ends meanwhile joins the cycle
        finally:
            await self._drain()
            await self.close()

    async def step(self, *, claim: bool = True) -> None:
        """One cycle: record the sends that ended and release the leases given back, fan new
        events out, lease the deliveries there is room for (one transaction), then send. With
        nothing to record or release, the cycle runs only if one read says it would find
        something to fan out or lease."""
        ended, self._ended = self._ended, []
        released, self._released = self._released, []
        free = self._room() if claim else 0
        if ended or released or (free and await self._work_waiting(utcnow())):
            await self._cycle(ended, released, free)
        if time.monotonic() - self._expired_at > EXPIRE_EVERY_SECONDS:
            self._expired_at = time.monotonic()
            await asyncio.to_thread(_untraced, self.expire)
        self._pump()

    async def _work_waiting(self, now: datetime) -> bool:
        """Whether an event waits to be fanned out or a delivery is due at ``now``."""
        row = await _WORK_WAITING.first(self.database, {"now": now})
        return bool(row and row.waiting)

    async def _cycle(self, ended: list[tuple[Job, Outcome]], released: list[Job], free: int) -> None:
        held = self._held()
        for job in [*(job for job, _ in ended), *released]:
            held[job.endpoint_id] = held.get(job.endpoint_id, 0) + 1
        try:
            jobs = await asyncio.to_thread(_untraced, self.cycle, ended, released, free, held)
        except BaseException:
            self._ended[:0], self._released[:0] = ended, released  # the next cycle tries again
            raise
        for job in jobs:
            self._queued.setdefault(job.endpoint_id, deque()).append(job)
        if self._more:
            self._wake.set()  # more than one batch of events was waiting

    def _room(self) -> int:
        """How many more deliveries this dispatcher may lease: what it holds is bounded."""
        held = sum(map(len, self._queued.values())) + len(self.tasks) + len(self._ended)
        return max(self.settings.metadata_webhook_concurrency * PREFETCH - held, 0)

    def _pump(self) -> None:
        """Start queued sends while there is room: at most the endpoint bound of one endpoint
        and the dispatcher's concurrency in all, endpoints in turn."""
        cap = self.settings.metadata_webhook_endpoint_concurrency
        usable = utcnow() + timedelta(seconds=DELIVERY_TIMEOUT_SECONDS + 1)
        started = True
        while started and len(self.tasks) < self.settings.metadata_webhook_concurrency:
            started = False
            for endpoint_id, queue in list(self._queued.items()):
                if self._sending.get(endpoint_id, 0) >= cap:
                    continue
                job = queue.popleft()
                if not queue:
                    del self._queued[endpoint_id]
                started = True
                if job.lease_until < usable:
                    self._released.append(job)  # its lease could end mid-send: give it back
                    continue
                self._sending[endpoint_id] = self._sending.get(endpoint_id, 0) + 1
                task = asyncio.create_task(self._deliver(job))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                if len(self.tasks) >= self.settings.metadata_webhook_concurrency:
                    break

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def _drain(self) -> None:
        """Let sends in flight finish (each ends within 10 s), record them and give back the
        leases of what was never sent, so another dispatcher sends those at once."""
        self._released.extend(job for queue in self._queued.values() for job in queue)
        self._queued.clear()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=DELIVERY_TIMEOUT_SECONDS + 2)
        for task in set(self.tasks):
            task.cancel()
        try:
            await self.step(claim=False)
        except Exception:
            log.exception("webhook dispatcher could not record its last sends; their leases end")

    # The cycle --------------------------------------------------------------------------

    def cycle(
        self, ended: list[tuple[Job, Outcome]], released: list[Job], free: int, held: dict[str, int]
    ) -> list[Job]:
        """Record ``ended``, release ``released``, fan out, and lease up to ``free`` due
        deliveries (``held``: the leases this dispatcher holds, by endpoint).

        Everything that can be is worked out first from reads (the events' deliveries and
        bodies, the attempts' rows, which deliveries to lease); the write transaction, taken
        only when there is something to write, then runs a few statements and commits: on
        SQLite the API's uploads wait while it holds the lock."""
        now = utcnow()
        fan = self._plan_fan_out(now) if free > 0 else _FanOut([], [])
        # The leases that end in this transaction, before the new ones are taken.
        ending = Tally(job.endpoint_id for job in [*(job for job, _ in ended), *released])
        picked = self._plan_claim(now, free, held, fan, ending) if free > 0 else []
        records = [self._plan_record(job, outcome, now) for job, outcome in ended]
        health = self._plan_health(records)
        if not (records or released or fan.event_ids or picked):
            return []
        with Session(writer(self.engine)) as session:
            connection = session.connection()
            if records:
                self._write_records(connection, records)
                self._write_health(session, health, now)
            if released:
                self._release(connection, released)
            if fan.event_ids:
                self._write_fan_out(connection, fan)
            token = self._lease(connection, picked, now) if picked else None
            session.commit()
        self._more = len(fan.event_ids) >= FAN_OUT_BATCH  # (set in a worker thread: read by step)
        if token is None:
            return []
        try:
            return self._leased(token, now)
        except Exception:  # committed: raising would have step record the same sends again
            log.exception("webhook dispatcher could not read what it leased; sent once the lease ends")
            return []

    def _release(self, connection: Connection, jobs: list[Job]) -> None:
        connection.execute(
            _RELEASE,
            {_IDS: [j.delivery_id for j in jobs], "tokens": list({j.lease_token for j in jobs})},
        )

    # Fan-out ----------------------------------------------------------------------------

    def _plan_fan_out(self, now: datetime) -> _FanOut:
        """The deliveries of up to FAN_OUT_BATCH events not yet dispatched (reads only)."""
        with self.engine.connect() as connection:
            rows = list(connection.execute(_PENDING_EVENTS))
            if not rows:
                return _FanOut([], [])
            endpoints: dict[str, list[_Subscription]] = {}
            for found in connection.execute(
                _ORG_ENDPOINTS, {_IDS: list({row.organization_id for row in rows})}
            ):
                endpoints.setdefault(found.organization_id, []).append(_Subscription.of(found))
            tree = _Tree(connection, rows)
            deliveries = []
            for row in rows:
                if row.type not in EVENT_TYPES:
                    continue  # an endpoint's own changes are audited, not sent
                wanted = endpoints.get(row.organization_id, ())
                if not wanted:
                    continue
                data = json.loads(row.data)
                changes = json.loads(row.changes) if row.changes else {}
                kind = row.type.partition(".")[0]
                created_at = as_utc(row.created_at)
                for endpoint in wanted:
                    if not endpoint.wants(row.type, created_at, tree, kind, data, changes):
                        continue
                    body = service.body_of(
                        event_id=row.id,
                        type=row.type,
                        created_at=created_at,
                        org_id=row.organization_id,
                        data={kind: data},
                    )
                    deliveries.append(
                        service.new_delivery(
                            endpoint_id=endpoint.id,
                            org_id=row.organization_id,
                            event_id=row.id,
                            type=row.type,
                            body=body,
                            trace=row.trace,
                            now=now,
                            retry_for=self.settings.metadata_webhook_retry_for_seconds,
                        )
                    )
        return _FanOut([row.id for row in rows], deliveries)

    def _write_fan_out(self, connection: Connection, fan: _FanOut) -> None:
        """Insert the deliveries of the planned events still not dispatched, and mark them: on
        PostgreSQL those another dispatcher holds are skipped (``FOR UPDATE SKIP LOCKED``);
        SQLite has one writer. The unique (endpoint, event) pair is the last word."""
        query = _UNDISPATCHED_SKIP_LOCKED if self.postgresql else _UNDISPATCHED
        still = {row.id for row in connection.execute(query, {_IDS: fan.event_ids})}
        deliveries = [row for row in fan.deliveries if row["event_id"] in still]
        if deliveries:
            connection.execute(_NEW_DELIVERIES, deliveries)
        if still:
            connection.execute(_MARK_DISPATCHED, {_IDS: list(still)})

    def expire(self) -> int:
        """Give up pending deliveries past their retry window that no dispatcher holds."""
        now = utcnow()
        d = _deliveries
        with Session(writer(self.engine)) as session:
            expired = (
                session.connection()
                .execute(
                    sa.update(d)
                    .where(
                        d.c.status == "pending",
                        d.c.retry_until < now,
                        sa.or_(d.c.lease_until.is_(None), d.c.lease_until < now),
                    )
                    .values(status="failed", next_attempt_at=None)
                )
                .rowcount
            )
            session.commit()
        return int(expired or 0)

    # Claim ------------------------------------------------------------------------------

    def claim(self, free: int) -> list[Job]:
        """Lease up to ``free`` due deliveries, in a transaction of its own."""
        now = utcnow()
        picked = self._plan_claim(now, free, self._held(), _FanOut([], []), Tally())
        if not picked:
            return []
        with Session(writer(self.engine)) as session:
            token = self._lease(session.connection(), picked, now)
            session.commit()
        return self._leased(token, now)

    def _plan_claim(
        self, now: datetime, free: int, held: dict[str, int], fan: _FanOut, ending: Tally[str]
    ) -> list[str]:
        """Up to ``free`` due deliveries to lease (reads only), those ``fan`` is about to make
        included: organizations in turn, each endpoint within its bound (PREFETCH times it
        where this dispatcher alone holds the endpoint's leases and its last send there was
        quick). ``held``: this dispatcher's leases by endpoint, ``ending`` among them those
        the transaction ends first."""
        cap = self.settings.metadata_webhook_endpoint_concurrency
        slow = frozenset(self._slow)
        with self.engine.connect() as read:
            leased: dict[str, int] = dict(read.execute(_LEASED, {"now": now}).all())
            alone = {e for e, count in leased.items() if count <= held.get(e, 0)}
            busy = {e: count - ending[e] for e, count in leased.items() if count > ending[e]}

            def bound(endpoint_id: str) -> int:
                quick = endpoint_id not in slow
                return (
                    cap * PREFETCH if quick and (endpoint_id in alone or endpoint_id not in leased) else cap
                )

            saturated = [endpoint for endpoint, count in busy.items() if count >= bound(endpoint)]
            due = (
                read.execute(_DUE_ELSEWHERE, {"now": now, "saturated": saturated})
                if saturated
                else read.execute(_DUE, {"now": now})
            )
            candidates: list[Any] = list(due.all())
        candidates += [
            _Candidate(row["id"], row["endpoint_id"], row["organization_id"]) for row in fan.deliveries
        ]
        return _fair_pick(candidates, busy=busy, cap=bound, free=free)

    def _lease(self, connection: Connection, picked: list[str], now: datetime) -> str:
        """Lease ``picked`` where no lease holds them (another dispatcher may have been first);
        answers the lease's token."""
        token = secrets.token_hex(16)
        until = now + timedelta(seconds=self.settings.metadata_webhook_lease_seconds)
        connection.execute(_LEASE, {_IDS: picked, "now": now, "token": token, "until": until})
        return token

    def _leased(self, token: str, now: datetime) -> list[Job]:
        """The deliveries a committed lease holds, with their endpoints' URL and secrets: read
        after the commit, not in the write transaction (no other dispatcher changes a row it
        does not hold, and on SQLite the uploads wait while that transaction holds the lock)."""
        with self.engine.connect() as read:
            return self._jobs(list(read.execute(_LEASED_JOBS, {"token": token}).all()), now)

    def _held(self) -> dict[str, int]:
        """Leases this dispatcher holds, by endpoint (queued or sending)."""
        held = dict(self._sending)
        for endpoint_id, queue in self._queued.items():
            held[endpoint_id] = held.get(endpoint_id, 0) + len(queue)
        return held

    def _jobs(self, rows: list[Any], now: datetime) -> list[Job]:
        """The leased rows as jobs, each endpoint's secrets opened once."""
        opened: dict[str, list[str]] = {}
        return [self._job(row, now, opened) for row in rows]

    def _job(self, row: Any, now: datetime, opened: dict[str, list[str]]) -> Job:
        keys = opened.get(row.endpoint_id)
        if keys is None:
            keys = opened[row.endpoint_id] = [self.box.open(row.secret)]
            expires = row.previous_secret_expires_at
            if row.previous_secret and expires is not None and as_utc(expires) > now:
                keys.append(self.box.open(row.previous_secret))
        return Job(
            delivery_id=row.id,
            endpoint_id=row.endpoint_id,
            org_id=row.organization_id,
            event_id=row.event_id,
            event_type=row.event_type,
            body=row.body.encode(),
            trace=row.trace,
            attempts=row.attempts,
            retry_until=as_utc(row.retry_until),
            url=row.url,
            secrets=keys,
            lease_token=row.lease_token,
            lease_until=as_utc(row.lease_until),
        )

    # Send and record --------------------------------------------------------------------

    async def _deliver(self, job: Job) -> None:
        outcome: Outcome | None = None
        try:
            with _span(job) as span:
                outcome = await self.send(job)
                if span is not None:
                    if outcome.status is not None:
                        span.set_attribute("http.response.status_code", outcome.status)
                    if outcome.error:
                        span.set_attribute("error.type", outcome.error[:200])
        except Exception:
            log.exception("webhook delivery crashed", extra={"delivery_id": job.delivery_id})
        finally:
            self._sending[job.endpoint_id] -= 1
            if not self._sending[job.endpoint_id]:
                del self._sending[job.endpoint_id]
            if outcome is None:  # never sent: its lease goes back
                self._released.append(job)
            else:
                self._ended.append((job, outcome))
                answered = outcome.status is not None and outcome.status < 500
                if answered and outcome.latency_ms < QUICK_SECONDS * 1000:
                    self._slow.discard(job.endpoint_id)
                else:
                    self._slow.add(job.endpoint_id)
            self._pump()
            self._wake.set()

    async def send(self, job: Job) -> Outcome:
        """POST the delivery once, signed; never follows a redirect, reads at most 1 KiB."""
        assert self._http is not None
        started_at, start = utcnow(), time.monotonic()
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "webhook-id": job.event_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signatures(
                job.secrets, msg_id=job.event_id, timestamp=timestamp, body=job.body
            ),
        }
        status: int | None = None
        error: str | None = None
        response: str | None = None
        try:
            literal = literal_address(urlsplit(job.url).hostname or "")
            if literal is not None:
                self.policy.check(literal)
            async with self._http.post(
                job.url,
                data=job.body,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=DELIVERY_TIMEOUT_SECONDS),
            ) as answer:
                status = answer.status
                response = (await _read_some(answer.content, RESPONSE_KEEP_BYTES)).decode("utf-8", "replace")
        except TimeoutError:
            error = f"no answer within {DELIVERY_TIMEOUT_SECONDS:g} s"
        except OSError as exc:  # a refused address (RefusedAddress), and aiohttp's connection errors
            error = _why(exc)
        except aiohttp.ClientError as exc:
            error = f"{type(exc).__name__}: {exc}"
        latency = time.monotonic() - start
        LATENCY.observe(latency)
        if status is None:
            DELIVERIES.labels("error").inc()
        elif 200 <= status < 300:
            DELIVERIES.labels("succeeded").inc()
        else:
            DELIVERIES.labels("gone" if status == 410 else "failed").inc()
        return Outcome(status, error and error[:512], response, int(latency * 1000), started_at)

    def record(self, done: list[tuple[Job, Outcome]]) -> None:
        """The attempts in the log, the deliveries' next steps, the endpoints' health, in a
        transaction of its own (the loop records in its cycle)."""
        now = utcnow()
        records = [self._plan_record(job, outcome, now) for job, outcome in done]
        health = self._plan_health(records)
        with Session(writer(self.engine)) as session:
            self._write_records(session.connection(), records)
            self._write_health(session, health, now)
            session.commit()

    def _plan_record(self, job: Job, outcome: Outcome, now: datetime) -> _Record:
        """An attempt's row and its delivery's next step: retried on the schedule until its
        window ends, done on a 2xx, failed on a 410."""
        attempt = job.attempts + 1
        ok = outcome.status is not None and 200 <= outcome.status < 300
        gone = outcome.status == 410
        if ok:
            status, next_at = "succeeded", None
        elif gone:
            status, next_at = "failed", None
        else:
            delay = self.schedule[min(attempt - 1, len(self.schedule) - 1)] * random.uniform(0.9, 1.1)
            next_at = now + timedelta(seconds=delay)
            status = "pending" if next_at <= job.retry_until else "failed"
            next_at = next_at if status == "pending" else None
        return _Record(
            job=job,
            ok=ok,
            gone=gone,
            delivery={
                "b_id": job.delivery_id,
                "b_token": job.lease_token,
                "b_status": status,
                "b_attempts": attempt,
                "b_next": next_at,
            },
            attempt={
                "id": new_id(WEBHOOK_ATTEMPT),
                "delivery_id": job.delivery_id,
                "endpoint_id": job.endpoint_id,
                "attempt": attempt,
                "result": "succeeded" if ok else "failed",
                "response_status": outcome.status,
                "error": outcome.error,
                "latency_ms": outcome.latency_ms,
                "response": outcome.response,
                "created_at": outcome.started_at,
            },
        )

    def _write_records(self, connection: Connection, records: list[_Record]) -> None:
        """Each delivery's next step where this dispatcher still holds its lease, and every
        attempt whose delivery still exists (its endpoint may have been deleted meanwhile)."""
        ids = [r.job.delivery_id for r in records]
        existing = {row.id for row in connection.execute(_EXISTING, {_IDS: ids})}
        connection.execute(_RECORD, [r.delivery for r in records])
        attempts = [r.attempt for r in records if r.job.delivery_id in existing]
        if attempts:
            connection.execute(_NEW_ATTEMPTS, attempts)

    def _plan_health(self, records: list[_Record]) -> dict[str, list[_Record]]:
        """The endpoints whose health the records may change (reads only): those with a
        failure, and those with a success that are marked failing. Most rounds: none."""
        if not records:
            return {}
        by_endpoint: dict[str, list[_Record]] = {}
        for record in records:
            by_endpoint.setdefault(record.job.endpoint_id, []).append(record)
        failed = {e for e, rs in by_endpoint.items() if not all(r.ok for r in rs)}
        with self.engine.connect() as read:
            marked = {
                row.id for row in read.execute(_MARKED_FAILING, {_IDS: list(set(by_endpoint) - failed)})
            }
        return {e: rs for e, rs in by_endpoint.items() if e in failed or e in marked}

    def _write_health(self, session: Session, health: dict[str, list[_Record]], now: datetime) -> None:
        """Each endpoint's failing time, cleared by a success; 410 disables it at once, and so do
        failures for COFFER_METADATA_WEBHOOK_DISABLE_AFTER_SECONDS (audited)."""
        if not health:
            return
        for row in session.scalars(sa.select(EndpointRow).where(_endpoints.c.id.in_(list(health)))):
            for record in health[row.id]:
                self._endpoint_health(session, row, ok=record.ok, gone=record.gone, now=now)

    def _endpoint_health(
        self, session: Session, row: EndpointRow, *, ok: bool, gone: bool, now: datetime
    ) -> None:
        if ok:
            if row.failing_since is not None:
                row.failing_since = None
                session.add(row)
            return
        if row.failing_since is None:
            row.failing_since = now
        failing_for = (now - as_utc(row.failing_since)).total_seconds()
        reason = (
            "gone"
            if gone
            else "failing"
            if failing_for >= self.settings.metadata_webhook_disable_after_seconds
            else None
        )
        if reason is not None and row.enabled:
            row.enabled, row.disabled_reason, row.updated_at = False, reason, now
            session.add(row)
            session.flush()
            outbox.record(
                session,
                org_id=row.organization_id,
                type="webhook.disabled",
                data=service.view(row),
                actor=SYSTEM,
                changes={"enabled": True},
                now=now,
            )
            log.warning("webhook endpoint disabled", extra={"endpoint_id": row.id, "reason": reason})
        session.add(row)

    # Metrics ----------------------------------------------------------------------------

    def backlog(self) -> tuple[int, float]:
        """Events and deliveries waiting (due now), and the age in seconds of the oldest."""
        now = utcnow()
        d = _deliveries
        with self.engine.connect() as read:
            events_waiting, oldest_event = read.execute(
                sa.select(sa.func.count(), sa.func.min(_events.c.created_at)).where(
                    _events.c.dispatched.is_(False)
                )
            ).one()
            due, oldest_due = read.execute(
                sa.select(sa.func.count(), sa.func.min(d.c.next_attempt_at)).where(
                    d.c.status == "pending", d.c.next_attempt_at <= now
                )
            ).one()
        oldest = [as_utc(t) for t in (oldest_event, oldest_due) if t is not None]
        age = max((now - min(oldest)).total_seconds(), 0.0) if oldest else 0.0
        return int(events_waiting) + int(due), age


@dataclass(slots=True, frozen=True)
class _Subscription:
    """An enabled endpoint as the fan-out matches events to it."""

    id: str
    events: frozenset[str]
    created_at: datetime
    folder_id: str | None

    @classmethod
    def of(cls, row: Any) -> _Subscription:
        return cls(row.id, frozenset(json.loads(row.events)), as_utc(row.created_at), row.folder_id)

    def wants(
        self,
        type: str,
        created_at: datetime,
        tree: _Tree,
        kind: str,
        data: dict[str, Any],
        changes: dict[str, Any],
    ) -> bool:
        """Whether it subscribed to an event: its type, its time (a change made before the
        endpoint existed is not), its folder filter."""
        if type not in self.events or created_at < self.created_at:
            return False
        return not self.folder_id or tree.touches(kind, data, changes, self.folder_id)


def _fair_pick(
    candidates: Iterable[Any], *, busy: dict[str, int], cap: int | Callable[[str], int], free: int
) -> list[str]:
    """Delivery ids to claim: organizations in turn (one each per round), each endpoint within
    ``cap`` (or ``cap(endpoint_id)``) including what is already leased, ``free`` in all."""
    bound = cap if callable(cap) else lambda _endpoint_id: cap
    by_org: dict[str, list[Any]] = {}
    for row in candidates:
        by_org.setdefault(row.organization_id, []).append(row)
    taken = dict(busy)
    picked: list[str] = []
    queues = [list(reversed(rows)) for rows in by_org.values()]
    while queues and len(picked) < free:
        still = []
        for queue in queues:
            while queue:
                row = queue.pop()
                if taken.get(row.endpoint_id, 0) < bound(row.endpoint_id):
                    taken[row.endpoint_id] = taken.get(row.endpoint_id, 0) + 1
                    picked.append(row.id)
                    break
            if queue:
                still.append(queue)
            if len(picked) >= free:
                break
        queues = still
    return picked


class _Tree:
    """Parent links of folders, from the database and from the batch's own folder events (a
    deleted folder is gone from the table, but its event still says where it was)."""

    def __init__(self, connection: Connection, rows: list[Any]) -> None:
        self.connection = connection
        self.parents: dict[str, str | None] = {}
        self.from_events: dict[str, str | None] = {}
        for row in rows:
            if row.type.startswith("folder."):
                data = json.loads(row.data)
                self.from_events[data["id"]] = data.get("parentId")

    def parent(self, folder_id: str) -> str | None:
        if folder_id not in self.parents:
            found = self.connection.execute(_FOLDER_PARENT, {"folder": folder_id}).first()
            self.parents[folder_id] = found.parent_id if found else self.from_events.get(folder_id)
        return self.parents[folder_id]

    def inside(self, folder_id: str | None, root: str) -> bool:
        """Whether ``folder_id`` is ``root`` or below it."""
        node = folder_id
        for _ in range(MAX_FOLDER_DEPTH):
            if node is None:
                return False
            if node == root:
                return True
            node = self.parent(node)
        return False

    def touches(self, kind: str, data: dict[str, Any], changes: dict[str, Any], root: str) -> bool:
        """Whether an event is inside ``root``'s subtree (before or after a move)."""
        if kind == "asset":
            places = (
                [data.get("folderId"), changes.get("folderId")]
                if "folderId" in changes
                else [data.get("folderId")]
            )
        else:
            places = [data.get("id")]
            if "parentId" in changes:
                places.append(changes.get("parentId"))
        return any(self.inside(place, root) for place in places if place)


def _untraced(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` without spans: the loop polls ten times a second, and no instrumentation
    should ever make each poll a trace of its own (today's SQLAlchemy instrumentation makes
    no span without a parent: this is a guard, not a measured fix)."""
    if not tracing_enabled():  # then nothing is instrumented, and there is nothing to suppress
        return work(*args)
    # Imported with tracing on only: otherwise idle RSS for nothing (wrapt with it;
    # bench/results/journal.md, "Figures moved out of code comments").
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        return work(*args)


def _why(exc: BaseException) -> str:
    """What made a send fail, in words: a refused address says so (aiohttp wraps it)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, RefusedAddress):
            return f"refused: {seen}"
        seen = getattr(seen, "os_error", None) or seen.__cause__
    return str(exc) or type(exc).__name__


async def _read_some(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """Up to ``limit`` bytes of a body; the rest is never read."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await stream.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class _span:
    """A client span per delivery, linked to the trace of the change that caused it (when
    traced); nothing at all otherwise."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._manager: Any = None

    def __enter__(self) -> Any:
        if not tracing_enabled():
            return None
        from opentelemetry import trace
        from opentelemetry.propagate import extract

        links = []
        if self.job.trace:
            context = trace.get_current_span(extract({"traceparent": self.job.trace})).get_span_context()
            if context.is_valid:
                links.append(trace.Link(context))
        self._manager = tracer.start_as_current_span(
            "webhook deliver",
            kind=trace.SpanKind.CLIENT,
            links=links,
            attributes={
                "coffer.webhook.endpoint_id": self.job.endpoint_id,
                "coffer.webhook.delivery_id": self.job.delivery_id,
                "coffer.webhook.event_type": self.job.event_type,
                "coffer.webhook.attempt": self.job.attempts + 1,
            },
        )
        return self._manager.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._manager is not None:
            self._manager.__exit__(*exc)


def create_dispatcher_app(settings: Settings | None = None) -> FastAPI:
    """The dispatcher role: the loop in the lifespan; ``/healthz``, ``/readyz``, ``/metrics``."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A few connections: the loop and the sends' records, not a request pool. Commits do
        # not wait for the disk (``durable=False``): what a crash of the machine loses of them
        # is redone, never lost (the events are metadata's durable writes; a lost fan-out fans
        # out again, a lost claim's lease or record sends again, with the same webhook-id).
        database = Database.open(
            settings.metadata_database_url, pool_size=min(settings.database_pool_size, 4), durable=False
        )
        dispatcher = Dispatcher(settings, database)
        install_state(app, DispatcherState(settings=settings, database=database, dispatcher=dispatcher))
        task = asyncio.create_task(dispatcher.run())
        try:
            yield
        finally:
            dispatcher.stop()
            with suppress(asyncio.CancelledError):
                await task
            clear_state(app)
            await database.aclose()

    app = base_app(
        "coffer-webhooks",
        service="webhooks",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    def engine() -> Engine:
        state = installed_state(app, DispatcherState)
        assert state is not None
        return state.database.engine

    def backlog(index: int) -> list[tuple[list[str], float]]:
        state = installed_state(app, DispatcherState)
        if state is None:
            return []
        try:
            return [([], float(_untraced(state.dispatcher.backlog)[index]))]
        except Exception:  # noqa: BLE001 - a scrape must not fail because the database is down
            return []

    register_gauge(
        "coffer_webhook_queue_depth",
        "Webhook work waiting: events not yet fanned out and deliveries due now.",
        [],
        lambda: backlog(0),
    )
    register_gauge(
        "coffer_webhook_oldest_due_seconds",
        "Age of the oldest webhook event or delivery that is due and not yet sent.",
        [],
        lambda: backlog(1),
    )
    app.include_router(health_router({"database": database_check(engine)}))
    app.include_router(metrics_router())
    return app


@dataclass(slots=True)
class DispatcherState(DatabaseState[Settings]):
    dispatcher: Dispatcher
