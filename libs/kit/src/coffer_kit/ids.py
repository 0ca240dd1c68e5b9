"""Opaque, time-ordered identifiers with a type prefix (docs/contract.md §1).

Every id is a prefix, ``_``, then a ULID (26 characters of Crockford base32, upper case).
Services check an id's shape with these patterns, never with their own.
"""

from __future__ import annotations

import re

from ulid import ULID

ORG = "org"
USER = "usr"
KEY = "key"
FOLDER = "fld"
ASSET = "ast"
REQUEST = "req"

# What follows the prefix: the ULID's canonical text form.
_ULID = "[0-9A-Z]{26}"


def id_pattern(prefix: str) -> str:
    """The regular expression (anchored) of ids with ``prefix``, as pydantic's ``pattern`` takes it."""
    return f"^{prefix}_{_ULID}$"


ORG_ID_PATTERN = id_pattern(ORG)
ASSET_ID_PATTERN = id_pattern(ASSET)
FOLDER_ID_PATTERN = id_pattern(FOLDER)
_ORG_ID = re.compile(ORG_ID_PATTERN)
_ASSET_ID = re.compile(ASSET_ID_PATTERN)
_FOLDER_ID = re.compile(FOLDER_ID_PATTERN)


def new_id(prefix: str) -> str:
    """A fresh id such as ``fld_01JD…``: the prefix, then a ULID."""
    return f"{prefix}_{ULID()}"


def is_org_id(value: str) -> bool:
    return _ORG_ID.match(value) is not None


def is_asset_id(value: str) -> bool:
    return _ASSET_ID.match(value) is not None


def is_folder_id(value: str) -> bool:
    return _FOLDER_ID.match(value) is not None
