"""Helpers for metadata's tests of two writers at once (PostgreSQL): a request sent while a
session holds a lock it needs, the holder's commit once the request waits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session


def waiting_on_a_lock(engine: Engine) -> bool:
    """Whether a connection to the engine's database waits on a lock now."""
    with engine.connect() as conn:
        waiting = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar()
    return bool(waiting)


async def sent_behind(
    engine: Engine, holder: Session, send: Callable[[], Awaitable[httpx.Response]]
) -> httpx.Response:
    """``send()``'s answer, sent while ``holder`` (flushed, not committed) holds what it needs:
    polled until it waits on a lock, then ``holder`` commits."""
    sent = asyncio.ensure_future(send())
    deadline = time.monotonic() + 10
    while not waiting_on_a_lock(engine):
        assert not sent.done(), sent.result().text  # (it must wait for the holder)
        assert time.monotonic() < deadline, "the request never waited"
        await asyncio.sleep(0.01)
    holder.commit()
    holder.close()
    return await sent
