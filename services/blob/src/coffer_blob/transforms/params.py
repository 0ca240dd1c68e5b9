"""Transform parameters (CONTRACT §10): parsing, presets and the canonical form.

The canonical form names a variant in the store and is what a signature covers, so two
spellings of one transform (parameter order, defaults left out) are one variant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coffer_kit import errors

MIN_SIDE = 1
MAX_SIDE = 4096
MIN_QUALITY = 20
MAX_QUALITY = 100
DEFAULT_QUALITY = 80
FITS = ("cover", "contain", "inside")
FORMATS = ("webp", "avif", "jpeg", "png", "auto")
FREE_PARAMS = ("w", "h", "fit", "fmt", "q")


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


BUILTIN_PRESETS: dict[str, Transform] = {
    "thumb": Transform(w=256, h=256, fit="cover", fmt="webp"),
    "small": Transform(w=640),
    "medium": Transform(w=1280),
    "large": Transform(w=1920),
}


def _int(query: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = query.get(name)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
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
        raise errors.invalid_transform("Use either preset= or free parameters, not both.", field="preset")
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
