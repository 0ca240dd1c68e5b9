"""Blob's signing secret: required and at least 32 characters outside local mode (issue 23:
an empty COFFER_SIGNING_SECRET started a production blob)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from coffer_blob.config import Settings


@pytest.mark.parametrize("value", ["", "x" * 31, None])
def test_production_refuses_an_empty_missing_or_short_signing_secret(
    tmp_path: Path, value: str | None
) -> None:
    signing = None if value is None else SecretStr(value)
    with pytest.raises(ValidationError, match="COFFER_SIGNING_SECRET must be"):
        Settings(
            mode="production",
            data_dir=tmp_path,
            internal_token=SecretStr(secrets.token_urlsafe(32)),
            signing_secret=signing,
        )


def test_a_scan_may_take_no_longer_than_edge_waits_for_it(tmp_path: Path) -> None:
    """edge waits 150 s for a scan's answer; a blob allowed 3,600 s went on scanning after
    edge had given up, and its late clean released a file still pending under block."""
    assert Settings(data_dir=tmp_path, blob_scan_timeout_seconds=120).blob_scan_timeout_seconds == 120
    with pytest.raises(ValidationError, match="blob_scan_timeout_seconds"):
        Settings(data_dir=tmp_path, blob_scan_timeout_seconds=121)
