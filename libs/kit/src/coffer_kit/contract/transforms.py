"""Transform parameters (CONTRACT §10): parsing, presets and the canonical form.

The canonical form names a variant in the store and is what a signature covers, so two
spellings of one transform (parameter order, defaults left out) are one variant. edge
validates the parameters of ``GET /api/assets/:id/url`` and of organization presets with
these functions, and blob's CDN parses requests with them: one vocabulary for both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coffer_kit.contract import errors

MIN_SIDE = 1
MAX_SIDE = 4096
MIN_QUALITY = 20
MAX_QUALITY = 100
DEFAULT_QUALITY = 80
FITS = ("cover", "contain", "inside")
FORMATS = ("webp", "avif", "jpeg", "png", "auto")
FREE_PARAMS = ("w", "h", "fit", "fmt", "q")
# Organization presets (``/api/transform-presets/{name}``): at most this many per organization,
# named like this, never a built-in's name.
MAX_ORG_PRESETS = 20
PRESET_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
_PRESET_NAME = re.compile(PRESET_NAME_PATTERN)


@dataclass(frozen=True)
class Transform:
    """One requested transform; ``fmt`` None keeps the source's format (``auto`` resolves per request)."""

    w: int | None = None
    h: int | None = None
    fit: str = "cover"
    fmt: str | None = None
    q: int = DEFAULT_QUALITY

    def canonical(self) -> str:
        """``w=…&h=…&fit=…&fmt=…&q=…`` in a fixed order, every field present (``-`` when unset)."""
        return f"w={self.w or '-'}&h={self.h or '-'}&fit={self.fit}&fmt={self.fmt or '-'}&q={self.q}"

    def query(self) -> dict[str, str]:
        """The free parameters that name this transform in a URL (defaults left out)."""
        out: dict[str, str] = {}
        if self.w:
            out["w"] = str(self.w)
        if self.h:
            out["h"] = str(self.h)
        if self.fit != "cover":
            out["fit"] = self.fit
        if self.fmt:
            out["fmt"] = self.fmt
        if self.q != DEFAULT_QUALITY:
            out["q"] = str(self.q)
        return out

    def fields(self) -> dict[str, Any]:
        """The transform as JSON fields (an organization preset's body)."""
        return {"w": self.w, "h": self.h, "fit": self.fit, "fmt": self.fmt, "q": self.q}


BUILTIN_PRESETS: dict[str, Transform] = {
    "thumb": Transform(w=256, h=256, fit="cover", fmt="webp"),
    "small": Transform(w=640),
    "medium": Transform(w=1280),
    "large": Transform(w=1920),
}


def invalid_transform_both() -> errors.CofferError:
    return errors.invalid_transform("Use either preset= or free parameters, not both.", field="preset")


def _int(query: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    # (Length first: Python refuses to read an integer of more than 4,300 digits, a 500.)
    if len(raw) > 16 or not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
        raise errors.invalid_transform(f"{name} must be an integer from {low} to {high}.", field=name)
    return int(raw)


def parse_free(query: Mapping[str, str]) -> Transform:
    """The transform named by free parameters; a bad value → 400 ``invalid_transform``."""
    w = _int(query, "w", MIN_SIDE, MAX_SIDE)
    h = _int(query, "h", MIN_SIDE, MAX_SIDE)
    q = _int(query, "q", MIN_QUALITY, MAX_QUALITY)
    fit = query.get("fit", "cover")
    if fit not in FITS:
        raise errors.invalid_transform(f"fit must be one of {', '.join(FITS)}.", field="fit")
    fmt = query.get("fmt")
    if fmt is not None and fmt not in FORMATS:
        raise errors.invalid_transform(f"fmt must be one of {', '.join(FORMATS)}.", field="fmt")
    return Transform(w=w, h=h, fit=fit, fmt=fmt, q=DEFAULT_QUALITY if q is None else q)


def has_free(query: Mapping[str, str]) -> bool:
    """Whether the query carries any free transform parameter."""
    return any(name in query for name in FREE_PARAMS)


def parse(
    query: Mapping[str, str], *, signed: bool, presets: Mapping[str, Transform] | None = None
) -> Transform | None:
    """The transform a CDN request asks for, or None for the original.

    Public URLs take ``preset=`` only (free parameters → 400); signed URLs take either, never both.
    Organization presets (``presets``) are looked up after the built-in ones.
    """
    preset = query.get("preset")
    free = has_free(query)
    if preset is not None and free:
        raise invalid_transform_both()
    if preset is not None:
        found = BUILTIN_PRESETS.get(preset) or (presets or {}).get(preset)
        if found is None:
            raise errors.invalid_transform(f"Unknown preset {preset!r}.", field="preset")
        return found
    if not free:
        return None
    if not signed:
        raise errors.invalid_transform(
            "Free transform parameters need a signed URL; public URLs take preset= only.", field="w"
        )
    return parse_free(query)


def wants_transform(query: Mapping[str, str]) -> bool:
    """Whether a CDN request asks for a transform (``preset=`` or any free parameter)."""
    return "preset" in query or has_free(query)


def signed_spec(query: Mapping[str, str]) -> str:
    """What a signed URL's signature covers besides key and expiry: ``preset=NAME``, the free
    parameters' canonical form, or ``""`` for the original.

    A bad free parameter raises 400 ``invalid_transform``; the CDN turns it into 403 on a signed
    URL, since edge signed only parameters it had validated.
    """
    preset = query.get("preset")
    if preset is not None and has_free(query):
        raise invalid_transform_both()
    if preset is not None:
        return f"preset={preset}"
    if has_free(query):
        return parse_free(query).canonical()
    return ""


def check_preset_name(name: str) -> str:
    """An organization preset's name: ``PRESET_NAME_PATTERN`` and not a built-in's (400 otherwise)."""
    if not _PRESET_NAME.fullmatch(name):
        raise errors.invalid_transform(
            "A preset name is 1 to 32 characters: lower-case letters, digits, '-' and '_', "
            "starting with a letter or digit.",
            field="name",
        )
    if name in BUILTIN_PRESETS:
        raise errors.invalid_transform(f"{name!r} is a built-in preset.", field="name")
    return name


def preset_from_fields(fields: Mapping[str, Any]) -> Transform:
    """An organization preset from its JSON body (the free parameters); 400 when invalid or empty."""
    query: dict[str, str] = {}
    for name in FREE_PARAMS:
        value = fields.get(name)
        if value is None:
            continue
        if name in ("w", "h", "q"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise errors.invalid_transform(f"{name} must be an integer.", field=name)
            query[name] = str(value)
        else:
            if not isinstance(value, str):
                raise errors.invalid_transform(f"{name} must be a string.", field=name)
            query[name] = value
    transform = parse_free(query)
    if transform.w is None and transform.h is None and transform.fmt is None:
        raise errors.invalid_transform("A transform sets at least one of w, h and fmt.", field="w")
    return transform
