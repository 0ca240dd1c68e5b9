"""The dispatcher's process: what it holds (leased, sending, ended, given back), the loop that
runs a cycle of the steps (record, fan out, claim) and the pump that starts the sends
(docs/webhooks.md, "How delivery works")."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter as Tally
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from coffer_kit.contract.timeutil import utcnow
from coffer_kit.db import Database, writer
from coffer_kit.db.engine import database_down
from coffer_kit.tracing import tracing_enabled
from coffer_metadata.config import Settings
from coffer_metadata.webhooks.dispatch import statements as sql
from coffer_metadata.webhooks.dispatch.claim import PREFETCH, Job, lease, leased_jobs, plan_claim, release
from coffer_metadata.webhooks.dispatch.fanout import FanOut, plan_fan_out, write_fan_out
from coffer_metadata.webhooks.dispatch.record import (
    Outcome,
    Record,
    expire_deliveries,
    plan_health,
    plan_record,
    write_health,
    write_records,
)
from coffer_metadata.webhooks.safety import AddressPolicy
from coffer_metadata.webhooks.secrets import SecretBox

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("coffer.metadata.webhooks")
T = TypeVar("T")

# A send slower than this (or failing) marks its endpoint slow: no prefetch for it.
QUICK_SECONDS = 1.0
# How often deliveries past their retry window are given up (those whose record never
# happened: a dispatcher that died at each attempt).
EXPIRE_EVERY_SECONDS = 60.0


@dataclass
class Dispatcher:
    """One dispatcher: the loop, what it holds, and a thin method per step."""

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

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def run(self) -> None:
        """Cycle (record, fan out, claim) and send until stopped."""
        try:
            while not self._stopping:
                started = time.monotonic()
                try:
                    await self.step()
                except Exception:
                    log.exception("webhook dispatch failed; retrying")
                with suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._wake.wait(), self.settings.metadata_webhook_tuning.poll_seconds
                    )
                self._wake.clear()
                rest = self.settings.metadata_webhook_tuning.cycle_gap_seconds - (time.monotonic() - started)
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
            await asyncio.to_thread(untraced, self.expire)
        self._pump()

    async def _work_waiting(self, now: datetime) -> bool:
        """Whether an event waits to be fanned out or a delivery is due at ``now``."""
        row = await sql.WORK_WAITING.first(self.database, {"now": now})
        return bool(row and row.waiting)

    async def _cycle(self, ended: list[tuple[Job, Outcome]], released: list[Job], free: int) -> None:
        held = self._held()
        for job in [*(job for job, _ in ended), *released]:
            held[job.endpoint_id] = held.get(job.endpoint_id, 0) + 1
        try:
            jobs = await asyncio.to_thread(untraced, self.cycle, ended, released, free, held)
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
        return max(self.settings.metadata_webhook_tuning.concurrency * PREFETCH - held, 0)

    def _pump(self) -> None:
        """Start queued sends while there is room: at most the endpoint bound of one endpoint
        and the dispatcher's concurrency in all, endpoints in turn."""
        tuning = self.settings.metadata_webhook_tuning
        cap = tuning.endpoint_concurrency
        usable = utcnow() + timedelta(seconds=tuning.delivery_timeout_seconds + 1)
        started = True
        while started and len(self.tasks) < tuning.concurrency:
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
                if len(self.tasks) >= tuning.concurrency:
                    break

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def _drain(self) -> None:
        """Let sends in flight finish (each ends within the delivery timeout), record them and give back the
        leases of what was never sent, so another dispatcher sends those at once."""
        self._released.extend(job for queue in self._queued.values() for job in queue)
        self._queued.clear()
        if self.tasks:
            timeout = self.settings.metadata_webhook_tuning.delivery_timeout_seconds + 2
            await asyncio.wait(set(self.tasks), timeout=timeout)
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
        retry_for = self.settings.metadata_webhook_retry_for_seconds
        fan = plan_fan_out(self.engine, now=now, retry_for=retry_for) if free > 0 else FanOut([], [])
        # The leases that end in this transaction, before the new ones are taken.
        ending = Tally(job.endpoint_id for job in [*(job for job, _ in ended), *released])
        picked = self._plan_claim(now, free, held, fan, ending) if free > 0 else []
        records = [plan_record(job, outcome, now=now, schedule=self.schedule) for job, outcome in ended]
        health = plan_health(self.engine, records)
        if not (records or released or fan.event_ids or picked):
            return []
        try:
            token = self._write(records, health, released, fan, picked, now)
        except DBAPIError as exc:
            if database_down(exc) or not records:
                raise
            # The database refuses something of one send's record (a NUL in an answer was
            # one): recorded with everyone's, it failed every cycle, and no organization's
            # deliveries moved. Each is recorded alone; one still refused is left to its
            # lease's end (then sent again), and the cycle goes on without them.
            log.exception("webhook dispatcher could not record its sends together; one by one")
            for done in ended:
                try:
                    self.record([done])
                except DBAPIError as one:
                    if database_down(one):
                        raise
                    log.exception("webhook attempt not recorded", extra={"delivery": done[0].delivery_id})
            token = self._write([], {}, released, fan, picked, now)
        self._more = len(fan.event_ids) >= sql.FAN_OUT_BATCH  # (set in a worker thread: read by step)
        if token is None:
            return []
        try:
            return self._leased(picked, token, now)
        except Exception:  # committed: raising would have step record the same sends again
            log.exception("webhook dispatcher could not read what it leased; sent once the lease ends")
            return []

    def _write(
        self,
        records: list[Record],
        health: dict[str, list[Record]],
        released: list[Job],
        fan: FanOut,
        picked: list[str],
        now: datetime,
    ) -> str | None:
        """The cycle's one write transaction; the new leases' token, if any were taken."""
        with Session(writer(self.engine)) as session:
            connection = session.connection()
            if records:
                write_records(connection, records)
                write_health(
                    session,
                    health,
                    now=now,
                    disable_after=self.settings.metadata_webhook_disable_after_seconds,
                )
            if released:
                release(connection, released)
            if fan.event_ids:
                write_fan_out(connection, fan, postgresql=self.postgresql)
            token = self._lease(connection, picked, now) if picked else None
            session.commit()
        return token

    def claim(self, free: int) -> list[Job]:
        """Lease up to ``free`` due deliveries, in a transaction of its own."""
        now = utcnow()
        picked = self._plan_claim(now, free, self._held(), FanOut([], []), Tally())
        if not picked:
            return []
        with Session(writer(self.engine)) as session:
            token = self._lease(session.connection(), picked, now)
            session.commit()
        return self._leased(picked, token, now)

    def record(self, done: list[tuple[Job, Outcome]]) -> None:
        """The attempts in the log, the deliveries' next steps, the endpoints' health, in a
        transaction of its own (the loop records in its cycle)."""
        now = utcnow()
        records = [plan_record(job, outcome, now=now, schedule=self.schedule) for job, outcome in done]
        self._write(records, plan_health(self.engine, records), [], FanOut([], []), [], now)

    def expire(self) -> int:
        """Give up pending deliveries past their retry window that no dispatcher holds."""
        return expire_deliveries(self.engine)

    def _plan_claim(
        self, now: datetime, free: int, held: dict[str, int], fan: FanOut, ending: Tally[str]
    ) -> list[str]:
        return plan_claim(
            self.engine,
            now=now,
            free=free,
            held=held,
            fan=fan,
            ending=ending,
            cap=self.settings.metadata_webhook_tuning.endpoint_concurrency,
            slow=frozenset(self._slow),
        )

    def _lease(self, connection: Connection, picked: list[str], now: datetime) -> str:
        return lease(
            connection, picked, now=now, lease_seconds=self.settings.metadata_webhook_tuning.lease_seconds
        )

    def _leased(self, picked: list[str], token: str, now: datetime) -> list[Job]:
        return leased_jobs(self.engine, picked, token, now=now, box=self.box)

    def _held(self) -> dict[str, int]:
        """Leases this dispatcher holds, by endpoint (queued or sending)."""
        held = dict(self._sending)
        for endpoint_id, queue in self._queued.items():
            held[endpoint_id] = held.get(endpoint_id, 0) + len(queue)
        return held

    # Send -------------------------------------------------------------------------------

    async def _deliver(self, job: Job) -> None:
        outcome: Outcome | None = None
        try:
            from coffer_metadata.webhooks.dispatch.send import delivery_span

            with delivery_span(job) as span:
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
        """POST the delivery once, signed (send.py). The first opens the HTTP client: send.py
        and aiohttp load then, not in a metadata that has no webhook endpoint (7 MiB idle)."""
        from coffer_metadata.webhooks.dispatch import send

        if self._http is None:
            self._http = send.open_client(self.policy)
        timeout = self.settings.metadata_webhook_tuning.delivery_timeout_seconds
        return await send.post(self._http, job, policy=self.policy, timeout=timeout)


def untraced(work: Callable[..., T], *args: Any) -> T:
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
