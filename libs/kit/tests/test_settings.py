"""Secrets in settings: generated in local mode; outside it, required and never empty or short
(issue 23: an empty COFFER_INTERNAL_TOKEN started a production service). Blob's signing
secret: services/blob/tests/test_settings.py."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from coffer_kit.settings import BaseServiceSettings


@pytest.mark.parametrize("value", ["", "x" * 31, None])
def test_production_refuses_an_empty_missing_or_short_internal_token(
    tmp_path: Path, value: str | None
) -> None:
    token = None if value is None else SecretStr(value)
    with pytest.raises(ValidationError, match="COFFER_INTERNAL_TOKEN must be"):
        BaseServiceSettings(mode="production", data_dir=tmp_path, internal_token=token)


def test_local_mode_generates_what_is_empty_and_keeps_it(tmp_path: Path) -> None:
    first = BaseServiceSettings(data_dir=tmp_path, internal_token=SecretStr(""))
    again = BaseServiceSettings(data_dir=tmp_path)
    assert len(first.internal_secret()) >= 32 and first.internal_secret() == again.internal_secret()
    good = secrets.token_urlsafe(32)
    assert BaseServiceSettings(mode="production", internal_token=SecretStr(good)).internal_secret() == good
