"""Opaque, time-ordered identifiers with a type prefix (docs/contract.md §1).

Every id is a prefix, ``_``, then a ULID (26 characters of Crockford base32, upper case).
Services check an id's shape with these patterns, never with their own.
"""

from __future__ import annotations

import os
import re
import threading
import time

ORG = "org"
USER = "usr"
KEY = "key"
FOLDER = "fld"
ASSET = "ast"
REQUEST = "req"
UPLOAD_TOKEN = "upt"
EVENT = "evt"
# A resumable upload (tus, CONTRACT §9).
TUS_UPLOAD = "tus"
# Webhooks (CONTRACT §11): an endpoint, a delivery (one event to one endpoint), an attempt.
WEBHOOK = "whk"
WEBHOOK_DELIVERY = "whd"
WEBHOOK_ATTEMPT = "wha"

# What follows the prefix: the ULID's canonical text form.
_ULID = "[0-9A-Z]{26}"


def id_pattern(prefix: str) -> str:
    """The regular expression (anchored) of ids with ``prefix``, as pydantic's ``pattern`` takes it."""
    return f"^{prefix}_{_ULID}$"


ORG_ID_PATTERN = id_pattern(ORG)
ASSET_ID_PATTERN = id_pattern(ASSET)
FOLDER_ID_PATTERN = id_pattern(FOLDER)
UPLOAD_TOKEN_ID_PATTERN = id_pattern(UPLOAD_TOKEN)
TUS_UPLOAD_ID_PATTERN = id_pattern(TUS_UPLOAD)
_ORG_ID = re.compile(ORG_ID_PATTERN)
_ASSET_ID = re.compile(ASSET_ID_PATTERN)
_FOLDER_ID = re.compile(FOLDER_ID_PATTERN)


# Every pair of Crockford base32 digits, by the 10 bits they write.
_DIGITS = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [high + low for high in _DIGITS for low in _DIGITS]
_SHIFTS = range(120, -10, -10)


def new_id(prefix: str) -> str:
    """A fresh id such as ``fld_01JD…``: the prefix, then a ULID (48 bits of milliseconds
    since the epoch, 80 random bits from the OS).

    A ULID's text is its 128 bits, big-endian, as 26 base32 digits after two zero bits:
    written here ten bits at a time, since every request mints one (a request id), and
    python-ulid's encoder takes longer (bench/results/journal.md, "Issue 16, round 6: the
    per-request cost, three hot paths").

    Monotonic within a process (the ULID spec's monotonic mode): an id minted in the same
    millisecond as the last one is that one plus 1, so two rows written in one transaction
    (an asset's ``asset.expired`` and ``asset.deleted`` events) sort in the order they were made.
    """
    global _last
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    with _lock:
        if value >> 80 <= _last >> 80:
            value = _last + 1
        _last = value
    return prefix + "_" + "".join([_PAIRS[(value >> shift) & 0x3FF] for shift in _SHIFTS])


_lock = threading.Lock()
_last = -1  # the last id's value; none yet


def is_org_id(value: str) -> bool:
    return _ORG_ID.fullmatch(value) is not None  # not match: "$" also matches before a final "\n"


def is_asset_id(value: str) -> bool:
    return _ASSET_ID.fullmatch(value) is not None


def is_folder_id(value: str) -> bool:
    return _FOLDER_ID.fullmatch(value) is not None
