"""Resumable uploads' state (tus, CONTRACT §9) in metadata, on both databases: the length
held against the quota from creation, one writer at a time, the offset moved only by the
holder, completion creating the asset, termination and expiry releasing the reservation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from coffer_kit.contract.ids import ASSET, FOLDER, TUS_UPLOAD, new_id
from coffer_kit.contract.timeutil import utcnow
from coffer_testkit.testing import assert_error

pytestmark = pytest.mark.anyio

LEASE = {"leaseSeconds": 30}
CAP = 3


@pytest.fixture
async def capped_tus(metadata_app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The metadata app with a cap of CAP uploads in flight per organization."""
    async with metadata_app(metadata_max_uploads_in_flight=CAP) as client:
        yield client


def body(org: str, length: int, quota: int, **extra: Any) -> dict[str, Any]:
    asset_id = new_id(ASSET)
    return {
        "id": new_id(TUS_UPLOAD),
        "assetId": asset_id,
        "key": f"{org}/{asset_id}/movie.mp4",
        "name": "movie.mp4",
        "mimeType": "video/mp4",
        "uploadMetadata": "filename bW92aWUubXA0",
        "length": length,
        "quotaBytes": quota,
        **extra,
    }


async def create(api: httpx.AsyncClient, org: str, length: int, quota: int = 1000, **extra: Any) -> Any:
    response = await api.post(f"/internal/v1/orgs/{org}/tus", json=body(org, length, quota, **extra))
    assert response.status_code == 201, response.text
    return response.json()


async def lock(api: httpx.AsyncClient, upload_id: str, offset: int, org: str | None = None) -> httpx.Response:
    return await api.post(
        f"/internal/v1/tus/{upload_id}/lock", json={"organizationId": org, "offset": offset, **LEASE}
    )


async def usage(api: httpx.AsyncClient, org: str) -> dict[str, Any]:
    return (await api.get(f"/internal/v1/orgs/{org}/usage")).json()  # type: ignore[no-any-return]


async def test_an_upload_holds_its_length_until_its_last_byte_makes_the_asset(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    upload = await create(api, org, 600)
    assert upload["offset"] == 0 and not upload["completed"]
    assert upload["expiresAt"] > utcnow().isoformat()
    # 600 of 1000 held: 401 more cannot be created, 400 can.
    refused = await api.post(f"/internal/v1/orgs/{org}/tus", json=body(org, 401, 1000))
    assert_error(refused, 413, "quota_exceeded")

    taken = await lock(api, upload["id"], 0, org)
    assert taken.status_code == 200, taken.text
    token = taken.json()["lockToken"]
    resume = {"hash": "c3RhdGU=", "store": {"parts": []}}
    step = {"lockToken": token, "fromOffset": 0, "offset": 250, "resume": resume}
    advanced = await api.post(f"/internal/v1/tus/{upload['id']}/advance", json=step)
    assert advanced.status_code == 200, advanced.text
    assert advanced.json()["offset"] == 250 and advanced.json()["resume"] == resume
    assert advanced.json()["lockToken"] is None

    token = (await lock(api, upload["id"], 250)).json()["lockToken"]
    done = {"lockToken": token, "fromOffset": 250, "sha256": "b" * 64}
    completed = await api.post(f"/internal/v1/tus/{upload['id']}/complete", json=done)
    assert completed.status_code == 200, completed.text
    assert completed.json()["completed"] and completed.json()["offset"] == 600
    asset = (await api.get(f"/internal/v1/orgs/{org}/assets/{upload['assetId']}")).json()
    assert asset["size"] == 600 and asset["sha256"] == "b" * 64 and asset["name"] == "movie.mp4"
    assert asset["mimeType"] == "video/mp4" and asset["key"] == upload["key"]
    assert await usage(api, org) == {"usedBytes": 600, "assetCount": 1, "trashedBytes": 0, "trashedCount": 0}
    # Still answered (HEAD gives the asset's id) until it expires; a lock gives no token.
    again = await lock(api, upload["id"], 600, org)
    assert again.status_code == 200 and again.json()["completed"] and again.json()["lockToken"] is None
    # The reservation became usage: 400 more fit, 401 do not.
    refused = await api.post(f"/internal/v1/orgs/{org}/tus", json=body(org, 401, 1000))
    assert_error(refused, 413, "quota_exceeded")
    await create(api, org, 400)


async def test_one_writer_at_a_time_at_the_right_offset(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    upload = await create(api, org, 100)
    path = f"/internal/v1/tus/{upload['id']}"
    # Eight requests at once: exactly one holds the upload, the others are told it is busy.
    answers = await asyncio.gather(*(lock(api, upload["id"], 0, org) for _ in range(8)))
    assert sorted(a.status_code for a in answers) == [200] + [423] * 7
    for answer in answers:
        if answer.status_code == 423:
            assert_error(answer, 423, "locked")
    token = next(a.json()["lockToken"] for a in answers if a.status_code == 200)
    # Termination waits for the writer too.
    assert_error(await api.post(f"{path}/terminate"), 423, "locked")
    # The holder lets go without writing; a wrong offset is refused with the right one, and
    # leaves the upload free.
    assert (await api.post(f"{path}/unlock", json={"lockToken": token})).status_code == 200
    wrong = assert_error(await lock(api, upload["id"], 5, org), 409, "offset_mismatch")
    assert wrong["details"] == {"offset": 0}
    token = (await lock(api, upload["id"], 0, org)).json()["lockToken"]
    # A step from another offset, or by a request that no longer holds the lock, counts nothing.
    stale = {"lockToken": token, "fromOffset": 3, "offset": 50, "resume": {}}
    assert_error(await api.post(f"{path}/advance", json=stale), 409, "conflict")
    stolen = {"lockToken": "0" * 32, "fromOffset": 0, "offset": 50, "resume": {}}
    assert_error(await api.post(f"{path}/advance", json=stolen), 409, "conflict")
    assert_error(await api.post(f"{path}/renew", json={"lockToken": "0" * 32, **LEASE}), 409, "conflict")
    assert (await api.post(f"{path}/renew", json={"lockToken": token, **LEASE})).status_code == 200
    assert (await api.get(path)).json()["offset"] == 0


async def test_a_lease_that_ran_out_can_be_taken_over(api: httpx.AsyncClient, database_url: str) -> None:
    org = new_id("org")
    upload = await create(api, org, 100)
    first = (await lock(api, upload["id"], 0, org)).json()["lockToken"]
    set_column(database_url, upload["id"], "locked_until", utcnow() - timedelta(seconds=1))
    second = await lock(api, upload["id"], 0, org)
    assert second.status_code == 200
    # The first writer's late step is refused: only the holder moves the offset.
    late = {"lockToken": first, "fromOffset": 0, "offset": 10, "resume": {}}
    assert_error(await api.post(f"/internal/v1/tus/{upload['id']}/advance", json=late), 409, "conflict")


async def test_uploads_are_invisible_to_other_organizations(api: httpx.AsyncClient) -> None:
    org, other = new_id("org"), new_id("org")
    upload = await create(api, org, 10)
    path = f"/internal/v1/tus/{upload['id']}"
    assert_error(await api.get(path, params={"org": other}), 404, "not_found")
    assert_error(await lock(api, upload["id"], 0, other), 404, "not_found")
    assert_error(await api.post(f"{path}/terminate", params={"org": other}), 404, "not_found")
    assert_error(await api.get(f"/internal/v1/tus/{new_id(TUS_UPLOAD)}"), 404, "not_found")
    assert_error(await api.get("/internal/v1/tus/not-an-id"), 404, "not_found")
    assert (await api.get(path, params={"org": org})).status_code == 200


async def test_the_folder_is_checked_at_creation(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    path = f"/internal/v1/orgs/{org}/tus"
    response = await api.post(path, json=body(org, 10, 100, folderId=new_id(FOLDER)))
    assert_error(response, 404, "not_found")
    folder = (await api.post(f"/internal/v1/orgs/{new_id('org')}/folders", json={"name": "x"})).json()
    response = await api.post(path, json=body(org, 10, 100, folderId=folder["id"]))
    assert_error(response, 403, "forbidden")
    assert await usage(api, org) == {"usedBytes": 0, "assetCount": 0, "trashedBytes": 0, "trashedCount": 0}


async def test_termination_releases_the_reservation_at_once(api: httpx.AsyncClient) -> None:
    org = new_id("org")
    upload = await create(api, org, 900)
    ended = await api.post(f"/internal/v1/tus/{upload['id']}/terminate", params={"org": org})
    assert ended.status_code == 200
    assert ended.json() == {"assetId": upload["assetId"], "prefix": f"{org}/{upload['assetId']}/"}
    assert_error(await api.get(f"/internal/v1/tus/{upload['id']}"), 404, "not_found")
    # Its 900 bytes are free again, and the sweeper's step after deleting the bytes drops the intent.
    await create(api, org, 900)
    assert (await api.delete(f"/internal/v1/sweep/intents/{upload['assetId']}")).status_code == 200


async def test_expired_uploads_are_swept_and_free_their_reservation(
    api: httpx.AsyncClient, database_url: str
) -> None:
    org = new_id("org")
    upload = await create(api, org, 700)
    other = await create(api, org, 100)
    past = utcnow() - timedelta(minutes=1)
    set_column(database_url, upload["id"], "expires_at", past)
    set_intent_expiry(database_url, upload["assetId"], past)
    assert_error(await api.get(f"/internal/v1/tus/{upload['id']}"), 404, "not_found")
    # The sweeper claims the expired upload only (the fresh one is young, not stale).
    claimed = (await api.post("/internal/v1/sweep", params={"intentAgeSeconds": 3600})).json()
    assert [i["assetId"] for i in claimed["intents"]] == [upload["assetId"]]
    assert claimed["intents"][0]["prefix"] == f"{org}/{upload['assetId']}/"
    # Claimed: its bytes are no longer held, even before the sweeper has deleted them.
    await create(api, org, 800)
    assert (await api.delete(f"/internal/v1/sweep/intents/{upload['assetId']}")).status_code == 200
    assert count(database_url, "tus_uploads") == 2  # the other one and the new one
    assert (await api.get(f"/internal/v1/tus/{other['id']}")).status_code == 200


async def test_racing_creations_never_exceed_the_quota(api: httpx.AsyncClient) -> None:
    org, quota = new_id("org"), 1000
    await create(api, org, 900, quota)
    answers = await asyncio.gather(
        *(api.post(f"/internal/v1/orgs/{org}/tus", json=body(org, 30, quota)) for _ in range(40))
    )
    created = [a for a in answers if a.status_code == 201]
    assert len(created) == 3
    for answer in answers:
        if answer.status_code != 201:
            assert_error(answer, 413, "quota_exceeded")


def set_column(database_url: str, upload_id: str, column: str, value: Any) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        update = text(f"UPDATE tus_uploads SET {column} = :v WHERE id = :id")
        conn.execute(update, {"v": value, "id": upload_id})
    engine.dispose()


def set_intent_expiry(database_url: str, asset_id: str, value: Any) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        update = text("UPDATE upload_intents SET expires_at = :v WHERE asset_id = :id")
        conn.execute(update, {"v": value, "id": asset_id})
    engine.dispose()


def count(database_url: str, table: str) -> int:
    engine = create_engine(database_url)
    with engine.connect() as conn:
        n = conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
    engine.dispose()
    return int(n)


async def test_a_locked_upload_says_when_to_ask_again(api: httpx.AsyncClient) -> None:
    """423's internal hint for edge: nothing while a request writes at the recorded offset
    (another writer: the client is told); a short wait when the caller asks for an offset past
    the recorded one (the holder answered a chunk whose record is on its way); the rest of
    the lease once the holder only keeps it between two chunks."""
    org = new_id("org")
    upload = await create(api, org, 100)
    path = f"/internal/v1/tus/{upload['id']}"
    token = (await lock(api, upload["id"], 0, org)).json()["lockToken"]
    writing = assert_error(await lock(api, upload["id"], 0, org), 423, "locked")
    assert writing.get("details") is None
    ahead = assert_error(await lock(api, upload["id"], 40, org), 423, "locked")
    assert 0 < ahead["details"]["keptFor"] <= 0.25 and ahead["details"]["recording"] is True
    step = {"lockToken": token, "fromOffset": 0, "offset": 40, "resume": {}, "keepSeconds": 2}
    assert (await api.post(f"{path}/advance", json=step)).status_code == 200
    kept = assert_error(await lock(api, upload["id"], 40, org), 423, "locked")
    assert 1 < kept["details"]["keptFor"] <= 2 and "recording" not in kept["details"]


async def one_shot(api: httpx.AsyncClient, org: str, size: int, quota: int) -> httpx.Response:
    """An upload through ``POST /api/assets``'s two steps: its intent, then its commit."""
    asset_id = new_id(ASSET)
    intent = {"assetId": asset_id, "reserveBytes": size, "leastBytes": size, "quotaBytes": quota}
    registered = await api.post(f"/internal/v1/orgs/{org}/intents", json=intent)
    if registered.status_code != 201:
        return registered
    commit = {
        "id": asset_id,
        "key": f"{org}/{asset_id}/f.bin",
        "filename": "f.bin",
        "mimeType": "application/octet-stream",
        "size": size,
        "sha256": "a" * 64,
        "quotaBytes": quota,
    }
    return await api.post(f"/internal/v1/orgs/{org}/assets", json=commit)


async def test_every_commit_honours_a_resumable_uploads_reservation(api: httpx.AsyncClient) -> None:
    """Issue 44: a one-shot upload whose intent was admitted before the resumable upload's
    reservation (it held nothing) must not commit past it, on both databases; the resumable
    upload then completes within the quota."""
    org, quota = new_id("org"), 1000
    assert (await one_shot(api, org, 100, quota)).status_code == 201  # (the organization's usage row)
    asset_id = new_id(ASSET)
    admitted = await api.post(
        f"/internal/v1/orgs/{org}/intents", json={"assetId": asset_id, "quotaBytes": quota}
    )
    assert admitted.status_code == 201, admitted.text
    upload = await create(api, org, 451, quota)  # 900 left: 451 held, 449 free
    commit = {
        "id": asset_id,
        "key": f"{org}/{asset_id}/f.bin",
        "filename": "f.bin",
        "mimeType": "application/octet-stream",
        "size": 451,
        "sha256": "a" * 64,
        "quotaBytes": quota,
    }
    refused = await api.post(f"/internal/v1/orgs/{org}/assets", json=commit)
    error = assert_error(refused, 413, "quota_exceeded")
    assert "hold 451 more bytes" in error["message"]
    assert (await one_shot(api, org, 449, quota)).status_code == 201  # exactly what is free
    token = (await lock(api, upload["id"], 0, org)).json()["lockToken"]
    done = {"lockToken": token, "fromOffset": 0, "sha256": "b" * 64}
    assert (await api.post(f"/internal/v1/tus/{upload['id']}/complete", json=done)).status_code == 200
    assert await usage(api, org) == {"usedBytes": 1000, "assetCount": 3, "trashedBytes": 0, "trashedCount": 0}


async def test_an_idle_upload_gives_its_reservation_back_and_asks_again(
    api: httpx.AsyncClient, database_url: str
) -> None:
    """Issue 44: an upload idle for an hour holds neither its length nor a place in flight;
    its next write asks for both again, and is refused (413) if they are gone."""
    org, quota = new_id("org"), 1000
    upload = await create(api, org, 800, quota)
    assert_error(
        await api.post(f"/internal/v1/orgs/{org}/tus", json=body(org, 300, quota)), 413, "quota_exceeded"
    )
    listed = (await api.get(f"/internal/v1/orgs/{org}/tus")).json()
    assert [(u["id"], u["active"]) for u in listed["uploads"]] == [(upload["id"], True)]
    # An hour and a minute without a write (its intent's expiry moved back behind the API's back).
    set_intent_expiry(database_url, upload["assetId"], utcnow() + timedelta(hours=22, minutes=59))
    listed = (await api.get(f"/internal/v1/orgs/{org}/tus")).json()
    assert [(u["id"], u["active"]) for u in listed["uploads"]] == [(upload["id"], False)]
    squatter = await create(api, org, 300, quota)  # the 800 are free again
    want = {"organizationId": org, "offset": 0, "quotaBytes": quota, **LEASE}
    refused = await api.post(f"/internal/v1/tus/{upload['id']}/lock", json=want)
    assert_error(refused, 413, "quota_exceeded")
    assert (await api.get(f"/internal/v1/tus/{upload['id']}")).json()["offset"] == 0  # still there
    ended = await api.post(f"/internal/v1/tus/{squatter['id']}/terminate", params={"org": org})
    assert ended.status_code == 200
    taken = await api.post(f"/internal/v1/tus/{upload['id']}/lock", json=want)
    assert taken.status_code == 200, taken.text
    # Active again: it holds its 800.
    assert_error(
        await api.post(f"/internal/v1/orgs/{org}/tus", json=body(org, 300, quota)), 413, "quota_exceeded"
    )


async def test_an_idle_upload_frees_its_place_in_flight(
    capped_tus: httpx.AsyncClient, database_url: str
) -> None:
    org = new_id("org")
    uploads = [await create(capped_tus, org, 10) for _ in range(CAP)]
    assert_error(
        await capped_tus.post(f"/internal/v1/orgs/{org}/tus", json=body(org, 10, 1000)), 429, "rate_limited"
    )
    set_intent_expiry(database_url, uploads[0]["assetId"], utcnow() + timedelta(hours=22))
    await create(capped_tus, org, 10)  # the idle one's place
    want = {"organizationId": org, "offset": 0, "quotaBytes": 1000, **LEASE}
    refused = await capped_tus.post(f"/internal/v1/tus/{uploads[0]['id']}/lock", json=want)
    assert_error(refused, 429, "rate_limited")


async def test_a_chunk_begun_just_before_the_expiry_keeps_the_upload_as_long_as_its_bytes(
    api: httpx.AsyncClient, database_url: str
) -> None:
    """A PATCH that takes the lock a moment before the upload's expiry, and then writes
    nothing: its bytes were held (the intent pushed a day ahead) while the upload expired
    (404 to its client, Upload-Expires passed), so they stayed a day for nobody. Now the lock
    pushes both: the upload lives as long as its bytes are kept."""
    org = new_id("org")
    upload = await create(api, org, 100)
    soon = utcnow() + timedelta(seconds=5)
    set_column(database_url, upload["id"], "expires_at", soon)
    set_intent_expiry(database_url, upload["assetId"], soon)
    assert (await lock(api, upload["id"], 0, org)).status_code == 200
    shown = await api.get(f"/internal/v1/tus/{upload['id']}")
    assert shown.status_code == 200
    engine = create_engine(database_url)
    with engine.connect() as conn:
        held = conn.execute(
            text("SELECT expires_at FROM upload_intents WHERE asset_id = :id"), {"id": upload["assetId"]}
        ).scalar()
    engine.dispose()
    expires = datetime.fromisoformat(shown.json()["expiresAt"])
    assert expires > utcnow() + timedelta(hours=23)  # (what HEAD answers as Upload-Expires)
    held = datetime.fromisoformat(held) if isinstance(held, str) else held  # (SQLite: text)
    assert expires >= held.replace(tzinfo=held.tzinfo or UTC, microsecond=0)
