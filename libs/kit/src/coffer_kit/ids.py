"""Opaque, time-ordered identifiers with a type prefix (CONTRACT §1)."""

from ulid import ULID


def new_id(prefix: str) -> str:
    """A fresh id such as ``fld_01JD…``: the prefix, then a ULID."""
    return f"{prefix}_{ULID()}"
