"""Asset, usage, intent and tombstone queries. Every data query is scoped by organization."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, get_args

import sqlalchemy as sa
from sqlalchemy import func, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row
from sqlmodel import Session, col, delete, select

from coffer_kit import pagination
from coffer_kit.contract.limits import TUS_EXPIRY_SECONDS
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.db import Database, DriverStatement, KeyedRead, PgTransaction
from coffer_kit.metrics import RETENTION_PRUNED
from coffer_metadata.folders.repository import tree_ids
from coffer_metadata.models import Asset, Event, Folder, Tombstone, TusUpload, UploadIntent, Usage

# The asset's JSON columns (issue 50).
JSON_COLUMNS = ("custom_metadata", "tags", "image")


def get(session: Session, *, org_id: str, asset_id: str, for_update: bool = False) -> Asset | None:
    """The asset; ``for_update`` locks its row to the end of the transaction (PostgreSQL; a
    SQLite write transaction holds the whole database already)."""
    query = select(Asset).where(Asset.organization_id == org_id, Asset.id == asset_id)
    return session.exec(query.with_for_update() if for_update else query).first()


# The hot read paths (one asset, a page, a count) as Core statements built once: building a
# statement costs more than running it, and rows need no ORM objects to become JSON.
_assets = Asset.__table__  # type: ignore[attr-defined]
_VIEW = sa.select(
    _assets.c.id,
    _assets.c.organization_id,
    _assets.c.folder_id,
    _assets.c.key,
    _assets.c.name,
    _assets.c.mime_type,
    _assets.c.size,
    _assets.c.created_at,
    _assets.c.sha256,
    _assets.c.updated_at,
    _assets.c.visibility,
    _assets.c.detected_type,
    _assets.c.scan_status,
    _assets.c.scan_signature,
    _assets.c.expires_at,
    _assets.c.custom_metadata,
    _assets.c.tags,
    _assets.c.image,
    _assets.c.placeholder,
)
_GET_ROW = KeyedRead(
    _VIEW.where(_assets.c.organization_id == sa.bindparam("org_id"), _assets.c.id == sa.bindparam("asset_id"))
)
_OWNER = KeyedRead(sa.select(_assets.c.organization_id).where(_assets.c.id == sa.bindparam("asset_id")))

# The listing without search: newest first (created_at desc, then id desc), in one of three
# scopes, each served by an index (organization_id[, folder_id], created_at, id).
Scope = Literal["all", "folder", "root"]
# How a page's rows are found: ``rows`` reads every row it skips; ``ids_in`` (SQLite) and
# ``ids_any`` (PostgreSQL) skip over ids alone, which the listing indexes hold.
Walk = Literal["rows", "ids_in", "ids_any"]
# From this many skipped entries on, skipping over ids alone is the cheaper, on both
# databases (measured at 100,000 assets). Below, it costs more than it saves: PostgreSQL
# plans it more slowly (page at offset 0: 0.78 ms of server CPU instead of 0.47), and it
# saves about 0.1 µs per skipped entry (offset 10,000: 1.9 ms instead of 2.9; SQLite 1.1 ms
# instead of 1.3).
IDS_WALK_FROM = 2000


def _in_scope(table: sa.FromClause, scope: Scope) -> list[sa.ColumnElement[bool]]:
    where = [table.c.organization_id == sa.bindparam("org_id")]
    if scope == "folder":
        where.append(table.c.folder_id == sa.bindparam("folder_id"))
    elif scope == "root":
        where.append(table.c.folder_id.is_(None))
    return where


def _order(table: sa.FromClause, *, from_oldest: bool) -> list[sa.UnaryExpression[Any]]:
    return [c.asc() if from_oldest else c.desc() for c in (table.c.created_at, table.c.id)]


def _page(scope: Scope, *, from_oldest: bool, walk: Walk) -> sa.Select[Any]:
    """The page that skips ``offset`` entries from the newest end, or from the oldest one.

    The ids forms select the page's ids in a subquery, which walks the listing index alone,
    and then read only those rows, newest first. Reading every column while skipping read
    every skipped row too: at offset 99,950 of 100,000, 27 ms of PostgreSQL server CPU
    instead of 14 (SQLite: 12.3 ms instead of 9.3). On PostgreSQL the ids travel as an array
    (``id = ANY(ARRAY(…))``), whose plan does not depend on the limit: with ``IN (…)`` or a
    join, the generic plan (which PostgreSQL may settle on once a statement has run a few
    times) hashed the whole table, 62 ms for any page.
    """
    # OFFSET up to 2**63 - 1 (the router bounds it).
    limit, offset = sa.bindparam("limit", type_=sa.Integer), sa.bindparam("offset", type_=sa.BigInteger)
    if walk == "rows":
        rows = _VIEW.where(*_in_scope(_assets, scope))
        return rows.order_by(*_order(_assets, from_oldest=from_oldest)).limit(limit).offset(offset)
    listed = _assets.alias("listed")
    ids = (
        sa.select(listed.c.id)
        .where(*_in_scope(listed, scope))
        .order_by(*_order(listed, from_oldest=from_oldest))
        .limit(limit)
        .offset(offset)
        .scalar_subquery()
    )
    match = _assets.c.id == sa.any_(func.array(ids)) if walk == "ids_any" else _assets.c.id.in_(ids)
    return _VIEW.where(match).order_by(*_order(_assets, from_oldest=False))


_PAGE = {
    (scope, from_oldest, walk): _page(scope, from_oldest=from_oldest, walk=walk)
    for scope in get_args(Scope)
    for from_oldest in (False, True)
    for walk in get_args(Walk)
}
_COUNT = {
    scope: sa.select(func.count()).select_from(_assets).where(*_in_scope(_assets, scope))
    for scope in ("folder", "root")
}
_usage = Usage.__table__  # type: ignore[attr-defined]
# Every asset of the organization: usage keeps that count in the same transactions.
_COUNT["all"] = sa.select(_usage.c.asset_count).where(_usage.c.organization_id == sa.bindparam("org_id"))


def _scope(folder_id: str | None, root_only: bool) -> Scope:
    return "root" if root_only else "folder" if folder_id is not None else "all"


def owner(connection: Connection, asset_id: str) -> str | None:
    """The organization an asset belongs to, if it exists: tells 403 from 404, reads nothing else."""
    return connection.execute(_OWNER.statement, {"asset_id": asset_id}).scalar()


async def read_owner(database: Database, asset_id: str) -> str | None:
    """``owner``, read as the asset GET reads its row."""
    row = await _OWNER.first(database, {"asset_id": asset_id})
    return None if row is None else str(row.organization_id)


async def get_row(database: Database, *, org_id: str, asset_id: str) -> Any | None:
    """The asset's public fields, if the organization has it (the hot read of the asset GET)."""
    return await _GET_ROW.first(database, {"org_id": org_id, "asset_id": asset_id})


def one_snapshot(session: Session) -> None:
    """Make the session's statements see one snapshot, as ``page`` needs of its ``total``.

    SQLite's read transaction has one already. PostgreSQL's default (READ COMMITTED) takes a
    snapshot per statement; REPEATABLE READ takes one for the transaction, and a transaction
    that only reads never fails to serialize. psycopg puts the level in its BEGIN: no extra
    round trip. Call it before the session's first statement.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def page(
    session: Session,
    *,
    org_id: str,
    folder_id: str | None,
    root_only: bool,
    limit: int,
    offset: int,
    total: int,
) -> list[Row]:  # type: ignore[type-arg]
    """Newest first (created_at desc, then id desc): stable across pages.

    ``total`` is ``count`` in the same snapshot (``one_snapshot``). A page past the middle
    is found from the oldest end, so no page skips more than half of the listing: the last
    page of 100,000 assets skips none instead of 99,950. A page past the end is empty
    without a query (skipping every entry to find none cost as much as the last page).
    """
    if offset >= total:
        return []
    after = max(total - offset - limit, 0)  # entries after the page
    from_oldest = after < offset
    if from_oldest:
        limit, offset = min(limit, total - offset), after
    walk: Walk = "rows"
    if offset >= IDS_WALK_FROM:
        walk = "ids_any" if session.get_bind().dialect.name == "postgresql" else "ids_in"
    params = {"org_id": org_id, "folder_id": folder_id, "limit": limit, "offset": offset}
    rows = list(session.connection().execute(_PAGE[_scope(folder_id, root_only), from_oldest, walk], params))
    # The rows form answers in the order it walked.
    return rows[::-1] if from_oldest and walk == "rows" else rows


# A page of every asset that skips at most this many entries is read on the event loop in one
# statement (``first_page``): the skip and the page are index steps and 50 rows, a fraction of
# a millisecond (docs/performance.md, issue 27).
FIRST_PAGE_OFFSET_MAX = 500
# The page with the organization's asset count (the usage row's, kept in the same
# transactions) as its last column: one statement, so one snapshot on both databases.
_FIRST_PAGE = KeyedRead(
    _PAGE["all", False, "rows"].add_columns(_COUNT["all"].scalar_subquery().label("total"))
)


async def first_page(
    database: Database, *, org_id: str, limit: int, offset: int
) -> tuple[list[Any], int] | None:
    """A page of every asset, newest first, at most ``FIRST_PAGE_OFFSET_MAX`` entries in, and
    the total, read on the event loop; None for an empty page (no asset, or past the end),
    whose total ``count`` reads apart."""
    rows = await _FIRST_PAGE.all(database, {"org_id": org_id, "limit": limit, "offset": offset})
    return (rows, int(rows[0].total or 0)) if rows else None


def count(session: Session, *, org_id: str, folder_id: str | None, root_only: bool) -> int:
    params = {"org_id": org_id, "folder_id": folder_id}
    return int(session.connection().execute(_COUNT[_scope(folder_id, root_only)], params).scalar() or 0)


# GET /api/assets?sort=… (CONTRACT §8): the column, and whether it descends; ties by id alike.
Sort = Literal["-createdAt", "createdAt", "name", "-name", "size", "-size"]
SORTS: dict[Sort, tuple[str, bool]] = {
    "-createdAt": ("created_at", True),
    "createdAt": ("created_at", False),
    "name": ("name", False),
    "-name": ("name", True),
    "size": ("size", False),
    "-size": ("size", True),
}
DEFAULT_SORT: Sort = "-createdAt"


def _like_pattern(q_key: str) -> str:
    """A LIKE pattern matching ``q_key`` anywhere, its own wildcards taken literally."""
    escaped = q_key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# SQLite: the matching rows, from the trigram index of the names (migration 0003) for a query
# of three characters or more, else by reading the (organization_id, name_key) index alone
# (and so too when the trigram index holds too many candidates: ``_sqlite_candidates``);
# either way ``name_key LIKE`` decides, so both answer alike. The organization is then checked
# on those rows (``+`` keeps the planner from walking the organization's index instead: it
# would look every asset up to test it against the matches, 45 ms at 100,000 assets where the
# trigram index and the matches take 1 ms; docs/api.md, "Search").
_SQLITE_ORG = sa.text("+assets.organization_id = :q_owner")
_SQLITE_CANDIDATES = sa.text(
    "SELECT rowid FROM assets_name_search WHERE assets_name_search MATCH :q_match LIMIT :q_limit"
)
# The trigram index's candidates as a JSON array: one parameter, however many.
_SQLITE_TRIGRAMS = sa.text(
    "assets.rowid IN (SELECT value FROM json_each(:q_rowids)) AND assets.name_key LIKE :q_pattern ESCAPE '\\'"
)
_SQLITE_MATCHES = sa.text(
    "assets.rowid IN (SELECT rowid FROM assets INDEXED BY ix_assets_org_name_key"
    " WHERE organization_id = :q_org AND name_key LIKE :q_pattern ESCAPE '\\')"
)
# The trigram index holds every organization's names, and each candidate it finds costs about
# 120 times what one entry of the organization's name index costs to read, whichever
# organization the candidate is of (bench/scale.py --sqlite: 30 µs against 0.25; warm, 10,000
# assets beside 1,000 organizations of 1,000 holding the same names: 9.7 µs against 0.08). So
# from one candidate per 120 of the organization's assets on, reading its own index is the
# cheaper: a term in 1,002 organizations' names took 34 ms for 10,000 assets beside them,
# against 2.3 alone (docs/performance.md, "Scale").
_ROWS_PER_CANDIDATE = 120


def _fts_phrase(q_key: str) -> str:
    """``q_key`` as one FTS5 string: the trigram tokenizer matches it as a substring."""
    return '"' + q_key.replace('"', '""') + '"'


def _sqlite_candidates(session: Session, org_id: str, q_key: str) -> str | None:
    """The rowids the trigram index finds for ``q_key`` (a JSON array), or None when reading the
    organization's name index costs less than checking them.

    The trigram index is asked for at most one candidate per ``_ROWS_PER_CANDIDATE`` of the
    organization's assets: finding that many, the search reads the organization's index
    instead, so whatever the other organizations hold it costs about what that index does at
    most. Below the bound, the candidates found are the ones the search checks: the trigram
    index is read once (reading it again in the search doubled the cost of a rare term, 11.6 ms
    against 5.1 beside 1,000,000 names sharing most of its trigrams). The session's transaction
    (one snapshot on SQLite) holds them for the search that follows, and for its count (a cursor
    page with ``total``), which asks for them again: answered from ``session.info``."""
    known: dict[tuple[str, str], str | None] = session.info.setdefault("sqlite_candidates", {})
    if (org_id, q_key) not in known:
        known[org_id, q_key] = _probe_trigrams(session, org_id, q_key)
    return known[org_id, q_key]


def _probe_trigrams(session: Session, org_id: str, q_key: str) -> str | None:
    connection = session.connection()
    # The usage row counts the organization's assets (in the transactions that change them).
    bound = int(connection.execute(_COUNT["all"], {"org_id": org_id}).scalar() or 0) // _ROWS_PER_CANDIDATE
    if bound == 0:  # under 120 assets: reading them all costs less than one candidate
        return None
    params = {"q_match": _fts_phrase(q_key), "q_limit": bound}
    rowids = list(connection.execute(_SQLITE_CANDIDATES, params).scalars())
    return None if len(rowids) >= bound else json.dumps(rowids)


def _filters(
    session: Session,
    org_id: str,
    folder_id: str | None,
    root_only: bool,
    q_key: str | None,
    visibility: str | None = None,
    within: str | None = None,
    extra: Sequence[sa.ColumnElement[bool]] = (),
) -> list[sa.ColumnElement[bool]]:
    sqlite_search = q_key is not None and session.get_bind().dialect.name == "sqlite"
    where: list[sa.ColumnElement[bool]] = [_assets.c.organization_id == org_id]
    if sqlite_search:
        where = [_SQLITE_ORG.bindparams(q_owner=org_id)]  # type: ignore[list-item]
    if root_only:
        where.append(_assets.c.folder_id.is_(None))
    elif folder_id is not None:
        where.append(_assets.c.folder_id == folder_id)
    if visibility is not None:
        where.append(_assets.c.visibility == visibility)
    if within is not None:  # a subtree key's every asset (issue 46)
        where.append(_assets.c.folder_id.in_(tree_ids(org_id, within)))
    if q_key is not None:
        pattern = _like_pattern(q_key)
        if not sqlite_search:
            # PostgreSQL: the trigram index on name_key serves the LIKE.
            where.append(_assets.c.name_key.like(pattern, escape="\\"))
        # A trigram index finds nothing shorter than a trigram.
        elif len(q_key) >= 3 and (rowids := _sqlite_candidates(session, org_id, q_key)) is not None:
            where.append(_SQLITE_TRIGRAMS.bindparams(q_rowids=rowids, q_pattern=pattern))  # type: ignore[arg-type]
        else:
            where.append(_SQLITE_MATCHES.bindparams(q_org=org_id, q_pattern=pattern))  # type: ignore[arg-type]
    where.extend(extra)  # the listing's filters (assets.filters, issue 50)
    return where


def search_page(
    session: Session,
    *,
    org_id: str,
    folder_id: str | None,
    root_only: bool,
    q_key: str | None,
    sort: Sort,
    limit: int,
    offset: int,
    visibility: str | None = None,
    within: str | None = None,
    extra: Sequence[sa.ColumnElement[bool]] = (),
) -> tuple[list[Row], int | None]:  # type: ignore[type-arg]
    """A page in any of the SORTS order, optionally only names containing ``q_key``, and then
    the number of matches (None without ``q_key`` or when the page is empty: ask ``count``
    or ``search_count``).

    With a search, page and total come from one statement (a window count), so the matches
    are found once; without one the total is kept elsewhere, and the page may stop early.
    """
    column, descending = SORTS[sort]
    order = [_assets.c[column], _assets.c.id]
    counted = q_key is not None or bool(extra)
    select = _VIEW.add_columns(func.count().over().label("total")) if counted else _VIEW
    statement = (
        select.where(*_filters(session, org_id, folder_id, root_only, q_key, visibility, within, extra))
        .order_by(*(c.desc() if descending else c.asc() for c in order))
        .limit(limit)
        .offset(offset)
    )
    rows = list(session.connection().execute(statement))
    return rows, (int(rows[0].total) if rows and counted else None)


def cursor_page(
    session: Session,
    *,
    org_id: str,
    folder_id: str | None,
    root_only: bool,
    q_key: str | None,
    sort: Sort,
    limit: int,
    position: tuple[Any, str] | None,
    visibility: str | None = None,
    within: str | None = None,
    extra: Sequence[sa.ColumnElement[bool]] = (),
) -> list[Row]:  # type: ignore[type-arg]
    """Up to ``limit + 1`` rows in the SORTS order after ``position`` (a cursor's sort value
    and id; None: from the start), so the caller knows whether another page follows. The
    organization's (sort column, id) indexes seek to the position (migration 0012_cursors)."""
    column, descending = SORTS[sort]
    where = _filters(session, org_id, folder_id, root_only, q_key, visibility, within, extra)
    if position is not None:
        where.append(pagination.after(_assets.c[column], _assets.c.id, *position, descending=descending))
    statement = (
        _VIEW.where(*where)
        .order_by(*pagination.order(_assets.c[column], _assets.c.id, descending=descending))
        .limit(limit + 1)
    )
    return list(session.connection().execute(statement))


def search_count(
    session: Session,
    *,
    org_id: str,
    folder_id: str | None,
    root_only: bool,
    q_key: str | None,
    visibility: str | None = None,
    within: str | None = None,
    extra: Sequence[sa.ColumnElement[bool]] = (),
) -> int:
    statement = (
        sa.select(func.count())
        .select_from(_assets)
        .where(*_filters(session, org_id, folder_id, root_only, q_key, visibility, within, extra))
    )
    return int(session.connection().execute(statement).scalar() or 0)


def usage(session: Session, *, org_id: str) -> Usage:
    return session.get(Usage, org_id) or Usage(organization_id=org_id, used_bytes=0, asset_count=0)


def ensure_usage_row(session: Session, *, org_id: str) -> None:
    """Create the organization's usage row if missing (concurrency-safe upsert)."""
    session.connection().execute(_NEW_USAGE[_dialect(session)], {"organization_id": org_id})


# The upload's writes (intent, quota, asset, intent consumed) as Core statements built once:
# through SQLModel, the ORM's flush alone was 17.5% of metadata's busy samples under 16
# concurrent 4 KiB uploads (bench/profile.py upload-small), more than running the SQL.
_intents = UploadIntent.__table__  # type: ignore[attr-defined]
_folders = Folder.__table__  # type: ignore[attr-defined]
_events = Event.__table__  # type: ignore[attr-defined]
_NEW_USAGE = {
    "sqlite": sqlite.insert(_usage).values(used_bytes=0, asset_count=0).on_conflict_do_nothing(),
    "postgresql": postgresql.insert(_usage).values(used_bytes=0, asset_count=0).on_conflict_do_nothing(),
}
# A resumable upload's intent (``expires_at`` set, 24 h after its last write) holds its length
# only while it is active: written (or locked) within the idle time before. An idle one keeps
# its bytes until it expires, but neither its reservation nor its place among the uploads in
# flight; its next write asks for both again (coffer_metadata.tus.lock). The idle time is the
# operator's (COFFER_METADATA_TUS_IDLE_SECONDS); an intent is active while its expiry is later
# than ``active_after`` (now + 24 h - the idle time).
_EXPIRY = timedelta(seconds=TUS_EXPIRY_SECONDS)
_ACTIVE_AFTER = sa.bindparam("p_active_after", type_=_intents.c.expires_at.type)
_ACTIVE = sa.or_(_intents.c.expires_at.is_(None), _intents.c.expires_at > _ACTIVE_AFTER)


def active_after(*, now: datetime, idle: timedelta) -> datetime:
    """The expiry after which a resumable upload's intent is active (see ``_ACTIVE``)."""
    return now + _EXPIRY - idle


# What the organization's other active resumable uploads hold: their lengths are exact and
# reserved for hours, so every commit honours them (a one-shot upload's hold is its body's
# upper bound for the seconds it streams: counted when an upload is admitted, not at commit,
# so that a file that fits is never refused for another's framing).
_HELD_BY_OTHERS = (
    sa.select(func.coalesce(func.sum(_intents.c.reserved_bytes), 0))
    .where(
        _intents.c.organization_id == sa.bindparam("p_org"),
        _intents.c.asset_id != sa.bindparam("p_asset"),
        _intents.c.swept.is_(False),
        _intents.c.expires_at.is_not(None),
        _intents.c.expires_at > _ACTIVE_AFTER,
    )
    .scalar_subquery()
)


# The upload's quota reserved: the commit's checks (``_COMMIT_CHECKS``) found that it fits.
_RESERVE = (
    sa.update(_usage)
    .where(_usage.c.organization_id == sa.bindparam("p_org"))
    .values(used_bytes=_usage.c.used_bytes + sa.bindparam("p_size"), asset_count=_usage.c.asset_count + 1)
)
# An intent whose asset id is taken inserts nothing (rowcount 0): no savepoint needed to
# tell a duplicate from a success. (SQLAlchemy keeps an INSERT's rowcount only when asked:
# psycopg's reads -1 otherwise.)
_NEW_INTENT = {
    dialect: insert(_intents)
    .on_conflict_do_nothing(index_elements=["asset_id"])
    .execution_options(preserve_rowcount=True)
    for dialect, insert in (("sqlite", sqlite.insert), ("postgresql", postgresql.insert))
}
_CONSUME_INTENT = sa.delete(_intents).where(
    _intents.c.organization_id == sa.bindparam("p_org"),
    _intents.c.asset_id == sa.bindparam("p_asset"),
    _intents.c.swept.is_(False),
)
_NEW_ASSET = sa.insert(_assets)
_LOCK_USAGE = (
    sa.select(_usage.c.used_bytes).where(_usage.c.organization_id == sa.bindparam("p_org")).with_for_update()
)
_IN_FLIGHT = sa.select(func.count(), func.coalesce(func.sum(_intents.c.reserved_bytes), 0)).where(
    _intents.c.organization_id == sa.bindparam("p_org"), _intents.c.swept.is_(False), _ACTIVE
)


def _dialect(session: Session) -> str:
    return "postgresql" if session.get_bind().dialect.name == "postgresql" else "sqlite"


def release(session: Session, *, org_id: str, size: int) -> None:
    session.exec(
        update(Usage)
        .where(col(Usage.organization_id) == org_id)
        .values(used_bytes=col(Usage.used_bytes) - size, asset_count=col(Usage.asset_count) - 1)
    )


def lock_usage(session: Session, *, org_id: str) -> int:
    """The organization's stored bytes, its usage row locked to the end of the transaction.

    Every new intent of the organization takes this lock first (on SQLite, the single writer
    is the lock), so what ``uploads_in_flight`` reads next cannot change under it."""
    conn = session.connection()
    used = conn.execute(_LOCK_USAGE, {"p_org": org_id}).scalar()
    if used is None:
        ensure_usage_row(session, org_id=org_id)
        used = conn.execute(_LOCK_USAGE, {"p_org": org_id}).scalar()
    return int(used or 0)


def uploads_in_flight(session: Session, *, org_id: str, active_after: datetime) -> tuple[int, int]:
    """(uploads, bytes reserved) of the organization's live intents (a resumable upload's only
    while it is active)."""
    params = {"p_org": org_id, "p_active_after": active_after}
    count, reserved = session.connection().execute(_IN_FLIGHT, params).one()
    return int(count), int(reserved)


def intent_row(
    *, org_id: str, asset_id: str, key_prefix: str, now: datetime, reserved_bytes: int = 0
) -> dict[str, Any]:
    """An upload intent's row (every column of ``upload_intents``)."""
    return {
        "asset_id": asset_id,
        "organization_id": org_id,
        "key": key_prefix,
        "created_at": now,
        "swept": False,
        "reserved_bytes": reserved_bytes,
        "expires_at": None,
    }


def add_intent(session: Session, row: dict[str, Any]) -> bool:
    """Record an upload intent; False if one with this asset id exists already."""
    return bool(session.connection().execute(_NEW_INTENT[_dialect(session)], row).rowcount == 1)


def consume_intent(session: Session, *, org_id: str, asset_id: str) -> bool:
    """Delete a live (not swept) intent; False if it is gone or the sweeper has claimed it."""
    result = session.connection().execute(_CONSUME_INTENT, {"p_org": org_id, "p_asset": asset_id})
    return bool(result.rowcount == 1)


def add_asset(session: Session, values: dict[str, Any]) -> None:
    """Insert an asset row (every column of ``assets`` in ``values``)."""
    session.connection().execute(_NEW_ASSET, values)


def drop_intent(session: Session, *, asset_id: str) -> None:
    session.exec(delete(UploadIntent).where(col(UploadIntent.asset_id) == asset_id))


def mark_swept(session: Session, *, org_id: str, asset_id: str) -> None:
    """One intent marked swept, as ``claim_stale_intents`` marks the stale ones."""
    session.exec(
        update(UploadIntent)
        .where(col(UploadIntent.organization_id) == org_id, col(UploadIntent.asset_id) == asset_id)
        .values(swept=True)
    )


def claim_stale_intents(
    session: Session, *, older_than: datetime, now: datetime, limit: int
) -> list[UploadIntent]:
    """Mark stale intents as swept (so their upload can no longer commit) and return them: those
    older than ``older_than``, but a resumable upload's once it has expired."""
    expires_at = col(UploadIntent.expires_at)
    stale = list(
        session.exec(
            select(UploadIntent)
            .where(
                sa.or_(
                    sa.and_(expires_at.is_(None), col(UploadIntent.created_at) < older_than),
                    expires_at < now,
                )
            )
            .order_by(col(UploadIntent.created_at))
            .limit(limit)
        )
    )
    if not stale:
        return []
    # Only the intents still there once marked: a commit that consumed one between the SELECT
    # and this UPDATE (PostgreSQL, read committed) made it an asset whose bytes must stay.
    marked = set(
        session.execute(
            update(UploadIntent)
            .where(col(UploadIntent.asset_id).in_([i.asset_id for i in stale]))
            .values(swept=True)
            .returning(col(UploadIntent.asset_id))
        ).scalars()
    )
    return [i for i in stale if i.asset_id in marked]


def drop_tus_upload(session: Session, *, asset_id: str) -> None:
    """A resumable upload's bytes are deleted: its row goes with its intent."""
    session.exec(delete(TusUpload).where(col(TusUpload.asset_id) == asset_id))


def drop_completed_tus_uploads(session: Session, *, now: datetime, limit: int) -> None:
    """Complete resumable uploads past their expiry: HEAD no longer answers them."""
    stale = select(TusUpload.id).where(col(TusUpload.completed).is_(True), col(TusUpload.expires_at) < now)
    dropped = session.exec(
        delete(TusUpload).where(col(TusUpload.id).in_(stale.limit(limit).scalar_subquery()))
    )
    RETENTION_PRUNED.labels("tus_upload").inc(int(dropped.rowcount or 0))  # (as retention counts them)


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
    session.exec(delete(Tombstone).where(col(Tombstone.asset_id) == asset_id))


def stale_tombstones(session: Session, *, older_than: datetime, limit: int) -> list[Tombstone]:
    return list(
        session.exec(
            select(Tombstone)
            .where(col(Tombstone.created_at) < older_than)
            .order_by(col(Tombstone.created_at))
            .limit(limit)
        )
    )


# An intent the sweeper may take: claimed already, a resumable upload's past its expiry, or a
# one-shot upload's older than the sweeper's default age (COFFER_SWEEP_INTENT_AGE_SECONDS).
STALE_INTENT_SECONDS = 3600


def backlog(session: Session) -> tuple[int, int]:
    """(intents, tombstones) waiting for the sweeper, for its gauge: the stale intents, not the
    uploads in flight (which counted, and an install with a hundred uploads streaming had its
    backlog alert firing)."""
    now = utcnow()
    expires_at = col(UploadIntent.expires_at)
    stale = sa.or_(
        col(UploadIntent.swept).is_(True),
        expires_at < now,
        sa.and_(
            expires_at.is_(None), col(UploadIntent.created_at) < now - timedelta(seconds=STALE_INTENT_SECONDS)
        ),
    )
    intents = session.exec(select(func.count()).select_from(UploadIntent).where(stale)).one()
    tombstones = session.exec(select(func.count()).select_from(Tombstone)).one()
    return int(intents), int(tombstones)


# The upload's two writes as PostgreSQL sends them from the event loop (``Database.write``'s
# ``on_loop``, coffer_kit.db.PgTransaction). Each exchange with the server costs metadata
# 110-170 µs of CPU (psycopg and asyncio waiting for the answer), more than the statements
# in it: the intent is two, the commit one (a single statement, its own transaction).
_LOOP_LOCK_USAGE = DriverStatement(_LOCK_USAGE)
_LOOP_IN_FLIGHT = DriverStatement(_IN_FLIGHT)
_LOOP_NEW_INTENT = DriverStatement(_NEW_INTENT["postgresql"])


# The upload's commit, one rule (docs/architecture.md, the rule → file table): under the usage
# row's lock, the checks (the folder is the organization's, the upload fits the quota) read as
# one row, then the live intent consumed if they pass, the quota reserved, the asset and its
# event inserted. ``coffer_metadata.assets.service.refusal`` answers from the checks and whether
# the intent was consumed, whichever way the steps ran: one by one through a Session (SQLite,
# and PostgreSQL's uncommon cases), or chained into one PostgreSQL statement sent with the
# COMMIT (``commit_on_loop``). A column of ``assets`` or ``events`` is a bound value of the
# row the service builds, whichever way.
_P_FOLDER = sa.bindparam("p_folder", type_=sa.String)
_P_ORG = sa.bindparam("p_org", type_=sa.String)
# What the checks measure, each read once (the LIMIT keeps both databases from pulling the
# subquery up into the checks, which would read each twice).
_MEASURED = (
    sa.select(
        sa.select(_folders.c.organization_id)
        .where(_folders.c.id == _P_FOLDER)
        .scalar_subquery()
        .label("folder_owner"),
        # The folder's default expiry (issue 47), read by the same primary-key lookup's page.
        sa.select(_folders.c.expiry_days)
        .where(_folders.c.id == _P_FOLDER, _folders.c.organization_id == _P_ORG)
        .scalar_subquery()
        .label("expiry_days"),
        sa.select(_usage.c.used_bytes)
        .where(_usage.c.organization_id == _P_ORG)
        .scalar_subquery()
        .label("used"),
        _HELD_BY_OTHERS.label("held"),
    )
    .limit(1)
    .subquery("measured")
)
# The quota rule: the stored bytes, what the organization's other active resumable uploads
# hold and the upload fit the quota. Read under the usage row's lock (``lock_usage``: every new
# or renewed hold takes that lock first), so that the sum, read in the statement's own
# snapshot, misses no hold.
_FITS = _MEASURED.c.used + sa.bindparam("p_size", type_=sa.BigInteger) + _MEASURED.c.held <= sa.bindparam(
    "p_quota", type_=sa.BigInteger
)
_COMMIT_CHECKS = sa.select(
    sa.or_(_P_FOLDER.is_(None), _MEASURED.c.folder_owner.is_not_distinct_from(_P_ORG)).label("folder_ok"),
    _MEASURED.c.folder_owner,
    _FITS.label("fits"),
    _MEASURED.c.used,
    _MEASURED.c.held,
    _MEASURED.c.expiry_days,
    # The asset takes the folder's default expiry: the row's ``expires_at`` must be computed
    # from it first (``commit_on_loop``'s chain writes nothing then; the Session path does it).
    sa.and_(
        sa.not_(sa.bindparam("p_own_expiry", type_=sa.Boolean)), _MEASURED.c.expiry_days.is_not(None)
    ).label("needs_expiry"),
)
# (``CommitChecks.of`` reads the checks' columns from the front of a row.)
_CHECKS_COLUMNS = len(_COMMIT_CHECKS.selected_columns)


def _consume_checked(checks: sa.FromClause, *, expiry_known: bool = False) -> sa.Delete:
    """The live intent consumed only if ``checks`` (``_COMMIT_CHECKS``) pass: a refused commit
    writes nothing. Deleting the intent locks it, so the sweeper cannot claim it meanwhile (and
    one it claimed first is not consumed). With ``expiry_known``, an asset that needs its
    folder's default expiry also writes nothing (its row, bound before, does not have it)."""
    passed = sa.select(checks.c.fits).where(checks.c.folder_ok, checks.c.fits)
    if expiry_known:
        passed = passed.where(sa.not_(checks.c.needs_expiry))
    return _CONSUME_INTENT.where(sa.exists(passed))


_CONSUME_CHECKED = _consume_checked(_COMMIT_CHECKS.subquery("checks"))


def commit_params(asset: dict[str, Any], *, quota_bytes: int, active_after: datetime) -> dict[str, Any]:
    """The commit's parameters besides the asset's and its event's columns."""
    return {
        "p_org": asset["organization_id"],
        "p_asset": asset["id"],
        "p_folder": asset["folder_id"],
        "p_own_expiry": asset.get("expires_at") is not None,
        "p_size": asset["size"],
        "p_quota": quota_bytes,
        "p_active_after": active_after,
    }


@dataclass(frozen=True, slots=True)
class CommitChecks:
    """What ``_COMMIT_CHECKS`` read: whether the folder (if one is named) is the organization's
    and which organization has it, whether the upload fits the quota, and the stored bytes and
    other uploads' holds that it was measured against."""

    folder_ok: bool
    folder_owner: str | None
    fits: bool
    used: int
    held: int
    # The folder's default expiry in days, and whether the asset (without its own) takes it.
    expiry_days: int | None = None
    needs_expiry: bool = False

    @classmethod
    def of(cls, row: Sequence[Any]) -> CommitChecks:
        folder_ok, folder_owner, fits, used, held, days, needs = row[:_CHECKS_COLUMNS]
        return cls(
            bool(folder_ok),
            folder_owner,
            bool(fits),
            int(used or 0),
            int(held or 0),
            None if days is None else int(days),
            bool(needs),
        )


def commit_checks(session: Session, params: dict[str, Any]) -> CommitChecks:
    """The commit's checks (``_COMMIT_CHECKS``), after ``lock_usage``."""
    return CommitChecks.of(session.connection().execute(_COMMIT_CHECKS, params).one())


def consume_checked_intent(session: Session, params: dict[str, Any]) -> bool:
    """Consume the live intent if the checks pass; False if they do not, or it is gone or swept."""
    return bool(session.connection().execute(_CONSUME_CHECKED, params).rowcount == 1)


def reserve(session: Session, params: dict[str, Any]) -> None:
    """Add the upload to the organization's usage (its intent consumed: the checks passed)."""
    session.connection().execute(_RESERVE, params)


def _insert_if(table: sa.Table, prefix: str, after: sa.CTE, name: str) -> sa.CTE:
    """``table``'s row, its columns bound as ``prefix`` + name, inserted if ``after`` took a row."""
    columns = list(table.c)
    row = sa.select(*(sa.bindparam(prefix + c.name, type_=c.type) for c in columns))
    inserted = sa.insert(table).from_select(columns, row.where(sa.exists(sa.select(*after.c))))
    return inserted.returning(*table.primary_key.columns).cte(name)


def _commit_chain() -> sa.Select[Any]:
    """The commit's steps as one PostgreSQL statement: each step waits for the one before
    through its rows (data-modifying CTEs see each other's RETURNING, never each other's changes
    to the tables). It answers the checks and how many rows each write took (1 each, or 0 each
    when the checks failed or the intent was gone)."""
    checks = _COMMIT_CHECKS.cte("checks")
    consumed = _consume_checked(checks, expiry_known=True).returning(_intents.c.asset_id).cte("consumed")
    reserved = (
        _RESERVE.where(sa.exists(sa.select(*consumed.c))).returning(_usage.c.organization_id).cte("reserved")
    )
    added = _insert_if(_assets, "", reserved, "added")
    recorded = _insert_if(_events, "e_", added, "recorded")
    took = [
        sa.select(func.count()).select_from(s).scalar_subquery()
        for s in (consumed, reserved, added, recorded)
    ]
    # Every write step took or none did (a quota reserved for no asset cannot be left): if
    # not, the statement fails on a division by zero, and so writes nothing at all.
    whole = sa.literal(1) // sa.case((sa.and_(*(t == took[0] for t in took[1:])), 1), else_=0)
    return sa.select(*checks.c, *took, whole)


_LOOP_COMMIT = DriverStatement(_commit_chain())


async def lock_usage_on_loop(
    transaction: PgTransaction, *, org_id: str, active_after: datetime
) -> tuple[int, int, int] | None:
    """``lock_usage`` and then ``uploads_in_flight``, in one exchange: (stored bytes, uploads,
    bytes reserved); None if the organization has no usage row yet."""
    org = {"p_org": org_id}
    flying = {"p_org": org_id, "p_active_after": active_after}
    locked, flight = await transaction.send((_LOOP_LOCK_USAGE, org), (_LOOP_IN_FLIGHT, flying))
    if not locked.rows:
        return None
    uploads, reserved = flight.rows[0]
    return int(locked.rows[0][0]), int(uploads), int(reserved)


async def add_intent_on_loop(transaction: PgTransaction, row: dict[str, Any]) -> bool:
    """``add_intent``, and the transaction's COMMIT in the same exchange."""
    (added,) = await transaction.send((_LOOP_NEW_INTENT, row), commit=True)
    return bool(added.rowcount == 1)


async def commit_on_loop(
    transaction: PgTransaction, *, asset: dict[str, Any], event: dict[str, Any], params: dict[str, Any]
) -> tuple[CommitChecks, bool] | None:
    """The commit's steps (``_commit_chain``) after the usage row's lock, and the COMMIT, in one
    exchange: the checks and whether the intent was consumed (every write took; none did if
    not); None if the organization has no usage row yet (nothing was written). The statement
    starts once the lock is held, so its snapshot has every hold (``_FITS``)."""
    from psycopg.types.json import Jsonb  # on PostgreSQL only: the embedded default never loads psycopg

    values = {
        **asset,
        # (jsonb as psycopg sends it: a loop commit's values go to the driver as they are.)
        **{name: None if asset[name] is None else Jsonb(asset[name]) for name in JSON_COLUMNS},
        **{"e_" + name: value for name, value in event.items()},
        **params,
    }
    # (A step that does not take writes nothing, so the COMMIT is safe in the same exchange.)
    locked, steps = await transaction.send(
        (_LOOP_LOCK_USAGE, {"p_org": params["p_org"]}), (_LOOP_COMMIT, values), commit=True
    )
    if not locked.rows:
        return None
    row = steps.rows[0]
    return CommitChecks.of(row), row[_CHECKS_COLUMNS] == 1
