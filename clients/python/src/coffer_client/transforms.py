"""Image transforms (CONTRACT §10): a resized, re-encoded copy of an image asset served by the CDN.

``Transform(w=800, fmt="webp")`` names free parameters, which only a signed URL may carry (the
signature covers them); ``Transform(preset="thumb")`` names a preset, which public URLs take too.
Both clients accept it (``signed_url(..., transform=...)``, ``public_url(..., preset=...)``).
Plain data with no HTTP stack, so the command line can check what was typed before it loads one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args
from urllib.parse import quote, urlencode, urlsplit

__all__ = ["BUILTIN_PRESETS", "FITS", "FORMATS", "Fit", "Format", "Transform"]

Fit = Literal["cover", "contain", "inside"]
Format = Literal["webp", "avif", "jpeg", "png", "auto"]
FITS: tuple[str, ...] = get_args(Fit)
FORMATS: tuple[str, ...] = get_args(Format)
#: Built into every Coffer (thumb: 256x256 cover webp; the others: that many pixels wide).
#: Organizations may add their own names, so any name is sent as it is.
BUILTIN_PRESETS = ("thumb", "small", "medium", "large")

# The contract's bounds (CONTRACT §10), checked here so a typo fails before any request.
MAX_SIDE = 4096
MIN_QUALITY, MAX_QUALITY = 20, 100
MAX_PRESET_NAME = 64


@dataclass(frozen=True)
class Transform:
    """What to serve instead of the original: free parameters, or one ``preset`` (never both).

    ``w``/``h``: pixels, 1-4096 (never enlarged past the source); ``fit``: ``cover`` (the
    service's default), ``contain`` or ``inside``; ``fmt``: ``webp``, ``avif``, ``jpeg``, ``png``
    or ``auto`` (the best the downloading client accepts); ``q``: quality 20-100 (default 80).
    Out-of-range values raise ValueError here; the service checks them again (400
    ``invalid_transform``).
    """

    w: int | None = None
    h: int | None = None
    fit: Fit | None = None
    fmt: Format | None = None
    q: int | None = None
    preset: str | None = None

    def __post_init__(self) -> None:
        for name, value, low, high in (
            ("w", self.w, 1, MAX_SIDE),
            ("h", self.h, 1, MAX_SIDE),
            ("q", self.q, MIN_QUALITY, MAX_QUALITY),
        ):
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be a whole number from {low} to {high}, not {value!r}.")
        if self.fit is not None and self.fit not in FITS:
            raise ValueError(f"fit must be one of {', '.join(FITS)}, not {self.fit!r}.")
        if self.fmt is not None and self.fmt not in FORMATS:
            raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, not {self.fmt!r}.")
        if self.preset is not None:
            if self.is_free:
                raise ValueError("Give either a preset or free parameters (w, h, fit, fmt, q), not both.")
            if not 1 <= len(self.preset) <= MAX_PRESET_NAME or not self.preset.isprintable():
                raise ValueError(f"preset must be a name of 1 to {MAX_PRESET_NAME} printable characters.")
        elif not self.is_free:
            raise ValueError("An empty transform: give a preset, or at least one of w, h, fit, fmt, q.")

    @property
    def is_free(self) -> bool:
        """Whether it carries free parameters, which only a signed URL may."""
        return any(v is not None for v in (self.w, self.h, self.fit, self.fmt, self.q))

    def params(self) -> dict[str, str]:
        """The query parameters, as the API's ``/url`` and the CDN take them."""
        if self.preset is not None:
            return {"preset": self.preset}
        pairs = {"w": self.w, "h": self.h, "fit": self.fit, "fmt": self.fmt, "q": self.q}
        return {k: str(v) for k, v in pairs.items() if v is not None}

    def fields(self) -> dict[str, int | str]:
        """The free parameters as an organization preset's JSON body (``put_transform_preset``)."""
        if not self.is_free:
            raise ValueError("A preset is made of free parameters (w, h, fit, fmt, q), not another preset.")
        pairs = {"w": self.w, "h": self.h, "fit": self.fit, "fmt": self.fmt, "q": self.q}
        return {k: v for k, v in pairs.items() if v is not None}

    def on(self, url: str) -> str:
        """``url`` with this transform's parameters added (for a public URL: presets only)."""
        joiner = "&" if urlsplit(url).query else "?"
        return url + joiner + urlencode(self.params())


def preset_path(name: str) -> str:
    """The API path of one transform preset."""
    return "/api/transform-presets/" + quote(name, safe="")
