"""An asset's ``expiresAt`` (issue 47): how a client writes it, and the bounds it must keep."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime, timedelta
from typing import Annotated

from pydantic import BeforeValidator, Field

from coffer_kit.contract.errors import CofferError, invalid
from coffer_kit.contract.limits import ASSET_EXPIRY_MAX_DAYS
from coffer_kit.contract.timeutil import as_utc, utcnow

FIELD = "expiresAt"
# Characters an ISO 8601 instant may take (checked before parsing).
MAX_CHARS = 40

# A folder's default expiry (``expiryDays``): a whole number of days, 1 to the bound an
# ``expiresAt`` keeps; strict, so "7", 7.5 and true are 400 rather than coerced (7.0 is JSON
# Schema's integer 7, and is taken as one).
FOLDER_FIELD = "expiryDays"


def _integral(value: object) -> object:
    return int(value) if isinstance(value, float) and value.is_integer() else value


ExpiryDays = Annotated[
    int,
    BeforeValidator(_integral),
    Field(
        strict=True,
        ge=1,
        le=ASSET_EXPIRY_MAX_DAYS,
        description=(
            "Default expiry of the assets uploaded into this folder, in days after the upload's "
            f"commit (1 to {ASSET_EXPIRY_MAX_DAYS}); null = none."
        ),
    ),
]


def folder_expiry(days: int | None, *, now: datetime) -> datetime | None:
    """The ``expiresAt`` a folder's ``expiryDays`` gives an asset committed at ``now``."""
    return None if days is None else now + timedelta(days=days)


def parse_instant(value: str, *, field: str = FIELD) -> datetime:
    """An ISO 8601 instant with a time zone (``Z`` or an offset), as UTC; 400 otherwise."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_CHARS:
        raise invalid(f"{field} is an ISO 8601 time with a time zone.", field=field)
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise invalid(f"{field} is an ISO 8601 time with a time zone.", field=field) from None
    if parsed.tzinfo is None:
        raise invalid(f"{field} needs a time zone (Z or an offset).", field=field)
    try:
        return as_utc(parsed)
    except OverflowError:  # 0001-01-01T00:00+01:00: before year 1 in UTC
        raise invalid(f"{field} is outside the years 1 to 9999 in UTC.", field=field) from None


def parse_expires_at(value: str, *, now: datetime | None = None, field: str = FIELD) -> datetime:
    """A new ``expiresAt``: after now, at most ``ASSET_EXPIRY_MAX_DAYS`` ahead; 400 naming
    ``field`` otherwise."""
    when = parse_instant(value, field=field)
    now = now or utcnow()
    if when <= now:
        raise invalid(f"{field} must be in the future.", field=field)
    if when > now + timedelta(days=ASSET_EXPIRY_MAX_DAYS):
        raise invalid(f"{field} is at most {ASSET_EXPIRY_MAX_DAYS} days ahead.", field=field)
    return when


def from_tus_metadata(raw: str) -> datetime | None:
    """The ``expiresAt`` entry of a tus ``Upload-Metadata`` header edge already checked; None
    without one (or one that no longer parses: it was checked at creation)."""
    for item in raw.split(","):
        key, _, encoded = item.strip().partition(" ")
        if key != FIELD:
            continue
        try:
            return parse_instant(base64.b64decode(encoded.strip(), validate=True).decode("utf-8"))
        except (ValueError, binascii.Error, UnicodeDecodeError, CofferError):
            return None
    return None
