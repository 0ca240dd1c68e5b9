"""Keyset pagination for every listing (issue 49): opaque cursors and the "after" condition.

A listing ordered by ``(column, id)`` (both ascending or both descending) continues after
the last row of a page: ``WHERE (column, id) > (last column, last id)`` (``<`` descending),
which an index on ``(scope…, column, id)`` answers by seeking, whatever the depth. Rows
inserted meanwhile never shift a page (unlike ``offset``): a row sorted before the cursor is
not shown, one sorted after it is.

The cursor is ``base64url(JSON [listing, sort value, id, check])``; ``listing`` names the
listing and its order (``assets:-createdAt``) and ``check`` is a digest of the listing, its
scope (organization, filters) and the values: a cursor that was cut, altered, or made by
another listing, order, filter or organization is 400 ``invalid_request`` (``details.field``
``cursor``). It holds no secret and gives no access: it only says where to start. Anyone can
write a cursor whose check holds, so its values are checked as input: an integer beyond 64
bits, or text that is not UTF-8 or holds a NUL, is 400 as well.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import sqlalchemy as sa

from coffer_kit.contract.errors import CofferError, invalid
from coffer_kit.contract.limits import CURSOR_MAX_CHARS

Kind = Literal["str", "int", "time"]


def _check(listing: str, scope: Sequence[Any], value: Any, row_id: str) -> str:
    material = json.dumps([listing, list(scope), value, row_id], separators=(",", ":"), default=str)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def _wire(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def encode(listing: str, scope: Sequence[Any], value: Any, row_id: str) -> str:
    """The cursor that continues ``listing`` (within ``scope``) after the row (value, id)."""
    wired = _wire(value)
    body = json.dumps([listing, wired, row_id, _check(listing, scope, wired, row_id)], separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def bad_cursor(reason: str) -> CofferError:
    return invalid(
        f"'cursor' is not a cursor of this listing ({reason}); start again without it.", field="cursor"
    )


def decode(cursor: str, listing: str, scope: Sequence[Any], kind: Kind) -> tuple[Any, str]:
    """The (sort value, id) a cursor continues after; 400 for anything else."""
    if not cursor or len(cursor) > CURSOR_MAX_CHARS:
        raise bad_cursor("empty or too long")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw.decode())
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):  # ([[[… nested deep)
        raise bad_cursor("malformed") from None
    if not (isinstance(parts, list) and len(parts) == 4):
        raise bad_cursor("malformed")
    name, wired, row_id, check = parts
    if not (isinstance(name, str) and isinstance(row_id, str) and isinstance(check, str)):
        raise bad_cursor("malformed")
    if name != listing:
        raise bad_cursor("made for another listing or order")
    if _check(listing, scope, wired, row_id) != check:
        raise bad_cursor("altered, or made for other filters or another organization")
    if not _storable(row_id):
        raise bad_cursor("malformed")
    return _value(wired, kind), row_id


def _storable(text: str) -> bool:
    """Whether a column may hold ``text``: UTF-8, without NUL (PostgreSQL's text has none)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _value(wired: Any, kind: Kind) -> Any:
    """The sort value, if a row may hold it (the check is no secret: anyone can write one)."""
    if kind == "int" and isinstance(wired, int) and not isinstance(wired, bool) and -(2**63) <= wired < 2**63:
        return wired
    if kind == "str" and isinstance(wired, str) and _storable(wired):
        return wired
    if kind == "time" and isinstance(wired, str):
        try:
            when = datetime.fromisoformat(wired)
        except ValueError:
            raise bad_cursor("malformed") from None
        if when.tzinfo is None:
            return when.replace(tzinfo=UTC)
        try:  # in UTC: SQLite's columns drop an offset rather than convert by it
            return when.astimezone(UTC)
        except OverflowError:  # within a day of the calendar's ends: before or after every row
            return when
    raise bad_cursor("malformed")


def after(
    column: sa.ColumnElement[Any],
    id_column: sa.ColumnElement[Any],
    value: Any,
    row_id: str,
    *,
    descending: bool,
) -> sa.ColumnElement[bool]:
    """Rows after (value, id) in the order ``(column, id)``, both ascending or both descending."""
    position = sa.tuple_(sa.literal(value, type_=column.type), sa.literal(row_id, type_=id_column.type))
    keys = sa.tuple_(column, id_column)
    return keys < position if descending else keys > position


def order(column: sa.ColumnElement[Any], id_column: sa.ColumnElement[Any], *, descending: bool) -> list[Any]:
    return [column.desc(), id_column.desc()] if descending else [column.asc(), id_column.asc()]


def next_cursor(
    rows: Sequence[Any], limit: int, listing: str, scope: Sequence[Any], value_of: str, id_of: str = "id"
) -> str | None:
    """The cursor after the page, or None when ``rows`` (read with ``limit + 1``) end the listing."""
    if len(rows) <= limit:
        return None
    last = rows[limit - 1]
    return encode(listing, scope, getattr(last, value_of), getattr(last, id_of))
