"""Folder and asset names (CONTRACT §4)."""

from __future__ import annotations

import re
import unicodedata

from coffer_kit.errors import invalid

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_NAME = 255


def normalize_name(value: str, *, field: str = "name") -> str:
    """NFC-normalise and validate a name, or raise 400 ``invalid_request``."""
    name = unicodedata.normalize("NFC", value)
    if not 1 <= len(name) <= MAX_NAME:
        raise invalid(f"'{field}' must be 1 to {MAX_NAME} characters.", field=field)
    if _CONTROL.search(name):
        raise invalid(f"'{field}' must not contain control characters.", field=field)
    if "/" in name:
        raise invalid(f"'{field}' must not contain '/'.", field=field)
    if name in {".", ".."}:
        raise invalid(f"'{field}' must not be '.' or '..'.", field=field)
    return name
