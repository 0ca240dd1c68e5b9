"""Timestamps as the contract writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from coffer_kit.contract.timeutil import isoformat


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime(2026, 11, 22, 10, 15, 30, 123456), "2026-11-22T10:15:30.123Z"),  # naive: UTC (SQLite)
        (datetime(2026, 1, 2, 3, 4, 5, 999999, tzinfo=UTC), "2026-01-02T03:04:05.999Z"),  # truncated
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=5))), "2026-01-01T22:04:05.000Z"),
        (datetime(2026, 1, 1, 0, 0, 0, 999), "2026-01-01T00:00:00.000Z"),
    ],
)
def test_isoformat(value: datetime, text: str) -> None:
    assert isoformat(value) == text
