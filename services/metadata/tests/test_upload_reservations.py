"""Uploads in flight: each holds the most it can store against the quota, and an organization
has a bounded number at once (issue 23), exact under races on both databases."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from coffer_kit.contract.ids import ASSET, new_id
from coffer_kit.db import make_engine
from coffer_testkit.testing import assert_error

pytestmark = pytest.mark.anyio

CAP = 5


@pytest.fixture
async def capped(metadata_app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The metadata app with a cap of CAP uploads in flight per organization."""
    async with metadata_app(metadata_max_uploads_in_flight=CAP) as client:
        yield client


async def intent(api: httpx.AsyncClient, org: str, **body: Any) -> tuple[str, httpx.Response]:
    asset_id = new_id(ASSET)
    return asset_id, await api.post(f"/internal/v1/orgs/{org}/intents", json={"assetId": asset_id, **body})


async def commit(api: httpx.AsyncClient, org: str, asset_id: str, size: int, quota: int) -> httpx.Response:
    body = {
        "id": asset_id,
        "key": f"{org}/{asset_id}/f.bin",
        "filename": "f.bin",
        "mimeType": "application/octet-stream",
        "size": size,
        "sha256": "a" * 64,
        "quotaBytes": quota,
    }
    return await api.post(f"/internal/v1/orgs/{org}/assets", json=body)


async def test_uploads_in_flight_hold_their_most_against_the_quota(api: httpx.AsyncClient) -> None:
    org, quota = new_id("org"), 100
    first, response = await intent(api, org, reserveBytes=60, leastBytes=55, quotaBytes=quota)
    assert response.status_code == 201, response.text
    # 60 held: an upload that carries at least 41 bytes cannot fit beside it.
    _, refused = await intent(api, org, reserveBytes=45, leastBytes=41, quotaBytes=quota)
    error = assert_error(refused, 413, "quota_exceeded")
    assert error["details"] == {"usedBytes": 0, "quotaBytes": quota, "requestedBytes": 45}
    assert "Uploads in progress hold 60 more bytes" in error["message"]
    second, response = await intent(api, org, reserveBytes=45, leastBytes=40, quotaBytes=quota)
    assert response.status_code == 201, response.text
    # The commit checks the stored size only: 55 stored, then 45 more is exactly the quota.
    assert (await commit(api, org, first, 55, quota)).status_code == 201
    assert (await commit(api, org, second, 45, quota)).status_code == 201
    # Nothing in flight, 100 stored: even a body of 1 byte is refused before it streams.
    _, refused = await intent(api, org, reserveBytes=1, leastBytes=1, quotaBytes=quota)
    assert_error(refused, 413, "quota_exceeded")
    # Another organization's uploads hold nothing of this one's quota.
    _, response = await intent(api, new_id("org"), reserveBytes=100, leastBytes=100, quotaBytes=quota)
    assert response.status_code == 201


async def test_an_abandoned_upload_releases_what_it_held(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    held, response = await intent(api, org, reserveBytes=90, leastBytes=90, quotaBytes=100)
    assert response.status_code == 201
    _, refused = await intent(api, org, reserveBytes=20, leastBytes=20, quotaBytes=100)
    assert_error(refused, 413, "quota_exceeded")
    assert (await api.delete(f"/internal/v1/orgs/{org}/intents/{held}")).status_code == 200
    assert (await intent(api, org, reserveBytes=20, leastBytes=20, quotaBytes=100))[1].status_code == 201


async def test_a_commit_refused_by_the_quota_keeps_its_hold_until_abandoned(api: httpx.AsyncClient) -> None:
    """A refused commit rolls back, so its intent (and what it holds) stays until edge abandons
    it or the sweeper claims it."""
    org = new_id("org")
    asset_id, _ = await intent(api, org, reserveBytes=50, leastBytes=0, quotaBytes=40)
    assert_error(await commit(api, org, asset_id, 50, 40), 413, "quota_exceeded")
    _, refused = await intent(api, org, reserveBytes=1, leastBytes=1, quotaBytes=40)
    assert_error(refused, 413, "quota_exceeded")
    assert (await api.delete(f"/internal/v1/orgs/{org}/intents/{asset_id}")).status_code == 200
    assert (await intent(api, org, reserveBytes=1, leastBytes=1, quotaBytes=40))[1].status_code == 201


async def test_uploads_in_flight_are_capped_per_organization(capped: httpx.AsyncClient) -> None:
    org, other = new_id("org"), new_id("org")
    opened = [await intent(capped, org) for _ in range(CAP)]
    assert [r.status_code for _, r in opened] == [201] * CAP
    refused = (await intent(capped, org))[1]
    error = assert_error(refused, 429, "rate_limited")
    assert refused.headers["retry-after"] == "1"
    assert f"{CAP} uploads in progress" in error["message"]
    # The cap is the organization's: another one is not affected.
    assert (await intent(capped, other))[1].status_code == 201
    # A finished upload frees its place.
    assert (await commit(capped, org, opened[0][0], 1, 10**9)).status_code == 201
    assert (await intent(capped, org))[1].status_code == 201


async def test_racing_intents_never_pass_the_cap_or_the_quota(capped: httpx.AsyncClient) -> None:
    """24 intents at once: exactly CAP open, on both databases (the usage row's lock serialises
    the count on PostgreSQL; the single writer does on SQLite)."""
    org = new_id("org")
    answers = await asyncio.gather(*(intent(capped, org) for _ in range(24)))
    assert sorted(r.status_code for _, r in answers) == [201] * CAP + [429] * (24 - CAP)
    # And the bytes held: 24 intents of 30 bytes each against a quota of 100 → exactly 3 open.
    quota_org = new_id("org")
    answers = await asyncio.gather(
        *(intent(capped, quota_org, reserveBytes=30, leastBytes=30, quotaBytes=100) for _ in range(24))
    )
    assert sorted(r.status_code for _, r in answers) == [201] * 3 + [413] * 21


async def test_racing_uploads_of_an_organization_that_stores_files_stay_exact(
    capped: httpx.AsyncClient, database_url: str
) -> None:
    """As above once the organization has a usage row (it has stored a file): on PostgreSQL
    its intents and commits then run on the event loop's connections (coffer_kit.db's
    PgTransaction), and they race as exactly."""
    org = new_id("org")
    first, opened = await intent(capped, org, reserveBytes=10, leastBytes=10, quotaBytes=100)
    assert opened.status_code == 201
    assert (await commit(capped, org, first, 10, 100)).status_code == 201
    # 10 bytes stored, 24 intents of 30 bytes at once against 100: exactly 3 open.
    answers = await asyncio.gather(
        *(intent(capped, org, reserveBytes=30, leastBytes=30, quotaBytes=100) for _ in range(24))
    )
    assert sorted(r.status_code for _, r in answers) == [201] * 3 + [413] * 21
    commits = await asyncio.gather(
        *(commit(capped, org, a, 30, 100) for a, r in answers if r.status_code == 201)
    )
    assert [r.status_code for r in commits] == [201] * 3
    # Five intents that hold nothing (size unknown), their five commits at once: 0 bytes left.
    other = new_id("org")
    assert (await commit(capped, other, (await intent(capped, other))[0], 40, 100)).status_code == 201
    held = [await intent(capped, other) for _ in range(CAP)]
    assert [r.status_code for _, r in held] == [201] * CAP
    commits = await asyncio.gather(*(commit(capped, other, a, 20, 100) for a, _ in held))
    assert sorted(r.status_code for r in commits) == [201] * 3 + [413] * 2
    for refused in (r for r in commits if r.status_code == 413):
        assert_error(refused, 413, "quota_exceeded")
    for owner, stored, count in ((org, 100, 4), (other, 100, 4)):
        usage = (await capped.get(f"/internal/v1/orgs/{owner}/usage")).json()
        assert usage == {"usedBytes": stored, "assetCount": count, "trashedBytes": 0, "trashedCount": 0}
    listed = (await capped.get(f"/internal/v1/orgs/{other}/assets")).json()
    assert listed["total"] == 4 and sum(a["size"] for a in listed["assets"]) == 100
    if database_url.startswith("postgresql"):
        engine = make_engine(database_url)
        with engine.connect() as connection:
            loop_writers = connection.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = 'coffer-loop-write'"
            ).scalar_one()
        engine.dispose()
        assert loop_writers >= 1


async def test_the_sweepers_backlog_counts_stale_intents_not_uploads_in_flight(
    api: httpx.AsyncClient, database_url: str
) -> None:
    """coffer_sweeper_backlog{kind="intent"} (the CofferSweeperBacklog alert) counted every
    upload in flight: a hundred uploads streaming fired the alert for a stuck sweeper."""
    from datetime import timedelta

    from sqlalchemy import text
    from sqlmodel import Session

    from coffer_kit.contract.timeutil import utcnow
    from coffer_metadata.assets import repository

    org = new_id("org")
    assets = [new_id(ASSET) for _ in range(3)]
    for asset in assets:
        made = await api.post(f"/internal/v1/orgs/{org}/intents", json={"assetId": asset})
        assert made.status_code == 201, made.text
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            assert repository.backlog(session) == (0, 0)  # three uploads streaming: none stale
        with engine.begin() as conn:
            old = utcnow() - timedelta(seconds=repository.STALE_INTENT_SECONDS + 60)
            conn.execute(
                text("UPDATE upload_intents SET created_at = :t WHERE asset_id = :a"),
                {"t": old, "a": assets[0]},
            )
            conn.execute(
                text("UPDATE upload_intents SET swept = :y WHERE asset_id = :a"), {"y": True, "a": assets[1]}
            )
        with Session(engine) as session:
            assert repository.backlog(session) == (2, 0)
    finally:
        engine.dispose()
