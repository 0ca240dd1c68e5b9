"""Claim: due deliveries leased by a conditional update, organizations in turn, each endpoint
within its bound across dispatchers (more where one dispatcher alone sends quickly to it);
leases given back; what a lease holds read as jobs (docs/webhooks.md, "How delivery works")."""

from __future__ import annotations

import secrets
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection, Engine

from coffer_kit.contract.timeutil import as_utc
from coffer_metadata.webhooks.dispatch import statements as sql
from coffer_metadata.webhooks.dispatch.fanout import FanOut
from coffer_metadata.webhooks.secrets import SecretBox

# A dispatcher alone on a quick endpoint leases up to this many times its concurrency bound.
PREFETCH = 8


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
class _Candidate:
    """A delivery about to be made, as the claim's read answers one that exists."""

    id: str
    endpoint_id: str
    organization_id: str


def plan_claim(
    engine: Engine,
    *,
    now: datetime,
    free: int,
    held: dict[str, int],
    fan: FanOut,
    ending: Tally[str],
    cap: int,
    slow: frozenset[str],
) -> list[str]:
    """Up to ``free`` due deliveries to lease (reads only), those ``fan`` is about to make
    included: organizations in turn, each endpoint within ``cap`` (PREFETCH times it where
    this dispatcher alone holds the endpoint's leases and the endpoint is not in ``slow``).
    ``held``: this dispatcher's leases by endpoint, ``ending`` among them those the
    transaction ends first."""
    with engine.connect() as read:
        leased: dict[str, int] = dict(read.execute(sql.LEASED, {"now": now}).all())
        alone = {e for e, count in leased.items() if count <= held.get(e, 0)}
        busy = {e: count - ending[e] for e, count in leased.items() if count > ending[e]}

        def bound(endpoint_id: str) -> int:
            quick = endpoint_id not in slow
            return cap * PREFETCH if quick and (endpoint_id in alone or endpoint_id not in leased) else cap

        saturated = [endpoint for endpoint, count in busy.items() if count >= bound(endpoint)]
        due = (
            read.execute(sql.DUE_ELSEWHERE, {"now": now, "saturated": saturated})
            if saturated
            else read.execute(sql.DUE, {"now": now})
        )
        candidates: list[Any] = list(due.all())
    candidates += [
        _Candidate(row["id"], row["endpoint_id"], row["organization_id"]) for row in fan.deliveries
    ]
    return _fair_pick(candidates, busy=busy, cap=bound, free=free)


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


def lease(connection: Connection, picked: list[str], *, now: datetime, lease_seconds: float) -> str:
    """Lease ``picked`` where no lease holds them (another dispatcher may have been first);
    answers the lease's token."""
    token = secrets.token_hex(16)
    until = now + timedelta(seconds=lease_seconds)
    connection.execute(sql.LEASE, {sql.IDS: picked, "now": now, "token": token, "until": until})
    return token


def release(connection: Connection, jobs: list[Job]) -> None:
    """Give back the leases of ``jobs``, where they still hold them: due at once again."""
    connection.execute(
        sql.RELEASE,
        {sql.IDS: [j.delivery_id for j in jobs], "tokens": list({j.lease_token for j in jobs})},
    )


def leased_jobs(engine: Engine, picked: list[str], token: str, *, now: datetime, box: SecretBox) -> list[Job]:
    """The deliveries of ``picked`` a committed lease holds, with their endpoints' URL and
    secrets: read after the commit, not in the write transaction (no other dispatcher changes a
    row it does not hold, and on SQLite the uploads wait while that transaction holds the lock).
    Found by id (the token alone has no index: 100 ms a cycle beside 1,000,000 deliveries)."""
    with engine.connect() as read:
        rows = list(read.execute(sql.LEASED_JOBS, {sql.IDS: picked, "token": token}).all())
        opened: dict[str, list[str]] = {}  # each endpoint's secrets, opened once
        return [_job(row, now, opened, box) for row in rows]


def _job(row: Any, now: datetime, opened: dict[str, list[str]], box: SecretBox) -> Job:
    keys = opened.get(row.endpoint_id)
    if keys is None:
        keys = opened[row.endpoint_id] = [box.open(row.secret)]
        expires = row.previous_secret_expires_at
        if row.previous_secret and expires is not None and as_utc(expires) > now:
            keys.append(box.open(row.previous_secret))
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
