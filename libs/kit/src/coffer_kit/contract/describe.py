"""An asset's own description (issue 50): custom ``metadata`` and ``tags``, their bounds, how an
upload sends them and how a PATCH changes them. Defined once here; metadata enforces them on
every write, edge checks a resumable upload's at creation with the same functions.

Every refusal is 400 ``invalid_request`` naming the field (``metadata``, ``metadata.KEY``,
``tags``, ``tags[N]``), as docs/api.md says.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from coffer_kit.contract.errors import CofferError, invalid

MAX_KEYS = 32
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 256
MAX_METADATA_BYTES = 2048
MAX_TAGS = 32
MAX_TAG_CHARS = 64
# GET /api/assets: at most this many ``tag`` and this many ``meta.KEY`` parameters.
MAX_TAG_FILTERS = 10
MAX_META_FILTERS = 10

KEY_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
TAG_PATTERN = r"^[A-Za-z0-9_.:/-]{1,64}$"
_KEY = re.compile(KEY_PATTERN)
_TAG = re.compile(TAG_PATTERN)
# What no metadata string holds: a C0 control character but tab, line feed and carriage return
# (PostgreSQL's jsonb cannot store U+0000), or a lone surrogate (no UTF-8 writes one).
_UNSTORABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")
UNSTORABLE_TEXT = "holds no control character but tab, line feed and carriage return"

Metadata = dict[str, str | int | float | bool]

# The OpenAPI schemas of the two fields.
METADATA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": MAX_KEYS,
    "propertyNames": {"pattern": KEY_PATTERN},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "maxLength": MAX_VALUE_CHARS},
            {"type": "number", "exclusiveMinimum": -(2**63), "exclusiveMaximum": 2**63},
            {"type": "boolean"},
        ]
    },
    "description": f"The application's own: at most {MAX_KEYS} keys of 1–{MAX_KEY_CHARS} characters "
    f"(`A–Z a–z 0–9 _ - . :`), values a string (≤ {MAX_VALUE_CHARS} characters), a number (an "
    "integer within 64 bits; a fraction below 2^63 in size and at most "
    "40 characters written out without an exponent) or a boolean; at most "
    f"{MAX_METADATA_BYTES} bytes as compact JSON.",
}
TAGS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "maxItems": MAX_TAGS,
    "uniqueItems": True,
    "items": {"type": "string", "pattern": TAG_PATTERN},
    "description": f"At most {MAX_TAGS} distinct tags of 1–{MAX_TAG_CHARS} characters "
    "(`A–Z a–z 0–9 _ - . : /`), case-sensitive, in code-point order.",
}


# The media types whose image facts (CONTRACT §10's transform sources) are computed after an
# upload: metadata queues them with the asset, edge wakes its facts relay for them, and no other
# upload costs the relay a claim. blob's header check decides in the end, and answers none for
# anything it cannot read.
FACT_SOURCES = frozenset(
    {"image/jpeg", "image/png", "image/webp", "image/avif", "image/gif", "image/tiff", "image/heic"}
)


def facts_due(*media_types: str | None) -> bool:
    """Whether a new asset of these media types (declared, detected) has its facts queued."""
    return any(t in FACT_SOURCES for t in media_types if t)


def check_key(key: object) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise invalid(
            f"A metadata key is 1-{MAX_KEY_CHARS} characters of letters, digits, '_', '-', '.', ':'.",
            field=f"metadata.{_printable(str(key)[:MAX_KEY_CHARS])}",
        )
    return key


def _printable(text: str) -> str:
    """``text`` with each lone surrogate as ``?``: an answer is UTF-8."""
    return text.encode("utf-8", "replace").decode()


def check_value(key: str, value: object) -> str | int | float | bool:
    """A metadata value: a string (bounded), a finite number or a boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _fits(value):
            raise invalid("A metadata number must fit in 64 bits.", field=f"metadata.{key}")
        return value
    if isinstance(value, float):
        if not _fits(value):
            raise invalid(
                "A metadata number must be finite, below 2^63 in size, and at most "
                f"{MAX_PLAIN_NUMBER_CHARS} characters written out without an exponent.",
                field=f"metadata.{key}",
            )
        return _as_stored(value)
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:
            raise invalid(
                f"A metadata string is at most {MAX_VALUE_CHARS} characters.", field=f"metadata.{key}"
            )
        if _UNSTORABLE.search(value):
            raise invalid(f"A metadata string {UNSTORABLE_TEXT}.", field=f"metadata.{key}")
        return value
    raise invalid("A metadata value is a string, a number or a boolean.", field=f"metadata.{key}")


# PostgreSQL keeps a JSON number as ``numeric`` and writes it back without an exponent: 1e20 came
# back as a 21-digit integer (past 64 bits, so the asset's next metadata PATCH was refused over
# a key it did not send), and 1e300 as 301 digits (past the byte bound). A fractional number is
# therefore bounded as PostgreSQL writes it, and by 2^63 as an integer is, on both databases.
MAX_PLAIN_NUMBER_CHARS = 40
# From this size Python writes a whole float with an exponent (1e+16), which PostgreSQL keeps as
# the integer it is and gives back so: such a float is stored as that integer on both databases,
# so that the bound counts its digits and the same PATCH again is no change.
_EXPONENT_FROM = 1e16


def _as_stored(number: float) -> int | float:
    """A float as both databases keep it: a whole one from _EXPONENT_FROM as its integer
    (PostgreSQL writes it back so), -0.0 as 0.0."""
    if number.is_integer() and abs(number) >= _EXPONENT_FROM:
        return int(number)
    return number + 0.0


def _fits(number: int | float) -> bool:
    """Whether a metadata value may be this number: an integer within 64 bits, or a finite one
    below 2^63 that PostgreSQL writes out in at most ``MAX_PLAIN_NUMBER_CHARS`` characters."""
    if isinstance(number, int):
        return abs(number) < 2**63
    if not math.isfinite(number) or abs(number) >= 2**63:
        return False
    return len(format(decimal.Decimal(repr(number)), "f")) <= MAX_PLAIN_NUMBER_CHARS


def check_metadata(value: object) -> Metadata:
    """The whole object, bounded; 400 naming what is wrong."""
    if not isinstance(value, Mapping):
        raise invalid("'metadata' must be a JSON object.", field="metadata")
    if len(value) > MAX_KEYS:
        raise invalid(f"'metadata' has more than {MAX_KEYS} keys.", field="metadata")
    checked: Metadata = {check_key(k): check_value(k, v) for k, v in value.items()}
    if len(encode_metadata(checked).encode()) > MAX_METADATA_BYTES:
        raise invalid(f"'metadata' is more than {MAX_METADATA_BYTES} bytes as JSON.", field="metadata")
    return checked


def encode_metadata(metadata: Mapping[str, Any]) -> str:
    """Compact JSON, keys in order: what the bound counts."""
    return json.dumps(metadata, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def check_tag(tag: object, index: int) -> str:
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        raise invalid(
            f"A tag is 1-{MAX_TAG_CHARS} characters of letters, digits, '_', '-', '.', ':', '/'.",
            field=f"tags[{index}]",
        )
    return tag


def check_tags(value: object) -> list[str]:
    """Distinct tags in code-point order, bounded."""
    if not isinstance(value, list | tuple):
        raise invalid("'tags' must be a list of strings.", field="tags")
    tags = sorted({check_tag(t, i) for i, t in enumerate(value)})
    if len(tags) > MAX_TAGS:
        raise invalid(f"An asset has at most {MAX_TAGS} tags.", field="tags")
    return tags


def _json(text: str, field: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise invalid(f"'{field}' is not valid JSON.", field=field) from None


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def parse_metadata_field(text: str | None) -> Metadata | None:
    """An upload's ``metadata`` field (a form field, a tus entry): None when absent or empty."""
    if text is None or not text.strip():
        return None
    if len(text.encode()) > 8 * MAX_METADATA_BYTES:  # before parsing: bound the work
        raise invalid(f"'metadata' is more than {MAX_METADATA_BYTES} bytes as JSON.", field="metadata")
    return check_metadata(_json(text, "metadata"))


def parse_tags_field(text: str | None) -> list[str] | None:
    """An upload's ``tags`` field, comma-separated: None when absent or empty."""
    if text is None or not text.strip():
        return None
    parts = text.split(",")
    if len(parts) > 4 * MAX_TAGS:
        raise invalid(f"An asset has at most {MAX_TAGS} tags.", field="tags")
    return check_tags([p.strip() for p in parts if p.strip()])


def tus_description(upload_metadata: str) -> tuple[Metadata | None, list[str] | None]:
    """A resumable upload's ``metadata`` and ``tags`` entries of ``Upload-Metadata`` (edge has
    checked the header's form at creation); 400 naming the field for a bad one."""
    pairs: dict[str, str] = {}
    for item in upload_metadata.split(","):
        key, _, encoded = item.strip().partition(" ")
        if key in ("metadata", "tags"):
            try:
                pairs[key] = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
            except (ValueError, binascii.Error, UnicodeDecodeError):
                raise invalid(f"Upload-Metadata's {key!r} is not base64 of UTF-8 text.", field=key) from None
    return parse_metadata_field(pairs.get("metadata")), parse_tags_field(pairs.get("tags"))


def merge_metadata(current: Mapping[str, Any], patch: object) -> Metadata:
    """A PATCH's ``metadata`` merged into ``current``: keys set, a ``null`` deletes; bounded."""
    if not isinstance(patch, Mapping):
        raise invalid("'metadata' must be a JSON object.", field="metadata")
    if len(patch) > 2 * MAX_KEYS:
        raise invalid(f"'metadata' has more than {MAX_KEYS} keys.", field="metadata")
    merged = dict(current)
    for key, value in patch.items():
        check_key(key)
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = check_value(key, value)
    return check_metadata(merged)


def apply_tags(current: Iterable[str], patch: object) -> list[str]:
    """A PATCH's ``tags`` (``{"add": [...], "remove": [...]}``) applied to ``current``; bounded."""
    if not isinstance(patch, Mapping) or set(patch) - {"add", "remove"}:
        raise invalid('\'tags\' is {"add": [...], "remove": [...]}.', field="tags")
    add, remove = (patch.get(name) for name in ("add", "remove"))
    add, remove = [] if add is None else add, [] if remove is None else remove
    for name, given in (("add", add), ("remove", remove)):
        if not isinstance(given, list) or len(given) > MAX_TAGS:
            raise invalid(f"'tags.{name}' is a list of at most {MAX_TAGS} tags.", field=f"tags.{name}")
    adding = {check_tag(t, i) for i, t in enumerate(add)}
    removing = {check_tag(t, i) for i, t in enumerate(remove)}
    if both := adding & removing:
        raise invalid(f"Tag {sorted(both)[0]!r} is both added and removed.", field="tags")
    return check_tags(sorted((set(current) - removing) | adding))


def _document(stored: object) -> Any:
    """A stored JSON column: as the driver gave it, or parsed where it gave text."""
    return json.loads(stored) if isinstance(stored, str) else stored


def metadata_of(stored: object) -> Metadata:
    """A stored ``metadata`` column (a dict, or JSON text where the driver gave text)."""
    found: Metadata = dict(_document(stored) or {})
    return found


def tags_of(stored: object) -> list[str]:
    found: list[str] = list(_document(stored) or [])
    return found


def image_of(stored: object) -> dict[str, int] | None:
    found: dict[str, int] | None = None if stored is None else dict(_document(stored))
    return found


def meta_filter_value(key: str, value: str) -> list[Any]:
    """The JSON values ``meta.KEY=value`` matches: the string, and the number or boolean it
    writes, if it writes one as JSON would and a metadata value may be that number (NaN and
    2^63 match as strings). A value no metadata string may be is 400."""
    check_key(key)
    if len(value) > MAX_VALUE_CHARS:
        raise invalid(f"A metadata value is at most {MAX_VALUE_CHARS} characters.", field=f"meta.{key}")
    if _UNSTORABLE.search(value):
        raise invalid(f"A metadata value {UNSTORABLE_TEXT}.", field=f"meta.{key}")
    matches: list[Any] = [value]
    if value in ("true", "false"):
        matches.append(value == "true")
    else:
        try:
            number = json.loads(value)
        except ValueError:
            number = None
        if (
            isinstance(number, int | float)
            and not isinstance(number, bool)
            and _fits(number)
            and json.dumps(number) == value
        ):
            matches.append(_as_stored(number) if isinstance(number, float) else number)
    return matches


__all__ = [
    "METADATA_SCHEMA",
    "TAGS_SCHEMA",
    "CofferError",
    "apply_tags",
    "check_metadata",
    "check_tags",
    "merge_metadata",
    "parse_metadata_field",
    "parse_tags_field",
]
