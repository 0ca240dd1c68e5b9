"""Folder and asset names (CONTRACT §4)."""

from __future__ import annotations

import re
import unicodedata

from coffer_kit.errors import CofferError, invalid

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


def default_name(filename: str, key: str) -> str:
    """An asset's name when the client gave none: the uploaded file name without any directory,
    or, when that is not a valid name, the file name as the key stores it (always valid)."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    try:
        return normalize_name(base)
    except CofferError:
        return key.rsplit("/", 1)[-1]
