"""Asset, usage, intent and tombstone queries. Every data query is scoped by organization."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import func, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlmodel import Session, col, delete, select

from coffer_metadata.models import Asset, Tombstone, UploadIntent, Usage


def owner_of(session: Session, asset_id: str) -> str | None:
    """The organization an asset belongs to, if it exists: tells 403 from 404, reads nothing else."""
    return session.exec(select(Asset.organization_id).where(Asset.id == asset_id)).first()


def get(session: Session, *, org_id: str, asset_id: str) -> Asset | None:
    return session.exec(select(Asset).where(Asset.organization_id == org_id, Asset.id == asset_id)).first()


# The hot read paths (one asset, a page, a count) as Core statements built once: building a
# statement costs more than running it, and rows need no ORM objects to become JSON.
_assets = Asset.__table__  # type: ignore[attr-defined]
_org = _assets.c.organization_id == sa.bindparam("org_id")
_in_folder = _assets.c.folder_id == sa.bindparam("folder_id")
_at_root = _assets.c.folder_id.is_(None)
_newest_first = (_assets.c.created_at.desc(), _assets.c.id.desc())
_VIEW = sa.select(
    _assets.c.id,
    _assets.c.organization_id,
    _assets.c.folder_id,
    _assets.c.key,
    _assets.c.name,
    _assets.c.mime_type,
    _assets.c.size,
    _assets.c.created_at,
)
_GET_ROW = _VIEW.where(_org, _assets.c.id == sa.bindparam("asset_id"))
_PAGE = {
    scope: _VIEW.where(*where)
    .order_by(*_newest_first)
    .limit(sa.bindparam("limit", type_=sa.Integer))
    .offset(sa.bindparam("offset", type_=sa.Integer))
    for scope, where in {"all": (_org,), "folder": (_org, _in_folder), "root": (_org, _at_root)}.items()
}
_COUNT = {
    scope: sa.select(func.count()).select_from(_assets).where(_org, where)
    for scope, where in {"folder": _in_folder, "root": _at_root}.items()
}
_usage = Usage.__table__  # type: ignore[attr-defined]
# Every asset of the organization: usage keeps that count in the same transactions.
_COUNT["all"] = sa.select(_usage.c.asset_count).where(_usage.c.organization_id == sa.bindparam("org_id"))


def _scope(folder_id: str | None, root_only: bool) -> str:
    return "root" if root_only else "folder" if folder_id is not None else "all"


def get_row(session: Session, *, org_id: str, asset_id: str) -> Row | None:  # type: ignore[type-arg]
    """The asset's public fields, if the organization has it."""
    return session.connection().execute(_GET_ROW, {"org_id": org_id, "asset_id": asset_id}).first()


def page(
    session: Session, *, org_id: str, folder_id: str | None, root_only: bool, limit: int, offset: int
) -> list[Row]:  # type: ignore[type-arg]
    """Newest first (created_at desc, then id desc): stable across pages."""
    params = {"org_id": org_id, "folder_id": folder_id, "limit": limit, "offset": offset}
    return list(session.connection().execute(_PAGE[_scope(folder_id, root_only)], params))


def count(session: Session, *, org_id: str, folder_id: str | None, root_only: bool) -> int:
    params = {"org_id": org_id, "folder_id": folder_id}
    return int(session.connection().execute(_COUNT[_scope(folder_id, root_only)], params).scalar() or 0)


def usage(session: Session, *, org_id: str) -> Usage:
    return session.get(Usage, org_id) or Usage(organization_id=org_id, used_bytes=0, asset_count=0)


def ensure_usage_row(session: Session, *, org_id: str) -> None:
    """Create the organization's usage row if missing (concurrency-safe upsert)."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(Usage).values(organization_id=org_id, used_bytes=0, asset_count=0)
    session.exec(statement.on_conflict_do_nothing(index_elements=["organization_id"]))  # type: ignore[call-overload]


def reserve(session: Session, *, org_id: str, size: int, quota_bytes: int) -> bool:
    """Add ``size`` to the organization's usage only if the result stays within the quota."""
    ensure_usage_row(session, org_id=org_id)
    result = session.exec(  # type: ignore[call-overload]
        update(Usage)
        .where(col(Usage.organization_id) == org_id, col(Usage.used_bytes) + size <= quota_bytes)
        .values(used_bytes=col(Usage.used_bytes) + size, asset_count=col(Usage.asset_count) + 1)
    )
    return bool(result.rowcount == 1)


def release(session: Session, *, org_id: str, size: int) -> None:
    session.exec(  # type: ignore[call-overload]
        update(Usage)
        .where(col(Usage.organization_id) == org_id)
        .values(used_bytes=col(Usage.used_bytes) - size, asset_count=col(Usage.asset_count) - 1)
    )


def add_intent(session: Session, *, org_id: str, asset_id: str, key_prefix: str, now: datetime) -> None:
    session.add(UploadIntent(asset_id=asset_id, organization_id=org_id, key=key_prefix, created_at=now))


def consume_intent(session: Session, *, org_id: str, asset_id: str) -> bool:
    """Delete a live (not swept) intent; False if it is gone or the sweeper has claimed it."""
    result = session.exec(  # type: ignore[call-overload]
        delete(UploadIntent).where(
            col(UploadIntent.organization_id) == org_id,
            col(UploadIntent.asset_id) == asset_id,
            col(UploadIntent.swept).is_(False),
        )
    )
    return bool(result.rowcount == 1)


def drop_intent(session: Session, *, asset_id: str) -> None:
    session.exec(delete(UploadIntent).where(col(UploadIntent.asset_id) == asset_id))  # type: ignore[call-overload]


def claim_stale_intents(session: Session, *, older_than: datetime, limit: int) -> list[UploadIntent]:
    """Mark stale intents as swept (so their upload can no longer commit) and return them."""
    stale = list(
        session.exec(
            select(UploadIntent)
            .where(col(UploadIntent.created_at) < older_than)
            .order_by(col(UploadIntent.created_at))
            .limit(limit)
        )
    )
    if stale:
        session.exec(  # type: ignore[call-overload]
            update(UploadIntent)
            .where(col(UploadIntent.asset_id).in_([i.asset_id for i in stale]))
            .values(swept=True)
        )
    return stale


def add_tombstone(session: Session, *, asset: Asset, now: datetime) -> Tombstone:
    tombstone = Tombstone(
        asset_id=asset.id, organization_id=asset.organization_id, key=asset.key, created_at=now
    )
    session.add(tombstone)
    return tombstone


def tombstone(session: Session, *, org_id: str, asset_id: str) -> Tombstone | None:
    return session.exec(
        select(Tombstone).where(Tombstone.organization_id == org_id, Tombstone.asset_id == asset_id)
    ).first()


def drop_tombstone(session: Session, *, asset_id: str) -> None:
    session.exec(delete(Tombstone).where(col(Tombstone.asset_id) == asset_id))  # type: ignore[call-overload]


def stale_tombstones(session: Session, *, older_than: datetime, limit: int) -> list[Tombstone]:
    return list(
        session.exec(
            select(Tombstone)
            .where(col(Tombstone.created_at) < older_than)
            .order_by(col(Tombstone.created_at))
            .limit(limit)
        )
    )


def backlog(session: Session) -> tuple[int, int]:
    """(intents, tombstones) waiting, for the sweeper's gauge."""
    intents = session.exec(select(func.count()).select_from(UploadIntent)).one()
    tombstones = session.exec(select(func.count()).select_from(Tombstone)).one()
    return int(intents), int(tombstones)
