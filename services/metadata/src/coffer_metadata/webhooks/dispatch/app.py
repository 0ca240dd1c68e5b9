"""The dispatcher role (``coffer-metadata dispatch``): the loop in the lifespan, ``/healthz``,
``/readyz`` and ``/metrics`` with the backlog's gauges (docs/webhooks.md, "How delivery
works"; where it runs: docs/architecture.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy.engine import Engine

from coffer_kit.app import base_app
from coffer_kit.contract.timeutil import as_utc, utcnow
from coffer_kit.db import Database, DatabaseState, database_check
from coffer_kit.health import health_router
from coffer_kit.metrics import metrics_router, register_gauge
from coffer_kit.state import clear_state, install_state, installed_state
from coffer_metadata.config import Settings
from coffer_metadata.webhooks.dispatch import statements as sql
from coffer_metadata.webhooks.dispatch.dispatcher import Dispatcher, untraced

# The dispatcher's pool: its loop and the sends' records, not a request pool.
DISPATCHER_POOL_SIZE = 4


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
            settings.metadata_database_url,
            pool_size=min(settings.database_pool_size, DISPATCHER_POOL_SIZE),
            durable=False,
            budget=settings.database_budget(),
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

    def gauge(index: int) -> list[tuple[list[str], float]]:
        state = installed_state(app, DispatcherState)
        if state is None:
            return []
        try:
            return [([], float(untraced(backlog, state.dispatcher.engine)[index]))]
        except Exception:  # noqa: BLE001 - a scrape must not fail because the database is down
            return []

    register_gauge(
        "coffer_webhook_queue_depth",
        "Webhook work waiting: events not yet fanned out and deliveries due now.",
        [],
        lambda: gauge(0),
    )
    register_gauge(
        "coffer_webhook_oldest_due_seconds",
        "Age of the oldest webhook event or delivery that is due and not yet sent.",
        [],
        lambda: gauge(1),
    )
    app.include_router(health_router({"database": database_check(engine)}))
    app.include_router(metrics_router())
    return app


def backlog(engine: Engine) -> tuple[int, float]:
    """Events and deliveries waiting (due now), and the age in seconds of the oldest."""
    now = utcnow()
    d = sql.deliveries
    with engine.connect() as read:
        events_waiting, oldest_event = read.execute(
            sa.select(sa.func.count(), sa.func.min(sql.events.c.created_at)).where(
                sql.events.c.dispatched.is_(False)
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


@dataclass(slots=True)
class DispatcherState(DatabaseState[Settings]):
    dispatcher: Dispatcher
