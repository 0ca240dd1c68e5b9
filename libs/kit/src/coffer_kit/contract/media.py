"""Media types and ranges as the ingest rules compare them (docs/api.md, "Safe ingest").

An asset has two media types: ``mimeType``, the declared one (CONTRACT §4: the part's
``Content-Type``, else guessed from the name), and ``detectedType``, what blob read in the
file's first bytes. Upload tokens' ``contentTypes`` and an organization's allowed list are
media ranges (``*``, ``image/*``, ``image/png``); with ``enforce`` they are matched against
the detected type.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Literal

from coffer_kit.contract import keys
from coffer_kit.contract.errors import CofferError

# An organization's ingest rules (auth keeps them with the organization; edge gets them with
# the principal). ``record``: the detected type is recorded only (today's behaviour);
# ``enforce``: upload tokens' contentTypes and the allowed list are matched against it.
IngestMode = Literal["record", "enforce"]
INGEST_MODES: tuple[IngestMode, ...] = ("record", "enforce")
# Malware scanning (clamd): ``off``; ``async``: served while pending; ``block``: not served
# nor signable until clean.
ScanMode = Literal["off", "async", "block"]
SCAN_MODES: tuple[ScanMode, ...] = ("off", "async", "block")

# An organization's allowed list: at most this many ranges, each at most this long.
MAX_ALLOWED_TYPES = 32
MAX_MEDIA_RANGE_CHARS = 127
# type/subtype (RFC 6838 restricted names), or type/*, or */*, or *.
_RANGE = re.compile(r"^(\*|\*/\*|[a-z0-9][a-z0-9!#$&^_.+-]{0,62}/(\*|[a-z0-9][a-z0-9!#$&^_.+-]{0,62}))$")


def essence(media_type: str) -> str:
    """``type/subtype`` in lower case, without parameters."""
    return media_type.split(";", 1)[0].strip().lower()


def is_active(*media_types: str | None) -> bool:
    """Whether any of the types (declared, detected) is content a browser would run
    (``keys.is_active_content``: HTML, SVG, every XML type, ``+xml`` ones such as Atom, RSS and
    MathML included, XSL, JavaScript): served with CSP sandbox (every CDN answer is: issue 23),
    and never allowed through an enforce list by a wildcard it did not name."""
    return any(t is not None and keys.is_active_content(essence(t)) for t in media_types)


def matches(media_type: str, ranges: tuple[str, ...] | list[str]) -> bool:
    """Whether ``media_type`` matches one of the media ranges (``*``, ``image/*``, ``text/plain``).

    Active content matches only a range that names it: ``image/*`` does not let an SVG in."""
    value = essence(media_type)
    active = is_active(value)
    return any(
        fnmatch.fnmatchcase(value, pattern.lower()) and not (active and "*" in pattern) for pattern in ranges
    )


def admits(ranges: tuple[str, ...] | list[str], detected: str, declared: str | None = None) -> bool:
    """Whether an upload may be stored under ``enforce``: its detected type matches the ranges,
    and a declared type that is active content (served as declared: CONTRACT §6) is named by
    one of them too (``image/*`` does not let in HTML declared ``text/html`` behind a GIF's
    first bytes)."""
    if not matches(detected, ranges):
        return False
    return declared is None or not is_active(declared) or matches(declared, ranges)


def valid_range(value: str) -> bool:
    return len(value) <= MAX_MEDIA_RANGE_CHARS and _RANGE.fullmatch(value.lower()) is not None


def type_mismatch(declared: str, detected: str, allowed: tuple[str, ...] | list[str]) -> CofferError:
    """415 ``unsupported_media_type`` for a file whose detected type is outside ``allowed``,
    with both types in ``details``."""
    return CofferError(
        415,
        "unsupported_media_type",
        f"This upload accepts {', '.join(allowed)}; the file's bytes are {detected} (declared {declared}).",
        details={"declared": declared, "detected": detected},
    )
