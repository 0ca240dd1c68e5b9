"""Resumable uploads' state (tus, CONTRACT §9): metadata's half.

An upload is a row of ``tus_uploads`` beside an upload intent with the same asset id. The
intent holds the upload's length against the quota from creation (``register_intent``, the
same locked check as every upload) until the completing write turns it into the asset (the
same ``commit_upload`` as every upload, in the same transaction that marks the upload
complete), or until termination or expiry releases it.

One request writes an upload at a time, on both databases: ``lock`` takes a lease with one
conditional UPDATE (free, or its lease run out), which PostgreSQL re-checks under the row's
lock and SQLite runs under its single writer; the holder renews it while it writes, and its
``advance`` or ``complete`` counts only if it still holds it. The offset moves only there,
after blob has made the bytes durable, so ``offset`` never counts a byte the store lacks.

Expiry (24 h after the last write: a lock or renewal pushes it, the upload's and its
intent's alike, ``_push_expiry``) makes the intent stale: the sweeper claims it like any
stale intent, deletes its bytes (S3: aborts the multipart upload) and ``finish_intent``
drops both rows.

Idleness (issue 44): the intent holds the length and a place among the uploads in flight
only while the upload is written, for COFFER_METADATA_TUS_IDLE_SECONDS after its creation or
its last lock, renewal or advance (each pushes the intent's expiry; ``repository._ACTIVE``
tells an idle one by it). The next ``lock`` of an idle upload admits it again, as a creation
would (``_stay_active``).
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from datetime import datetime, timedelta
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Query, Request, Response
from sqlmodel import Session

from coffer_kit import pagination
from coffer_kit.contract import describe, expiry
from coffer_kit.contract.errors import (
    CofferError,
    conflict,
    invalid,
    not_found,
    offset_mismatch,
    upload_locked,
)
from coffer_kit.contract.ids import TUS_UPLOAD_ID_PATTERN
from coffer_kit.contract.limits import (
    CURSOR_MAX_CHARS,
    PAGE_LIMIT_DEFAULT,
    PAGE_LIMIT_MAX,
    PAGE_OFFSET_DEFAULT,
    PAGE_OFFSET_MAX,
    TUS_EXPIRY_SECONDS,
)
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.urls import asset_prefix
from coffer_kit.contract.wire import (
    TusAdvance,
    TusComplete,
    TusCreate,
    TusEnded,
    TusLease,
    TusLock,
    TusMinted,
    TusMintedPage,
    TusPage,
    TusUpload,
)
from coffer_kit.db import DatabaseState, run_read
from coffer_kit.internal_token import require_internal_token
from coffer_kit.routes import LeanRoute, json_body, json_request_body
from coffer_kit.state import request_state
from coffer_metadata import subtree
from coffer_metadata.assets import repository
from coffer_metadata.assets import service as assets
from coffer_metadata.deps import DatabaseDep, SettingsDep
from coffer_metadata.events import actor_of
from coffer_metadata.folders.repository import tree_ids
from coffer_metadata.folders.service import check_folder
from coffer_metadata.models import TusUpload as TusRow
from coffer_metadata.models import UploadIntent
from coffer_metadata.subtree import SubtreeDep

# CONTRACT §9: an upload expires this long after its last write.
EXPIRY = timedelta(seconds=TUS_EXPIRY_SECONDS)
# The completing write creates an asset whose bytes the upload's intent has held within the
# quota since creation, so the commit's own quota check must not count them twice.
_RESERVED = 2**62

_uploads = TusRow.__table__  # type: ignore[attr-defined]
_intents = UploadIntent.__table__  # type: ignore[attr-defined]

router = APIRouter(prefix="/internal/v1", tags=["tus"])
# A resumable upload's hot writes (every creation; every PATCH's lock, then its advance or the
# completion) are lean routes: each reads its request itself, the internal token first, instead
# of through FastAPI's dependency solver, which was about a quarter of metadata's busy CPU under
# 4 KiB tus uploads (py-spy; coffer_kit.routes). main.py includes it without the internal token
# dependency, which a lean route would never run.
hot_router = APIRouter(prefix="/internal/v1", tags=["tus"], route_class=LeanRoute)


def _view(row: Any, lock_token: str | None = None, *, active: bool = True) -> TusUpload:
    return TusUpload(
        id=row.id,
        organization_id=row.organization_id,
        asset_id=row.asset_id,
        key=row.key,
        name=row.name,
        folder_id=row.folder_id,
        mime_type=row.mime_type,
        visibility=row.visibility,
        upload_metadata=row.upload_metadata,
        length=row.length,
        offset=row.offset,
        resume=json.loads(row.resume) if row.resume else None,
        capability_hash=row.capability_hash,
        token_id=row.token_id,
        expires_at=_aware(row.expires_at),
        completed=row.completed,
        lock_token=lock_token,
        minter_key_id=row.minter_key_id,
        minter_user_id=row.minter_user_id,
        created_at=_aware(row.created_at),
        active=active,
    )


def _aware(moment: datetime) -> datetime:
    """SQLite gives back naive datetimes (UTC); PostgreSQL aware ones."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=utcnow().tzinfo)


def _live(session: Session, upload_id: str, org_id: str | None) -> Any:
    """The upload, unless it does not exist, is another organization's, or has expired: 404,
    alike for all three (CONTRACT §9: another organization's upload is 404)."""
    row = None
    if re.fullmatch(TUS_UPLOAD_ID_PATTERN, upload_id):
        row = session.connection().execute(sa.select(_uploads).where(_uploads.c.id == upload_id)).first()
    if (
        row is None
        or (org_id is not None and row.organization_id != org_id)
        or _aware(row.expires_at) <= utcnow()
    ):
        raise not_found(f"Upload {upload_id} does not exist (or has expired).")
    return row


def create(
    session: Session, *, org_id: str, upload: TusCreate, max_in_flight: int, idle_seconds: float
) -> TusUpload:
    """A new upload, its length held against the quota (413) among the organization's uploads
    in flight (429 past the cap); its folder must be the organization's (404/403)."""
    if not upload.key.startswith(asset_prefix(org_id, upload.asset_id)):
        raise conflict("The key does not belong to this asset.")
    if upload.folder_id is not None:
        check_folder(session, org_id=org_id, folder_id=upload.folder_id)
    intent = assets.NewIntent(
        org_id=org_id,
        asset_id=upload.asset_id,
        max_in_flight=max_in_flight,
        reserve_bytes=upload.length,
        least_bytes=upload.length,
        quota_bytes=upload.quota_bytes,
        idle_seconds=idle_seconds,
    )
    assets.register_intent(session, intent=intent)
    now = utcnow()
    expires = now + EXPIRY
    connection = session.connection()
    connection.execute(
        sa.update(_intents).where(_intents.c.asset_id == upload.asset_id).values(expires_at=expires)
    )
    values = upload.model_dump(exclude={"quota_bytes"}) | {
        "organization_id": org_id,
        "offset": 0,
        "resume": None,
        "created_at": now,
        "expires_at": expires,
        "lock_token": None,
        "locked_until": None,
        "completed": False,
    }
    connection.execute(sa.insert(_uploads), values)
    return _view(_live(session, upload.id, org_id))


# How long a lock that meets a chunk's record on its way is told to wait before asking again.
RECORD_WAIT_SECONDS = 0.25


def lock(
    session: Session, *, upload_id: str, want: TusLock, max_in_flight: int, idle_seconds: float
) -> TusUpload:
    """Take the upload to write at ``want.offset``: 404 if it is not there for this caller,
    answered as it is (no lock) if it is complete, 423 while another request holds it, 409 if
    the offset is not the upload's. An idle upload reserves its length and its place among the
    uploads in flight again (``_stay_active``: 413, 429)."""
    row = _live(session, upload_id, want.organization_id)
    if row.completed:
        return _view(row)
    token = secrets.token_hex(16)
    for attempt in range(2):
        now = utcnow()
        taken = session.connection().execute(
            sa.update(_uploads)
            .where(
                _uploads.c.id == upload_id,
                _uploads.c.completed.is_(False),
                sa.or_(_uploads.c.locked_until.is_(None), _uploads.c.locked_until < now),
            )
            .values(
                lock_token=token, locked_until=now + timedelta(seconds=want.lease_seconds), lease_kept=False
            )
        )
        if taken.rowcount == 1:
            break
        held = _live(session, upload_id, want.organization_id)
        until = _aware(held.locked_until) if held.locked_until is not None else None
        if attempt or (until is not None and until > utcnow()):
            raise _locked(held, now, ahead=want.offset > held.offset)
        # PostgreSQL: the holder let go between the two statements (its chunk was answered
        # already): take the lease now rather than answer 423 to a client that did nothing wrong.
    row = _live(session, upload_id, want.organization_id)  # as it is now that it is ours
    if row.offset != want.offset:
        raise offset_mismatch(row.offset)  # (the rollback gives the lock back)
    _stay_active(session, row, quota_bytes=want.quota_bytes, max_in_flight=max_in_flight, idle=idle_seconds)
    return _view(row, token)


def _stay_active(
    session: Session, row: Any, *, quota_bytes: int | None, max_in_flight: int, idle: float
) -> None:
    """The upload is being written: it holds its length and its place among the uploads in
    flight for ``idle`` seconds more. An idle one (it had given both back) asks for them again,
    as a new upload would: 429 past the cap, 413 if its length no longer fits (the rollback
    leaves it idle, its bytes kept until it expires)."""
    now = utcnow()
    connection = session.connection()
    intent = connection.execute(
        sa.select(_intents.c.expires_at).where(
            _intents.c.asset_id == row.asset_id, _intents.c.swept.is_(False)
        )
    ).first()
    if intent is None:
        raise not_found(f"Upload {row.id} does not exist (or has expired).")
    active_after = repository.active_after(now=now, idle=timedelta(seconds=idle))
    if intent.expires_at is None or _aware(intent.expires_at) <= active_after:
        again = assets.NewIntent(
            org_id=row.organization_id,
            asset_id=row.asset_id,
            max_in_flight=max_in_flight,
            reserve_bytes=row.length,
            least_bytes=row.length,
            quota_bytes=quota_bytes,
            idle_seconds=idle,
        )
        used = repository.lock_usage(session, org_id=row.organization_id)
        uploads, reserved = repository.uploads_in_flight(
            session, org_id=row.organization_id, active_after=active_after
        )
        again.admitted(used=used, uploads=uploads, reserved=reserved)
    _push_expiry(connection, row.id, now + EXPIRY)


def _push_expiry(connection: sa.Connection, upload_id: str, expires: datetime) -> None:
    """The upload, and its intent (its hold on its bytes), both live until ``expires``: an
    intent pushed alone kept the bytes of an upload that had expired for its client, a day for
    nobody (a lock taken a moment before the expiry, by a request that then wrote nothing)."""
    connection.execute(sa.update(_uploads).where(_uploads.c.id == upload_id).values(expires_at=expires))
    asset = sa.select(_uploads.c.asset_id).where(_uploads.c.id == upload_id).scalar_subquery()
    connection.execute(sa.update(_intents).where(_intents.c.asset_id == asset).values(expires_at=expires))


def _locked(row: Any, now: datetime, *, ahead: bool = False) -> CofferError:
    """423, saying how long the lease is only kept (nobody writing) if it is. ``ahead``: the
    caller asks for an offset past the recorded one, so its holder has answered a chunk whose
    record is on its way (edge writes a chunk's record while its client sends the next): the
    lease is about to be kept, or given back, and the caller is told to ask again soon."""
    until = _aware(row.locked_until) if row.locked_until is not None else None
    if until is None or until <= now:
        return upload_locked()
    if row.lease_kept:
        return upload_locked((until - now).total_seconds())
    if not ahead:
        return upload_locked()
    return upload_locked(min(RECORD_WAIT_SECONDS, (until - now).total_seconds()), recording=True)


def _held(upload_id: str, token: str) -> sa.ColumnElement[bool]:
    return sa.and_(_uploads.c.id == upload_id, _uploads.c.lock_token == token)


def _lost() -> CofferError:
    return conflict("This request no longer holds the upload (its lease ran out); ask HEAD and resume.")


def renew(session: Session, *, upload_id: str, lease: TusLease) -> None:
    """The holder writes on: its lease, and its upload's hold on the quota (a chunk that
    streams for longer than the idle time is not idle), last longer."""
    now = utcnow()
    until = now + timedelta(seconds=lease.lease_seconds)
    connection = session.connection()
    result = connection.execute(
        sa.update(_uploads)
        .where(_held(upload_id, lease.lock_token))
        .values(locked_until=until, lease_kept=False)
    )
    if result.rowcount != 1:
        raise _lost()
    _push_expiry(connection, upload_id, now + EXPIRY)


def unlock(session: Session, *, upload_id: str, lease: TusLease) -> None:
    held = _held(upload_id, lease.lock_token)
    session.connection().execute(sa.update(_uploads).where(held).values(lock_token=None, locked_until=None))


def advance(session: Session, *, upload_id: str, step: TusAdvance) -> TusUpload:
    """Bytes up to ``step.offset`` are durable: move the offset, push the expiry, and let go
    (or keep the lease ``step.keep_seconds`` more, for the writer's next chunk)."""
    now = utcnow()
    expires = now + EXPIRY
    lease: dict[str, Any] = {"lock_token": None, "locked_until": None, "lease_kept": False}
    if step.keep_seconds:
        lease = {"locked_until": now + timedelta(seconds=step.keep_seconds), "lease_kept": True}
    result = session.connection().execute(
        sa.update(_uploads)
        .where(_held(upload_id, step.lock_token), _uploads.c.offset == step.from_offset)
        .values(offset=step.offset, resume=json.dumps(step.resume), expires_at=expires, **lease)
    )
    if result.rowcount != 1:
        raise _lost()
    row = _live(session, upload_id, None)
    session.connection().execute(
        sa.update(_intents).where(_intents.c.asset_id == row.asset_id).values(expires_at=expires)
    )
    return _view(row)


def complete(
    session: Session, *, upload_id: str, done: TusComplete, cdn_url: str, actor: Any, idle_seconds: float
) -> TusUpload:
    """The last byte is in and blob has published the file: create the asset exactly as an
    upload's commit does (folder checked, reservation turned into usage, event recorded), and
    mark the upload complete, all in this transaction."""
    row = _live(session, upload_id, None)
    if row.lock_token != done.lock_token or row.offset != done.from_offset:
        raise _lost()
    metadata, tags = describe.tus_description(row.upload_metadata)
    assets.commit_upload_view(
        session,
        cdn_url=cdn_url,
        actor=actor,
        org_id=row.organization_id,
        asset_id=row.asset_id,
        key=row.key,
        name=row.name,
        folder_id=row.folder_id,
        mime_type=row.mime_type,
        size=row.length,
        sha256=done.sha256,
        quota_bytes=_RESERVED,
        visibility=row.visibility,
        idle_seconds=idle_seconds,
        detected_type=done.detected_type,
        scan_status=done.scan_status,
        expires_at=expiry.from_tus_metadata(row.upload_metadata),
        metadata=metadata,
        tags=tags,
    )
    session.connection().execute(
        sa.update(_uploads)
        .where(_uploads.c.id == upload_id)
        .values(
            offset=row.length,
            resume=None,
            completed=True,
            lock_token=None,
            locked_until=None,
            expires_at=utcnow() + EXPIRY,
        )
    )
    return _view(_live(session, upload_id, None))


def terminate(
    session: Session,
    *,
    upload_id: str,
    org_id: str | None,
    lock_token: str | None = None,
    unfinished_only: bool = False,
) -> TusEnded | None:
    """Termination: the upload is gone at once (404 from now on); an unfinished one's intent
    is claimed for deletion (its bytes go, then its reservation), answered so the caller
    deletes the bytes now. A complete upload is only forgotten: its asset stays; with
    ``unfinished_only`` (the open-uploads API) it is 404 and kept, so a tus client can still
    learn it finished. 423 while a request writes to it (unless ``lock_token`` is its
    lease's: the holder may end it)."""
    row = _live(session, upload_id, org_id)
    if row.completed and unfinished_only:
        raise not_found(f"Upload {upload_id} is finished: its asset is an asset now.")
    now = utcnow()
    connection = session.connection()
    if not row.completed:
        free = sa.or_(
            _uploads.c.locked_until.is_(None),
            _uploads.c.locked_until < now,
            _uploads.c.lock_token == (lock_token or ""),
        )
        writing = sa.select(_uploads.c.id).where(_uploads.c.id == upload_id, sa.not_(free))
        if connection.execute(writing).first() is not None:
            raise _locked(row, now)
        connection.execute(
            sa.update(_intents).where(_intents.c.asset_id == row.asset_id).values(swept=True, expires_at=now)
        )
    connection.execute(sa.delete(_uploads).where(_uploads.c.id == upload_id))
    if row.completed:
        return None
    return TusEnded(asset_id=row.asset_id, prefix=asset_prefix(row.organization_id, row.asset_id))


def open_page(
    session: Session,
    *,
    org_id: str,
    limit: int,
    offset: int,
    idle_seconds: float,
    root: str | None = None,
    cursor: str | None = None,
    with_total: bool | None = None,
) -> TusPage:
    """The organization's unfinished, unexpired uploads, newest first, each saying whether it
    holds its reservation (active) or gave it back (idle); for a subtree key's call (``root``),
    only those into its subtree. By ``offset`` with the total, or (a ``cursor``, or
    ``with_total`` False) by keyset, counted only when asked (issue 49)."""
    now = utcnow()
    keyset = cursor is not None or with_total is False
    if keyset and offset:
        raise invalid("'offset' cannot be combined with 'cursor' or 'total=false'.", field="offset")
    where = [
        _uploads.c.organization_id == org_id,
        _uploads.c.completed.is_(False),
        _uploads.c.expires_at > now,
    ]
    if root is not None:
        where.append(_uploads.c.folder_id.in_(tree_ids(org_id, root)))
    listing, scope = "uploads", [org_id, root]
    if cursor is not None:
        position = pagination.decode(cursor, listing, scope, "time")
        where.append(pagination.after(_uploads.c.created_at, _uploads.c.id, *position, descending=True))
    connection = session.connection()
    total = None
    if not keyset or with_total:
        counted = where if cursor is None else where[:-1]
        total = int(
            connection.execute(sa.select(sa.func.count()).select_from(_uploads).where(*counted)).scalar() or 0
        )
    active_after = repository.active_after(now=now, idle=timedelta(seconds=idle_seconds))
    statement = (
        sa.select(_uploads, _intents.c.expires_at.label("held_until"))
        .join(_intents, _intents.c.asset_id == _uploads.c.asset_id, isouter=True)
        .where(*where)
        .order_by(*pagination.order(_uploads.c.created_at, _uploads.c.id, descending=True))
    )
    rows = connection.execute(
        statement.limit(limit + 1) if keyset else statement.limit(limit).offset(offset)
    ).all()
    shown = rows[:limit]
    more = len(rows) > limit if keyset else offset + len(rows) < (total or 0)
    uploads = [
        _view(row, active=row.held_until is not None and _aware(row.held_until) > active_after)
        for row in shown
    ]
    last = shown[-1] if more and shown else None
    next_cursor = last and pagination.encode(listing, scope, last.created_at, last.id)
    return TusPage(uploads=uploads, total=total, next_cursor=next_cursor)


def minted(session: Session, *, after: str, limit: int) -> TusMintedPage:
    """Unfinished uploads created through an upload token, by id from ``after`` on: edge's
    sweep asks auth whether their minters can still act."""
    rows = (
        session.connection()
        .execute(
            sa.select(
                _uploads.c.id,
                _uploads.c.organization_id,
                _uploads.c.token_id,
                _uploads.c.minter_key_id,
                _uploads.c.minter_user_id,
            )
            .where(
                _uploads.c.completed.is_(False),
                _uploads.c.capability_hash.is_not(None),
                _uploads.c.id > after,
            )
            .order_by(_uploads.c.id)
            .limit(limit)
        )
        .all()
    )
    return TusMintedPage(
        uploads=[
            TusMinted(
                id=r.id,
                organization_id=r.organization_id,
                token_id=r.token_id,
                minter_key_id=r.minter_key_id,
                minter_user_id=r.minter_user_id,
            )
            for r in rows
        ]
    )


def counts(session: Session) -> tuple[int, int]:
    """(open, expired) unfinished uploads: the expired ones wait for the sweeper."""
    now = utcnow()
    unfinished = _uploads.c.completed.is_(False)
    live = sa.func.count().filter(_uploads.c.expires_at >= now)
    dead = sa.func.count().filter(_uploads.c.expires_at < now)
    opened, expired = session.connection().execute(sa.select(live, dead).where(unfinished)).one()
    return int(opened), int(expired)


# -- routes ---------------------------------------------------------------------------------
# Writes go through the group commit (``Database.write``): one worker-thread trip each, and
# one fsync for the writes that arrive together (a PATCH makes two: lock, then advance).


@hot_router.post("/orgs/{org_id}/tus", status_code=201, openapi_extra=json_request_body(TusCreate))
async def create_upload(request: Request, org_id: str) -> Response:
    await require_internal_token(request)
    body = await json_body(request, TusCreate)
    state = request_state(request, DatabaseState)
    settings, database = state.settings, state.database
    if (root := subtree.of_request(request)) is not None:
        # A subtree key's upload (issue 46): into its subtree, its root by default.
        where = functools.partial(subtree.folder_or_root, org_id=org_id, root=root, folder_id=body.folder_id)
        body = body.model_copy(update={"folder_id": await run_read(database.engine, where)})
    limit, idle = settings.metadata_max_uploads_in_flight, settings.metadata_tus_idle_seconds
    created: TusUpload = await database.write(
        functools.partial(create, org_id=org_id, upload=body, max_in_flight=limit, idle_seconds=idle)
    )
    return _answer(created, status_code=201)


@router.get("/orgs/{org_id}/tus")
async def list_uploads(
    org_id: str,
    database: DatabaseDep,
    settings: SettingsDep,
    root: SubtreeDep,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = PAGE_LIMIT_DEFAULT,
    offset: Annotated[int, Query(ge=0, le=PAGE_OFFSET_MAX)] = PAGE_OFFSET_DEFAULT,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
    total: Annotated[bool | None, Query()] = None,
) -> TusPage:
    """The organization's unfinished uploads, newest first."""
    idle = settings.metadata_tus_idle_seconds
    page = functools.partial(
        open_page,
        org_id=org_id,
        limit=limit,
        offset=offset,
        idle_seconds=idle,
        root=root,
        cursor=cursor,
        with_total=total,
    )
    return await run_read(database.engine, page)


@router.get("/tus-minted")
async def list_minted(
    database: DatabaseDep,
    after: Annotated[str, Query(max_length=40)] = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> TusMintedPage:
    return await run_read(database.engine, functools.partial(minted, after=after, limit=limit))


@router.get("/tus/{upload_id}")
async def get_upload(
    upload_id: str,
    database: DatabaseDep,
    root: SubtreeDep,
    org: Annotated[str | None, Query(max_length=40)] = None,
) -> TusUpload:
    """The upload (of organization ``org``, if said): 404 if none, another's or expired (or,
    for a subtree key, outside its subtree)."""
    await _confined(database, upload_id, org, root)
    return await run_read(database.engine, lambda session: _view(_live(session, upload_id, org)))


async def _confined(database: Any, upload_id: str, org: str | None, root: str | None) -> None:
    """404 for a subtree key's call on an upload outside its subtree (issue 46)."""
    if root is None:
        return

    def check(session: Session) -> None:
        row = _live(session, upload_id, org)
        if row.folder_id is None or not subtree.inside(
            session, org_id=row.organization_id, root=root, folder_id=row.folder_id
        ):
            raise not_found(f"Upload {upload_id} does not exist (or has expired).")

    await run_read(database.engine, check)


@hot_router.post("/tus/{upload_id}/lock", openapi_extra=json_request_body(TusLock))
async def lock_upload(request: Request, upload_id: str) -> Response:
    await require_internal_token(request)
    body = await json_body(request, TusLock)
    state = request_state(request, DatabaseState)
    settings, database = state.settings, state.database
    await _confined(database, upload_id, body.organization_id, subtree.of_request(request))
    take = functools.partial(
        lock,
        upload_id=upload_id,
        want=body,
        max_in_flight=settings.metadata_max_uploads_in_flight,
        idle_seconds=settings.metadata_tus_idle_seconds,
    )
    return _answer(await database.write(take))


@router.post("/tus/{upload_id}/renew")
async def renew_lease(upload_id: str, body: TusLease, database: DatabaseDep) -> TusLease:
    await database.write(functools.partial(renew, upload_id=upload_id, lease=body))
    return body


@router.post("/tus/{upload_id}/unlock")
async def unlock_upload(upload_id: str, body: TusLease, database: DatabaseDep) -> TusLease:
    await database.write(functools.partial(unlock, upload_id=upload_id, lease=body))
    return body


@hot_router.post("/tus/{upload_id}/advance", openapi_extra=json_request_body(TusAdvance))
async def advance_upload(request: Request, upload_id: str) -> Response:
    await require_internal_token(request)
    body = await json_body(request, TusAdvance)
    database = request_state(request, DatabaseState).database
    return _answer(await database.write(functools.partial(advance, upload_id=upload_id, step=body)))


@hot_router.post("/tus/{upload_id}/complete", openapi_extra=json_request_body(TusComplete))
async def complete_upload(request: Request, upload_id: str) -> Response:
    await require_internal_token(request)
    body = await json_body(request, TusComplete)
    state = request_state(request, DatabaseState)
    done = functools.partial(
        complete,
        upload_id=upload_id,
        done=body,
        cdn_url=state.settings.cdn_url,
        actor=actor_of(request),
        idle_seconds=state.settings.metadata_tus_idle_seconds,
    )
    return _answer(await state.database.write(done))


def _answer(upload: TusUpload, status_code: int = 200) -> Response:
    return Response(upload.wire(), status_code=status_code, media_type="application/json")


@router.post("/tus/{upload_id}/terminate")
async def terminate_upload(
    upload_id: str,
    database: DatabaseDep,
    root: SubtreeDep,
    org: Annotated[str | None, Query(max_length=40)] = None,
    unfinished: bool = False,
    lease: TusLease | None = None,
) -> TusEnded | None:
    await _confined(database, upload_id, org, root)
    token = lease.lock_token if lease is not None else None
    return await database.write(
        functools.partial(
            terminate, upload_id=upload_id, org_id=org, lock_token=token, unfinished_only=unfinished
        )
    )
