"""Asset names given by default (the name rules themselves are coffer_kit.contract.names)."""

from __future__ import annotations

from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.names import normalize_name

__all__ = ["default_name", "normalize_name"]


def default_name(filename: str, key: str) -> str:
    """An asset's name when the client gave none: the uploaded file name without any directory,
    or, when that is not a valid name, the file name as the key stores it (always valid)."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    try:
        return normalize_name(base)
    except CofferError:
        return key.rsplit("/", 1)[-1]
