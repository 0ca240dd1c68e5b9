"""Timestamps as the contract writes them: ISO 8601 UTC, milliseconds, ``Z``."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    """The current time, timezone-aware UTC, truncated to milliseconds."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def as_utc(value: datetime) -> datetime:
    """Treat a naive datetime (as SQLite returns them) as UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def isoformat(value: datetime) -> str:
    """``2026-11-22T10:15:30.123Z`` (microseconds truncated). Every timestamp of every answer
    passes here: datetime's own C formatter, not strftime and a second conversion."""
    return as_utc(value).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
