"""GET /api/assets's issue-50 filters: tags, metadata equality, media type, size and creation
ranges. Read from the query here and turned into WHERE clauses that any listing query of the
``assets`` table can add (``where``), so the listing's paging and sorting stay its own.

PostgreSQL asks the GIN indexes of the jsonb columns (``@>``); SQLite its side tables, kept by
triggers: ``asset_tags`` for tags (migration 0014_asset_metadata) and ``asset_meta`` for
metadata (0016_sqlite_asset_meta).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from starlette.datastructures import QueryParams

from coffer_kit.contract import describe
from coffer_kit.contract.errors import invalid
from coffer_metadata.models import Asset

_assets = Asset.__table__  # type: ignore[attr-defined]
MAX_BYTE_COUNT = 2**63 - 1  # sizes are BIGINT
_MEDIA_RANGE = re.compile(r"^[a-z0-9!#$&^_.+-]+/([a-z0-9!#$&^_.+-]+|\*)$")
_META = re.compile(r"^meta\[(.*)\]$")
_ASSET_TAGS = sa.table("asset_tags", sa.column("asset_id"), sa.column("organization_id"), sa.column("tag"))
_ASSET_META = sa.table(
    "asset_meta",
    sa.column("asset_id"),
    sa.column("organization_id"),
    sa.column("key"),
    sa.column("value_type"),
    sa.column("value"),
)


@dataclass(frozen=True, slots=True)
class AssetFilters:
    tags: tuple[str, ...] = ()
    tag_match: str = "all"
    # (key, the JSON values it may equal)
    meta: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    media_type: str | None = None
    min_size: int | None = None
    max_size: int | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    expires_before: datetime | None = None  # issue 47

    def __bool__(self) -> bool:
        return bool(
            self.tags
            or self.meta
            or self.media_type
            or self.min_size is not None
            or self.max_size is not None
            or self.created_after
            or self.created_before
            or self.expires_before
        )


NONE = AssetFilters()


def _size(params: QueryParams, name: str) -> int | None:
    raw = params.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_BYTE_COUNT:
        raise invalid(f"'{name}' is a whole number of bytes, 0 to {MAX_BYTE_COUNT}.", field=name)
    return int(raw)


def _instant(params: QueryParams, name: str) -> datetime | None:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        when = datetime.fromisoformat(raw)
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: outside the years 1 to 9999 in UTC
        raise invalid(f"'{name}' is an ISO 8601 instant (2026-11-27T00:00:00Z).", field=name) from None


def parse(params: QueryParams) -> AssetFilters:
    """The filters of a listing's query; 400 naming the parameter for a bad one."""
    tags = params.getlist("tag")
    if len(tags) > describe.MAX_TAG_FILTERS:
        raise invalid(f"At most {describe.MAX_TAG_FILTERS} 'tag' parameters.", field="tag")
    for tag in tags:
        if not re.fullmatch(describe.TAG_PATTERN, tag):
            raise invalid(
                "A tag is 1-64 characters of letters, digits, '_', '-', '.', ':', '/'.", field="tag"
            )
    tag_match = params.get("tagMatch", "all")
    if tag_match not in ("all", "any"):
        raise invalid("'tagMatch' is 'all' or 'any'.", field="tagMatch")
    meta: list[tuple[str, tuple[Any, ...]]] = []
    for name, value in params.multi_items():
        if (found := _META.fullmatch(name)) is not None:
            meta.append((found.group(1), tuple(describe.meta_filter_value(found.group(1), value))))
        elif name.startswith("meta["):  # meta[k=v, meta[k]x: never silently unfiltered
            raise invalid("A metadata filter is 'meta[KEY]=VALUE'.", field="meta")
    if len(meta) > describe.MAX_META_FILTERS:
        raise invalid(f"At most {describe.MAX_META_FILTERS} 'meta[KEY]' parameters.", field="meta")
    media_type = params.get("mediaType")
    if media_type is not None and not _MEDIA_RANGE.fullmatch(media_type):
        raise invalid("'mediaType' is a media type (image/png) or a range (image/*).", field="mediaType")
    return AssetFilters(
        tags=tuple(dict.fromkeys(tags)),
        tag_match=tag_match,
        meta=tuple(meta),
        media_type=media_type,
        min_size=_size(params, "minSize"),
        max_size=_size(params, "maxSize"),
        created_after=_instant(params, "createdAfter"),
        created_before=_instant(params, "createdBefore"),
        expires_before=_instant(params, "expiresBefore"),
    )


def where(dialect: str, org_id: str, filters: AssetFilters) -> list[sa.ColumnElement[bool]]:
    """The filters as WHERE clauses on ``assets`` (the caller scopes it by organization)."""
    clauses: list[sa.ColumnElement[bool]] = []
    if filters.tags:
        clauses.extend(_tags(dialect, org_id, filters.tags, every=filters.tag_match == "all"))
    for key, values in filters.meta:
        # A boolean holds for about half of the assets: a tag filter is the better lead then.
        probe = bool(filters.tags) and any(isinstance(v, bool) for v in values)
        clauses.append(_meta(dialect, org_id, key, values, probe=probe))
    if filters.media_type is not None:
        if filters.media_type.endswith("/*"):
            prefix = filters.media_type[:-1]
            clauses.append(_assets.c.mime_type.like(prefix.replace("_", "\\_") + "%", escape="\\"))
        else:
            clauses.append(_assets.c.mime_type == filters.media_type)
    if filters.min_size is not None:
        clauses.append(_assets.c.size >= filters.min_size)
    if filters.max_size is not None:
        clauses.append(_assets.c.size <= filters.max_size)
    if filters.created_after is not None:
        clauses.append(_assets.c.created_at >= filters.created_after)
    if filters.created_before is not None:
        clauses.append(_assets.c.created_at < filters.created_before)
    if filters.expires_before is not None:  # (no expiry is never before it)
        clauses.append(_assets.c.expires_at < filters.expires_before)
    return clauses


def _tags(dialect: str, org_id: str, tags: tuple[str, ...], *, every: bool) -> list[sa.ColumnElement[bool]]:
    if dialect == "postgresql":
        held = [sa.type_coerce(_assets.c.tags, JSONB()).contains([tag]) for tag in tags]
        return held if every else [sa.or_(*held)]

    def tagged(*wanted: str) -> sa.ColumnElement[bool]:
        ids = sa.select(_ASSET_TAGS.c.asset_id).where(
            _ASSET_TAGS.c.organization_id == org_id, _ASSET_TAGS.c.tag.in_(wanted)
        )
        inside: sa.ColumnElement[bool] = _assets.c.id.in_(ids)
        return inside

    return [tagged(tag) for tag in tags] if every else [tagged(*tags)]


def _meta(
    dialect: str, org_id: str, key: str, values: tuple[Any, ...], *, probe: bool
) -> sa.ColumnElement[bool]:
    """A ``meta[KEY]`` filter. On SQLite, with ``probe`` (a tag filter leads) a lookup of each
    candidate's key by its primary key; otherwise the (organization, key, value) index finds
    the assets. SQLite has no statistics of values to choose between them: a common value
    (``live=true`` of half the assets) read through the index made a tag-led query 3x slower,
    and probing each of a common tag's assets for a rare string value 3x slower the other way
    (bench/results/issue50.md). PostgreSQL likewise: its GIN index (``@>``) unless ``probe``,
    then the key's value compared on the rows the tags' index found (``->``, which it cannot use)."""
    if dialect == "postgresql":
        document = sa.type_coerce(_assets.c.custom_metadata, JSONB())
        if probe:
            wanted = (sa.cast(sa.literal(json.dumps(value)), JSONB()) for value in values)
            return sa.or_(*(document[key] == value for value in wanted))
        return sa.or_(*(document.contains({key: value}) for value in values))
    kind, value_of = _ASSET_META.c.value_type, _ASSET_META.c.value
    matches = []
    for value in values:
        if isinstance(value, bool):
            matches.append(kind == ("true" if value else "false"))
        elif isinstance(value, str):
            matches.append(sa.and_(kind == "text", value_of == value))
        else:
            matches.append(sa.and_(kind.in_(("integer", "real")), value_of == value))
    if probe:
        held = sa.exists().where(
            _ASSET_META.c.asset_id == _assets.c.id, _ASSET_META.c.key == key, sa.or_(*matches)
        )
        return held
    ids = sa.select(_ASSET_META.c.asset_id).where(
        _ASSET_META.c.organization_id == org_id, _ASSET_META.c.key == key, sa.or_(*matches)
    )
    inside: sa.ColumnElement[bool] = _assets.c.id.in_(ids)
    return inside
