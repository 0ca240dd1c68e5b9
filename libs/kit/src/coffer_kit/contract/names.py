"""Folder and asset names (docs/contract.md §4): 1 to 255 characters after NFC, no control
characters, no bidirectional embeddings, overrides or isolates, no ``/``, not ``.`` or ``..``."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from coffer_kit.contract.errors import invalid
from coffer_kit.contract.limits import MAX_NAME_CHARS

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Bidirectional embeddings, overrides and isolates reorder what a person sees: a file named
# "invoice\u202efdp.exe" shows as "invoiceexe.pdf" (issue 23). The marks (U+200E, U+200F,
# U+061C) only set the direction of neutral characters and stay allowed for RTL names.
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")

# The same rules for the OpenAPI document, where clients and fuzzers read them. Only
# normalize_name enforces them (after NFC, which can change a name's length).
NAME_RULES = (
    "1–255 characters after NFC; no control characters, no bidirectional embeddings, overrides "
    "or isolates (U+202A–U+202E, U+2066–U+2069), no '/', not '.' or '..'."
)
_NAME_CHARACTER = "[^\\u0000-\\u001F\\u007F\\u202A-\\u202E\\u2066-\\u2069/]"
NAME_SCHEMA: dict[str, Any] = {
    "minLength": 1,
    "maxLength": MAX_NAME_CHARS,
    "pattern": f"^(?!\\.\\.?$){_NAME_CHARACTER}+$",
}
# An upload's name field may also be empty: that means "the file name".
UPLOAD_NAME_SCHEMA: dict[str, Any] = {
    "maxLength": MAX_NAME_CHARS,
    "pattern": f"^(?!\\.\\.?$){_NAME_CHARACTER}*$",
}


def normalize_name(value: str, *, field: str = "name") -> str:
    """NFC-normalise and validate a name, or raise 400 ``invalid_request``."""
    name = unicodedata.normalize("NFC", value)
    if not 1 <= len(name) <= MAX_NAME_CHARS:
        raise invalid(f"'{field}' must be 1 to {MAX_NAME_CHARS} characters.", field=field)
    if _CONTROL.search(name):
        raise invalid(f"'{field}' must not contain control characters.", field=field)
    if _BIDI.search(name):
        raise invalid(
            f"'{field}' must not contain bidirectional embeddings, overrides or isolates "
            "(U+202A–U+202E, U+2066–U+2069).",
            field=field,
        )
    if "/" in name:
        raise invalid(f"'{field}' must not contain '/'.", field=field)
    if name in {".", ".."}:
        raise invalid(f"'{field}' must not be '.' or '..'.", field=field)
    return name


def search_key(name: str) -> str:
    """What name search compares (CONTRACT §8): the NFC name, case-folded (all of Unicode,
    not ASCII only: ``Straße`` and ``STRASSE`` meet)."""
    return unicodedata.normalize("NFC", name).casefold()


def could_be_in_a_name(text: str) -> bool:
    """Whether ``text`` could occur in a valid name (names hold no control or bidi characters)."""
    return _CONTROL.search(text) is None and _BIDI.search(text) is None
