"""The trash and asset expiry (issue 47): metadata's halves.

A trashed asset's row moves whole from ``assets`` to ``trashed_assets`` in one transaction,
its size from the usage row's ``used_bytes`` to its ``trashed_bytes``: no query of ``assets``
(listings, search, counts, the scan queue) ever has to leave trashed rows out. A restore
moves it back, reserving its size against the quota in the same transaction. A purge turns
the trashed row into a tombstone (the delete protocol's), so its object is deleted by edge
exactly as a delete's is, and the sweeper finishes whatever a crash interrupted: no object
is deleted while a row still points at it, and every tombstone's object is deleted in the end.

Each change writes its event (``asset.trashed``, ``asset.restored``, ``asset.expired``,
``asset.purged``) in its own transaction, through the outbox (``events``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from sqlalchemy.engine import Connection, Row
from sqlmodel import Session

from coffer_kit.contract import expiry
from coffer_kit.contract.errors import forbidden, not_found, not_own_deletion, quota_exceeded
from coffer_kit.contract.ids import is_asset_id
from coffer_kit.contract.limits import PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX, PAGE_OFFSET_MAX, TRASH_PURGE_BATCH
from coffer_kit.contract.timeutil import as_utc, isoformat, utcnow
from coffer_kit.contract.wire import (
    SYSTEM,
    Actor,
    Expired,
    ExpiredList,
    ExpiredRef,
    ExpireIn,
    PurgeBatchOut,
    PurgedRef,
    TrashActIn,
    Trashed,
    TrashIn,
)
from coffer_metadata import events, subtree
from coffer_metadata.assets import repository
from coffer_metadata.assets.service import DEFAULT_IDLE_SECONDS, page_views, view
from coffer_metadata.deps import SessionDep, SettingsDep
from coffer_metadata.events import ActorDep
from coffer_metadata.folders import repository as folder_repository
from coffer_metadata.folders.repository import tree_ids
from coffer_metadata.folders.service import check_folder
from coffer_metadata.models import Asset, Folder, Tombstone, TrashedAsset, Usage
from coffer_metadata.subtree import SubtreeDep

_assets = Asset.__table__  # type: ignore[attr-defined]
_trashed = TrashedAsset.__table__  # type: ignore[attr-defined]
_usage = Usage.__table__  # type: ignore[attr-defined]
_folders = Folder.__table__  # type: ignore[attr-defined]
_tombstones = Tombstone.__table__  # type: ignore[attr-defined]


def _trashed_by(actor: Actor) -> tuple[str, str | None]:
    """Who trashed it, as listed ({type, id, label}), and the user behind it, if any."""
    public = {"type": actor.type, "id": actor.id, "label": actor.label}
    user = actor.id if actor.type == "user" else actor.user_id
    return json.dumps(public, separators=(",", ":")), user


def trash_view(row: Any, cdn_url: str) -> dict[str, Any]:
    """A trashed asset as the API writes it: the asset as it was, and the trash's fields."""
    return {
        **view(row, cdn_url),
        "trashedAt": isoformat(row.trashed_at),
        "purgeAt": isoformat(row.purge_at),
        "trashedBy": json.loads(row.trashed_by),
        "reason": row.reason,
    }


def _move_usage(conn: Connection, org_id: str, *, live: int, trashed: int, size: int) -> None:
    """Add ``live`` assets of ``size`` bytes each way to the live counters and ``trashed`` to
    the trash's (-1, +1: an asset trashed)."""
    conn.execute(
        sa.update(_usage)
        .where(_usage.c.organization_id == org_id)
        .values(
            used_bytes=_usage.c.used_bytes + live * size,
            asset_count=_usage.c.asset_count + live,
            trashed_bytes=_usage.c.trashed_bytes + trashed * size,
            trashed_count=_usage.c.trashed_count + trashed,
        )
    )


def _take(
    conn: Connection, table: sa.Table, *, org_id: str, asset_id: str, due_by: datetime | None = None
) -> Row[Any] | None:
    """Delete one row of ``table`` (assets or trashed_assets) and answer it as it was deleted;
    None if there is none, or another transaction took it first. With ``due_by``: only if it
    expires by then. One statement: on PostgreSQL a change that held the row (a PATCH of its
    expiry, name, folder or metadata) commits first, and the DELETE sees it, where a row read
    before it was copied stale into the trash, or deleted though its expiry had moved."""
    where = [table.c.organization_id == org_id, table.c.id == asset_id]
    if due_by is not None:
        where += [table.c.expires_at.is_not(None), table.c.expires_at <= due_by]
    return conn.execute(sa.delete(table).where(*where).returning(*table.c)).first()


def _copy(row: Row[Any], into: sa.Table) -> dict[str, Any]:
    """The values of ``row`` that ``into`` has columns for."""
    values = row._mapping
    return {c.name: values[c.name] for c in into.c if c.name in values}


def _missing(conn: Connection, *, org_id: str, asset_id: str) -> Exception:
    """Why the organization has no such trashed asset: 403 if it is another's, else 404."""
    for table in (_trashed, _assets):
        owner = conn.execute(sa.select(table.c.organization_id).where(table.c.id == asset_id)).scalar()
        if owner is not None and owner != org_id:
            return forbidden(f"Asset {asset_id} belongs to another organization.")
    return not_found(f"Asset {asset_id} is not in the trash.")


def _check_user(row: Any, only_user: str | None) -> None:
    """A member acts only on what they trashed themselves."""
    if only_user is not None and row.trashed_by_user != only_user:
        raise not_own_deletion()


def trash(
    session: Session,
    *,
    org_id: str,
    asset_id: str,
    retention_days: int,
    limit_bytes: int,
    cdn_url: str,
    actor: Actor,
    reason: str = "deleted",
    now: datetime | None = None,
    due_by: datetime | None = None,
) -> Trashed:
    """Move a live asset to the trash (with its event), then purge the oldest trashed assets
    while the trash is over ``limit_bytes``. Idempotent: an asset already trashed (or being
    deleted) answers its key again. With ``due_by`` (expiry), only if it expires by then."""
    if not is_asset_id(asset_id):
        raise not_found(f"Asset {asset_id!r} does not exist.")
    conn = session.connection()
    now = now or utcnow()
    row = _take(conn, _assets, org_id=org_id, asset_id=asset_id, due_by=due_by)
    if row is None and due_by is not None:
        raise not_found(f"Asset {asset_id} has not expired.")
    if row is None:
        done = conn.execute(
            sa.select(_trashed.c.key).where(_trashed.c.organization_id == org_id, _trashed.c.id == asset_id)
        ).scalar()
        stone = repository.tombstone(session, org_id=org_id, asset_id=asset_id)
        if done is not None or stone is not None:
            return Trashed(key=done if done is not None else stone.key)  # type: ignore[union-attr]
        owner = repository.owner(conn, asset_id)
        if owner is not None:
            raise forbidden(f"Asset {asset_id} belongs to another organization.")
        raise not_found(f"Asset {asset_id} does not exist.")
    by, user = _trashed_by(actor)
    values = {
        **_copy(row, _trashed),
        "trashed_at": now,
        "purge_at": now + timedelta(days=retention_days),
        "trashed_by": by,
        "trashed_by_user": user,
        "reason": reason,
    }
    conn.execute(sa.insert(_trashed), values)
    _move_usage(conn, org_id, live=-1, trashed=1, size=row.size)
    kind = "asset.expired" if reason == "expired" else "asset.trashed"
    events.record(
        session,
        org_id=org_id,
        type=kind,
        data=trash_view(SimpleNamespace(**values), cdn_url),
        actor=actor,
        now=now,
    )
    purged = _fit(session, org_id=org_id, limit_bytes=limit_bytes, cdn_url=cdn_url, actor=actor, now=now)
    return Trashed(key=row.key, purged=purged)


def _purge_row(session: Session, row: Any, *, cdn_url: str, actor: Actor, now: datetime) -> PurgedRef | None:
    """A trashed row becomes a tombstone (edge deletes its object, then the tombstone), with
    its ``asset.purged`` event; None if another transaction took it first.

    The caller holds the organization's usage row already: every transaction that changes a
    trashed row locks the usage row first (a trashing holds it when it purges the oldest to fit
    the bound), or two of them wait on each other until PostgreSQL kills one as a deadlock."""
    conn = session.connection()
    # This trashing of it only: one restored and trashed again since the row was read (a new
    # trashed_at, a later purgeAt) is not purged.
    taken = sa.delete(_trashed).where(_trashed.c.id == row.id, _trashed.c.trashed_at == row.trashed_at)
    if conn.execute(taken).rowcount != 1:
        return None
    _move_usage(conn, row.organization_id, live=0, trashed=-1, size=row.size)
    conn.execute(
        sa.insert(_tombstones).values(
            asset_id=row.id, organization_id=row.organization_id, key=row.key, created_at=now
        )
    )
    events.record(
        session,
        org_id=row.organization_id,
        type="asset.purged",
        data=trash_view(row, cdn_url),
        actor=actor,
        now=now,
    )
    return PurgedRef(asset_id=row.id, key=row.key)


def _oldest(conn: Connection, *, org_id: str, limit: int) -> list[Row[Any]]:
    return list(
        conn.execute(
            sa.select(_trashed)
            .where(_trashed.c.organization_id == org_id)
            .order_by(_trashed.c.trashed_at, _trashed.c.id)
            .limit(limit)
        )
    )


def _trashed_bytes(conn: Connection, org_id: str) -> int:
    found = conn.execute(sa.select(_usage.c.trashed_bytes).where(_usage.c.organization_id == org_id)).scalar()
    return int(found or 0)


def _fit(
    session: Session, *, org_id: str, limit_bytes: int, cdn_url: str, actor: Actor, now: datetime
) -> list[PurgedRef]:
    """Purge the oldest trashed assets until the trash holds at most ``limit_bytes``."""
    conn = session.connection()
    refs: list[PurgedRef] = []
    over = _trashed_bytes(conn, org_id) - limit_bytes
    while over > 0:
        oldest = _oldest(conn, org_id=org_id, limit=TRASH_PURGE_BATCH)
        if not oldest:
            break
        for row in oldest:
            if over <= 0:
                break
            ref = _purge_row(session, row, cdn_url=cdn_url, actor=actor, now=now)
            if ref is not None:
                refs.append(ref)
                over -= row.size
    return refs


def restore(
    session: Session,
    *,
    org_id: str,
    asset_id: str,
    quota_bytes: int,
    only_user: str | None,
    cdn_url: str,
    actor: Actor,
    idle_seconds: float = DEFAULT_IDLE_SECONDS,
) -> dict[str, Any]:
    """Move a trashed asset back (same id, key, URLs), into its folder or the root if that is
    gone, its size reserved against the quota in this transaction (413 if it does not fit),
    without an expiry that has passed. A live asset answers as it is (a restore retried after
    its store step failed)."""
    if not is_asset_id(asset_id):
        raise not_found(f"Asset {asset_id!r} is not in the trash.")
    conn = session.connection()
    found = conn.execute(
        sa.select(_trashed).where(_trashed.c.organization_id == org_id, _trashed.c.id == asset_id)
    ).first()
    if found is None:
        live = repository.get(session, org_id=org_id, asset_id=asset_id)
        if live is not None:
            return view(live, cdn_url)
        raise _missing(conn, org_id=org_id, asset_id=asset_id)
    _check_user(found, only_user)
    if found.folder_id is not None:
        # In turns with folder deletes (as a move is): one between the folder's check and the
        # insert failed it on the foreign key, a 500.
        folder_repository.lock_tree(session, org_id=org_id)
    # The usage row before the trashed one, as everywhere (see ``_purge_row``): the upload's
    # rule too, holds are read under this lock.
    repository.lock_usage(session, org_id=org_id)
    row = _take(conn, _trashed, org_id=org_id, asset_id=asset_id)
    if row is None:
        # Taken while this waited for the lock: by a restore beside this one (then the asset is
        # live, answered as it is, as above), or by a purge.
        live = repository.get(session, org_id=org_id, asset_id=asset_id)
        if live is not None:
            return view(live, cdn_url)
        raise not_found(f"Asset {asset_id} is not in the trash.")
    now = utcnow()
    folder = row.folder_id
    if folder is not None:
        there = conn.execute(
            sa.select(_folders.c.id).where(_folders.c.organization_id == org_id, _folders.c.id == folder)
        ).scalar()
        folder = there
    active_after = repository.active_after(now=now, idle=timedelta(seconds=idle_seconds))
    asset = {"organization_id": org_id, "id": asset_id, "folder_id": folder, "size": row.size}
    params = repository.commit_params(asset, quota_bytes=quota_bytes, active_after=active_after)
    checks = repository.commit_checks(session, params)
    if not checks.fits:
        raise quota_exceeded(
            size=row.size, used_bytes=checks.used, quota_bytes=quota_bytes, in_flight_bytes=checks.held
        )
    repository.reserve(session, params)
    # (reserve added the size and one asset to the live counters.)
    _move_usage(conn, org_id, live=0, trashed=-1, size=row.size)
    values = {**_copy(row, _assets), "folder_id": folder, "updated_at": now}
    if row.expires_at is not None and as_utc(row.expires_at) <= now:
        values["expires_at"] = None  # (an expiry past is gone, or the sweeper would take it again)
    conn.execute(sa.insert(_assets), values)
    public = view(SimpleNamespace(**values), cdn_url)
    events.record(session, org_id=org_id, type="asset.restored", data=public, actor=actor, now=now)
    return public


def purge(
    session: Session, *, org_id: str, asset_id: str, only_user: str | None, cdn_url: str, actor: Actor
) -> PurgedRef:
    """Purge one trashed asset: its row becomes a tombstone (edge deletes the object, then it).
    Idempotent while the tombstone is there."""
    if not is_asset_id(asset_id):
        raise not_found(f"Asset {asset_id!r} is not in the trash.")
    conn = session.connection()
    repository.lock_usage(session, org_id=org_id)
    row = conn.execute(
        sa.select(_trashed).where(_trashed.c.organization_id == org_id, _trashed.c.id == asset_id)
    ).first()
    if row is None:
        stone = repository.tombstone(session, org_id=org_id, asset_id=asset_id)
        if stone is not None:
            return PurgedRef(asset_id=asset_id, key=stone.key)
        raise _missing(conn, org_id=org_id, asset_id=asset_id)
    _check_user(row, only_user)
    ref = _purge_row(session, row, cdn_url=cdn_url, actor=actor, now=utcnow())
    if ref is None:
        raise not_found(f"Asset {asset_id} is not in the trash.")
    return ref


def purge_batch(session: Session, *, org_id: str, cdn_url: str, actor: Actor, limit: int) -> PurgeBatchOut:
    """One batch of "empty the trash": the organization's tombstones first (purges a crash
    interrupted: their objects are still to delete), then up to ``limit`` of the oldest trashed
    assets turned into tombstones. The caller deletes every ref's object, then its tombstone."""
    conn = session.connection()
    repository.lock_usage(session, org_id=org_id)
    pending = conn.execute(
        sa.select(_tombstones.c.asset_id, _tombstones.c.key)
        .where(_tombstones.c.organization_id == org_id)
        .order_by(_tombstones.c.created_at)
        .limit(limit)
    )
    refs = [PurgedRef(asset_id=a, key=k) for a, k in pending]
    now = utcnow()
    purged = 0
    for row in _oldest(conn, org_id=org_id, limit=limit):
        ref = _purge_row(session, row, cdn_url=cdn_url, actor=actor, now=now)
        if ref is not None:
            refs.append(ref)
            purged += 1
    remaining = conn.execute(
        sa.select(sa.func.count()).select_from(_trashed).where(_trashed.c.organization_id == org_id)
    ).scalar()
    return PurgeBatchOut(refs=refs, purged=purged, remaining=int(remaining or 0))


def purge_due(session: Session, *, cdn_url: str, limit: int, now: datetime | None = None) -> list[PurgedRef]:
    """Purge trashed assets whose retention has passed (the sweeper), oldest first."""
    now = now or utcnow()
    rows = list(
        session.connection().execute(
            sa.select(_trashed).where(_trashed.c.purge_at <= now).order_by(_trashed.c.purge_at).limit(limit)
        )
    )
    for org_id in sorted({row.organization_id for row in rows}):  # (one order: two sweepers never cross)
        repository.lock_usage(session, org_id=org_id)
    refs = [_purge_row(session, row, cdn_url=cdn_url, actor=SYSTEM, now=now) for row in rows]
    return [r for r in refs if r is not None]


def trash_page(session: Session, *, org_id: str, limit: int, offset: int, cdn_url: str) -> dict[str, Any]:
    """A page of the organization's trash, newest trashed first, and its size."""
    repository.one_snapshot(session)
    conn = session.connection()
    rows = conn.execute(
        sa.select(_trashed)
        .where(_trashed.c.organization_id == org_id)
        .order_by(_trashed.c.trashed_at.desc(), _trashed.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    total = conn.execute(
        sa.select(sa.func.count()).select_from(_trashed).where(_trashed.c.organization_id == org_id)
    ).scalar()
    items = [trash_view(row, cdn_url) for row in rows]
    return {"assets": items, "total": int(total or 0), "limit": limit, "offset": offset}


# Expiry


def expired_candidates(session: Session, *, limit: int, now: datetime | None = None) -> ExpiredList:
    """Assets whose ``expires_at`` has passed, soonest first (edge's expiry sweeper)."""
    now = now or utcnow()
    rows = session.connection().execute(
        sa.select(_assets.c.id, _assets.c.organization_id)
        .where(_assets.c.expires_at.is_not(None), _assets.c.expires_at <= now)
        .order_by(_assets.c.expires_at)
        .limit(limit)
    )
    return ExpiredList(assets=[ExpiredRef(asset_id=a, organization_id=o) for a, o in rows])


def expire(
    session: Session, *, org_id: str, asset_id: str, body: ExpireIn, cdn_url: str, now: datetime | None = None
) -> Expired:
    """Expire one asset whose time has come: to the trash (event ``asset.expired``), or, without
    a trash, deleted (``asset.expired`` then ``asset.deleted``; edge deletes the object and the
    tombstone). 404 if it is gone or no longer expired (a PATCH moved its expiry), so that of
    two sweepers only one expires it."""
    conn = session.connection()
    now = now or utcnow()
    # (Whether it is due is part of the DELETE that takes it: ``_take``'s ``due_by``.)
    if body.retention_days > 0:
        done = trash(
            session,
            org_id=org_id,
            asset_id=asset_id,
            retention_days=body.retention_days,
            limit_bytes=body.limit_bytes,
            cdn_url=cdn_url,
            actor=SYSTEM,
            reason="expired",
            now=now,
            due_by=now,
        )
        return Expired(key=done.key, deleted=False, purged=done.purged)
    row = _take(conn, _assets, org_id=org_id, asset_id=asset_id, due_by=now)
    if row is None:
        raise not_found(f"Asset {asset_id} has not expired.")
    _move_usage(conn, org_id, live=-1, trashed=0, size=row.size)
    conn.execute(
        sa.insert(_tombstones).values(asset_id=row.id, organization_id=org_id, key=row.key, created_at=now)
    )
    gone = view(row, cdn_url)
    events.record(session, org_id=org_id, type="asset.expired", data=gone, actor=SYSTEM, now=now)
    events.record(session, org_id=org_id, type="asset.deleted", data=gone, actor=SYSTEM, now=now)
    return Expired(key=row.key, deleted=True)


def expiring_page(
    session: Session,
    *,
    org_id: str,
    before: datetime,
    folder_id: str | None,
    limit: int,
    offset: int,
    cdn_url: str,
    within: str | None = None,
) -> dict[str, Any]:
    """``GET /api/assets?expiresBefore=``: the assets expiring before ``before`` (in a folder,
    or "" for the root; ``within`` a subtree key's folder, issue 46), newest first, and how many."""
    where = [
        _assets.c.organization_id == org_id,
        _assets.c.expires_at.is_not(None),
        _assets.c.expires_at < before,
    ]
    if folder_id == "":
        where.append(_assets.c.folder_id.is_(None))
    elif folder_id is not None:
        where.append(_assets.c.folder_id == folder_id)
    if within is not None:
        where.append(_assets.c.folder_id.in_(tree_ids(org_id, within)))
    repository.one_snapshot(session)
    conn = session.connection()
    rows = conn.execute(
        repository._VIEW.where(*where)
        .order_by(_assets.c.created_at.desc(), _assets.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    items = page_views(rows, cdn_url, org_id)
    total = conn.execute(sa.select(sa.func.count()).select_from(_assets).where(*where)).scalar()
    return {"assets": items, "total": int(total or 0), "limit": limit, "offset": offset}


# Routes (edge calls them; the organization comes from edge's principal)

router = APIRouter(prefix="/internal/v1")


@router.post("/orgs/{org_id}/assets/{asset_id}/trash")
def trash_asset(
    org_id: str,
    asset_id: str,
    body: TrashIn,
    session: SessionDep,
    settings: SettingsDep,
    actor: ActorDep,
    root: SubtreeDep = None,
) -> Trashed:
    # In the transaction that trashes it: an asset moved out of a subtree key's subtree since
    # edge read it is 404 to that key.
    subtree.in_turn(session, org_id=org_id, root=root)
    subtree.require_asset_inside(session, org_id=org_id, root=root, asset_id=asset_id)
    return trash(
        session,
        org_id=org_id,
        asset_id=asset_id,
        retention_days=body.retention_days,
        limit_bytes=body.limit_bytes,
        cdn_url=settings.cdn_url,
        actor=actor,
    )


@router.get("/orgs/{org_id}/trash")
def list_trash(
    org_id: str,
    session: SessionDep,
    settings: SettingsDep,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = PAGE_LIMIT_DEFAULT,
    offset: Annotated[int, Query(ge=0, le=PAGE_OFFSET_MAX)] = 0,
) -> JSONResponse:
    return JSONResponse(
        trash_page(session, org_id=org_id, limit=limit, offset=offset, cdn_url=settings.cdn_url)
    )


@router.post("/orgs/{org_id}/trash/{asset_id}/restore")
def restore_asset(
    org_id: str, asset_id: str, body: TrashActIn, session: SessionDep, settings: SettingsDep, actor: ActorDep
) -> JSONResponse:
    restored = restore(
        session,
        org_id=org_id,
        asset_id=asset_id,
        quota_bytes=body.quota_bytes,
        only_user=body.only_user,
        cdn_url=settings.cdn_url,
        actor=actor,
        idle_seconds=settings.metadata_tus_idle_seconds,
    )
    return JSONResponse(restored)


@router.post("/orgs/{org_id}/trash/{asset_id}/purge")
def purge_asset(
    org_id: str, asset_id: str, body: TrashActIn, session: SessionDep, settings: SettingsDep, actor: ActorDep
) -> PurgedRef:
    return purge(
        session,
        org_id=org_id,
        asset_id=asset_id,
        only_user=body.only_user,
        cdn_url=settings.cdn_url,
        actor=actor,
    )


@router.post("/orgs/{org_id}/trash/purge")
def purge_trash(
    org_id: str,
    session: SessionDep,
    settings: SettingsDep,
    actor: ActorDep,
    limit: Annotated[int, Query(ge=1, le=TRASH_PURGE_BATCH)] = TRASH_PURGE_BATCH,
) -> PurgeBatchOut:
    return purge_batch(session, org_id=org_id, cdn_url=settings.cdn_url, actor=actor, limit=limit)


@router.post("/trash/due")
def purge_due_route(
    session: SessionDep, settings: SettingsDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[PurgedRef]:
    return purge_due(session, cdn_url=settings.cdn_url, limit=limit)


@router.get("/expired")
def list_expired(session: SessionDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> ExpiredList:
    return expired_candidates(session, limit=limit)


@router.post("/orgs/{org_id}/assets/{asset_id}/expire")
def expire_asset(
    org_id: str, asset_id: str, body: ExpireIn, session: SessionDep, settings: SettingsDep
) -> Expired:
    return expire(session, org_id=org_id, asset_id=asset_id, body=body, cdn_url=settings.cdn_url)


# Edges of the previous release list ``expiresBefore`` here; this release's pass it to the
# assets listing as a filter (which pages by cursor too). Remove in the release after this one.
@router.get("/orgs/{org_id}/expiring")
def list_expiring(
    org_id: str,
    session: SessionDep,
    settings: SettingsDep,
    before: Annotated[str, Query(alias="expiresBefore", max_length=expiry.MAX_CHARS)],
    folder_id: Annotated[str | None, Query(alias="folderId")] = None,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = PAGE_LIMIT_DEFAULT,
    offset: Annotated[int, Query(ge=0, le=PAGE_OFFSET_MAX)] = 0,
    root: SubtreeDep = None,
) -> JSONResponse:
    when = expiry.parse_instant(before, field="expiresBefore")
    within = None
    if root is not None:  # a subtree key (issue 46): its folder is the root
        if folder_id == "":
            folder_id = root
        elif folder_id is None:
            within = root
        else:
            subtree.require_inside(session, org_id=org_id, root=root, folder_id=folder_id)
    if folder_id:
        check_folder(session, org_id=org_id, folder_id=folder_id)
    page = expiring_page(
        session,
        org_id=org_id,
        before=when,
        folder_id=folder_id,
        limit=limit,
        offset=offset,
        cdn_url=settings.cdn_url,
        within=within,
    )
    return JSONResponse(page)
