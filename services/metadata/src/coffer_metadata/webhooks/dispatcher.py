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
   organizations, so a receiver that hangs holds a few slots for 10 s, never the queue.
3. **Send** (safety.py: https, pinned public addresses, no redirects, 10 s, 1 KiB read), then
   **record** the attempt and schedule the retry (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, then
   every 10 h, ±10 %, until about 3 days after the event); 410 disables the endpoint at once,
   5 days of failures too (both audited as ``webhook.disabled``).

The loop wakes every COFFER_METADATA_WEBHOOK_POLL_SECONDS (0.1 s: two indexed reads that find
nothing when idle, and no write lock) and at once when a send ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import random
import secrets
import socket
import time
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
from opentelemetry.instrumentation.utils import suppress_instrumentation
from prometheus_client import Counter, Histogram
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session

from coffer_kit.app import base_app
from coffer_kit.db import Database, DatabaseState, database_check, writer
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
# How often deliveries past their retry window are given up (those whose record never
# happened: a dispatcher that died at each attempt).
EXPIRE_EVERY_SECONDS = 60.0
# Parent links followed to decide whether a folder is inside an endpoint's folder.
MAX_FOLDER_DEPTH = 1000
USER_AGENT = "Coffer-Webhooks/1"

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


@dataclass(slots=True)
class Outcome:
    status: int | None
    error: str | None
    response: str | None
    latency_ms: int
    started_at: datetime


@dataclass
class Dispatcher:
    settings: Settings
    engine: Engine
    box: SecretBox = field(init=False)
    policy: AddressPolicy = field(init=False)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.box = SecretBox(self.settings.webhook_secret())
        self.policy = AddressPolicy(self.settings.webhook_networks())
        self.schedule = self.settings.retry_schedule()
        self.postgresql = self.engine.dialect.name == "postgresql"
        self._wake = asyncio.Event()
        self._stopping = False
        self._http: aiohttp.ClientSession | None = None
        self._expired_at = 0.0
        self._ended: list[tuple[Job, Outcome, asyncio.Future[None]]] = []
        self._recorder: asyncio.Task[None] | None = None

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
        """Fan out, claim and send until stopped."""
        await self.open()
        try:
            while not self._stopping:
                try:
                    await self.step()
                except Exception:
                    log.exception("webhook dispatch failed; retrying")
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.metadata_webhook_poll_seconds)
                self._wake.clear()
        finally:
            await self._drain()
            await self.close()

    async def step(self) -> None:
        """One round: fan new events out, then start the deliveries there is room for."""
        await asyncio.to_thread(_untraced, self.fan_out)
        if time.monotonic() - self._expired_at > EXPIRE_EVERY_SECONDS:
            self._expired_at = time.monotonic()
            await asyncio.to_thread(_untraced, self.expire)
        free = self.settings.metadata_webhook_concurrency - len(self.tasks)
        if free <= 0:
            return
        for job in await asyncio.to_thread(_untraced, self.claim, free):
            task = asyncio.create_task(self._deliver(job))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def _drain(self) -> None:
        """Let sends in flight finish (each ends within 10 s), so their attempts are recorded."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=DELIVERY_TIMEOUT_SECONDS + 2)
        for task in set(self.tasks):
            task.cancel()

    # Fan-out ----------------------------------------------------------------------------

    def fan_out(self) -> int:
        """Make the deliveries of events not yet dispatched; answers how many events it took."""
        with self.engine.connect() as peek:
            pending = peek.execute(
                sa.select(_events.c.id).where(_events.c.dispatched.is_(False)).limit(1)
            ).first()
        if pending is None:
            return 0
        with Session(writer(self.engine)) as session:
            connection = session.connection()
            query = (
                sa.select(_events)
                .where(_events.c.dispatched.is_(False))
                .order_by(_events.c.created_at, _events.c.id)
                .limit(FAN_OUT_BATCH)
            )
            if self.postgresql:
                query = query.with_for_update(skip_locked=True)
            rows = list(connection.execute(query))
            if not rows:
                return 0
            orgs = {row.organization_id for row in rows}
            endpoints: dict[str, list[Any]] = {}
            for endpoint in connection.execute(
                sa.select(
                    _endpoints.c.id,
                    _endpoints.c.organization_id,
                    _endpoints.c.events,
                    _endpoints.c.folder_id,
                    _endpoints.c.created_at,
                )
                .where(_endpoints.c.organization_id.in_(orgs), _endpoints.c.enabled.is_(True))
                .order_by(_endpoints.c.created_at)
            ):
                endpoints.setdefault(endpoint.organization_id, []).append(endpoint)
            tree = _Tree(connection, rows)
            now = utcnow()
            deliveries = []
            for row in rows:
                if row.type not in EVENT_TYPES:
                    continue  # an endpoint's own changes are audited, not sent
                data = json.loads(row.data)
                changes = json.loads(row.changes) if row.changes else {}
                kind = row.type.partition(".")[0]
                for endpoint in endpoints.get(row.organization_id, ()):
                    if not _wants(endpoint, row, tree, kind, data, changes):
                        continue
                    body = service.body_of(
                        event_id=row.id,
                        type=row.type,
                        created_at=as_utc(row.created_at),
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
            if deliveries:
                connection.execute(sa.insert(_deliveries), deliveries)
            ids = [row.id for row in rows]
            connection.execute(sa.update(_events).where(_events.c.id.in_(ids)).values(dispatched=True))
            session.commit()
        if deliveries:
            self._wake.set()
        return len(rows)

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
        """Lease up to ``free`` due deliveries: per endpoint within its bound, organizations in turn."""
        now = utcnow()
        cap = self.settings.metadata_webhook_endpoint_concurrency
        d = _deliveries
        with self.engine.connect() as read:
            busy: dict[str, int] = dict(
                read.execute(
                    sa.select(d.c.endpoint_id, sa.func.count())
                    .where(d.c.status == "pending", d.c.lease_until > now)
                    .group_by(d.c.endpoint_id)
                ).all()
            )
            saturated = [endpoint for endpoint, count in busy.items() if count >= cap]
            due = (
                sa.select(d.c.id, d.c.endpoint_id, d.c.organization_id)
                .join(_endpoints, _endpoints.c.id == d.c.endpoint_id)
                .where(
                    d.c.status == "pending",
                    d.c.next_attempt_at <= now,
                    sa.or_(d.c.lease_until.is_(None), d.c.lease_until < now),
                    _endpoints.c.enabled.is_(True),
                )
                .order_by(d.c.next_attempt_at)
                .limit(CLAIM_WINDOW)
            )
            if saturated:
                due = due.where(d.c.endpoint_id.not_in(saturated))
            candidates = read.execute(due).all()
        picked = _fair_pick(candidates, busy=busy, cap=cap, free=free)
        if not picked:
            return []
        token = secrets.token_hex(16)
        until = now + timedelta(seconds=self.settings.metadata_webhook_lease_seconds)
        with Session(writer(self.engine)) as session:
            connection = session.connection()
            connection.execute(
                sa.update(d)
                .where(
                    d.c.id.in_(picked),
                    d.c.status == "pending",
                    sa.or_(d.c.lease_until.is_(None), d.c.lease_until < now),
                )
                .values(lease_token=token, lease_until=until)
            )
            rows = connection.execute(
                sa.select(
                    d,
                    _endpoints.c.url,
                    _endpoints.c.secret,
                    _endpoints.c.previous_secret,
                    _endpoints.c.previous_secret_expires_at,
                )
                .join(_endpoints, _endpoints.c.id == d.c.endpoint_id)
                .where(d.c.lease_token == token)
            ).all()
            session.commit()
        return [self._job(row, now) for row in rows]

    def _job(self, row: Any, now: datetime) -> Job:
        keys = [self.box.open(row.secret)]
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
        )

    # Send and record --------------------------------------------------------------------

    async def _deliver(self, job: Job) -> None:
        try:
            with _span(job) as span:
                outcome = await self.send(job)
                if span is not None:
                    if outcome.status is not None:
                        span.set_attribute("http.response.status_code", outcome.status)
                    if outcome.error:
                        span.set_attribute("error.type", outcome.error[:200])
            await self._recorded(job, outcome)
        except Exception:
            log.exception("webhook delivery crashed", extra={"delivery_id": job.delivery_id})
        finally:
            self._wake.set()

    async def _recorded(self, job: Job, outcome: Outcome) -> None:
        """Record the attempt with every other that ends meanwhile (``record``): one writer
        task, which takes what queued while it wrote, until nothing is left."""
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ended.append((job, outcome, ended))
        if self._recorder is None or self._recorder.done():
            # A context of its own: no delivery's span is the parent of every record.
            self._recorder = asyncio.create_task(self._record_ended(), context=contextvars.Context())
        await ended

    async def _record_ended(self) -> None:
        while self._ended:
            batch, self._ended = self._ended, []
            try:
                await asyncio.to_thread(self.record, [(job, outcome) for job, outcome, _ in batch])
            except Exception as exc:  # noqa: BLE001 - handed to each waiter (its lease runs out: sent again)
                for *_, ended in batch:
                    if not ended.done():
                        ended.set_exception(exc)
            else:
                for *_, ended in batch:
                    if not ended.done():
                        ended.set_result(None)

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
        """The attempts in the log, the deliveries' next steps, the endpoints' health: one
        transaction for every send that ended since the last (a write lock taken once per
        round, not per delivery: on SQLite the uploads wait for it)."""
        now = utcnow()
        with Session(writer(self.engine)) as session:
            for job, outcome in done:
                self._record(session, job, outcome, now)
            session.commit()

    def _record(self, session: Session, job: Job, outcome: Outcome, now: datetime) -> None:
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
        d = _deliveries
        connection = session.connection()
        updated = connection.execute(
            sa.update(d)
            .where(d.c.id == job.delivery_id, d.c.lease_token == job.lease_token)
            .values(
                status=status,
                attempts=attempt,
                next_attempt_at=next_at,
                lease_token=None,
                lease_until=None,
            )
        ).rowcount
        if (
            not updated
            and connection.execute(sa.select(d.c.id).where(d.c.id == job.delivery_id)).first() is None
        ):
            return  # the endpoint was deleted meanwhile: nothing to record
        connection.execute(
            sa.insert(_attempts).values(
                id=new_id(WEBHOOK_ATTEMPT),
                delivery_id=job.delivery_id,
                endpoint_id=job.endpoint_id,
                attempt=attempt,
                result="succeeded" if ok else "failed",
                response_status=outcome.status,
                error=outcome.error,
                latency_ms=outcome.latency_ms,
                response=outcome.response,
                created_at=outcome.started_at,
            )
        )
        self._endpoint_health(session, job.endpoint_id, ok=ok, gone=gone, now=now)

    def _endpoint_health(
        self, session: Session, endpoint_id: str, *, ok: bool, gone: bool, now: datetime
    ) -> None:
        row = session.get(EndpointRow, endpoint_id)
        if row is None:
            return
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


def _wants(
    endpoint: Any, row: Any, tree: _Tree, kind: str, data: dict[str, Any], changes: dict[str, Any]
) -> bool:
    """Whether an endpoint subscribed to an event: its type, its time (a change made before
    the endpoint existed is not), its folder filter."""
    if row.type not in json.loads(endpoint.events):
        return False
    if as_utc(row.created_at) < as_utc(endpoint.created_at):
        return False
    return not endpoint.folder_id or tree.touches(kind, data, changes, endpoint.folder_id)


def _fair_pick(candidates: Iterable[Any], *, busy: dict[str, int], cap: int, free: int) -> list[str]:
    """Delivery ids to claim: organizations in turn (one each per round), each endpoint within
    ``cap`` including what is already in flight, ``free`` in all."""
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
                if taken.get(row.endpoint_id, 0) < cap:
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
            found = self.connection.execute(
                sa.select(_folders.c.parent_id).where(_folders.c.id == folder_id)
            ).first()
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
        dispatcher = Dispatcher(settings, database.engine)
        install_state(app, DispatcherState(settings=settings, database=database, dispatcher=dispatcher))
        task = asyncio.create_task(dispatcher.run())
        try:
            yield
        finally:
            dispatcher.stop()
            with suppress(asyncio.CancelledError):
                await task
            clear_state(app)
            database.close()

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
