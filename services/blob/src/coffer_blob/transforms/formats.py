"""Formats of image transforms, without libvips: the CDN process uses these; only workers load libvips."""

from __future__ import annotations

import contextlib

from coffer_kit.contract.transforms import Transform

MEDIA_TYPES = {"webp": "image/webp", "avif": "image/avif", "jpeg": "image/jpeg", "png": "image/png"}
EXTENSIONS = {"webp": ".webp", "avif": ".avif", "jpeg": ".jpg", "png": ".png"}
# Best first: what ``fmt=auto`` picks from a request's Accept header.
AUTO_ORDER = ("avif", "webp")


def sniff_format(head: bytes) -> str | None:
    """The source format from the first bytes of a file, or None if it is not an accepted image.

    Only magic numbers decide: a declared media type or a file name never does, and SVG or
    anything else textual is refused before any libvips loader sees it.
    """
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[4:8] == b"ftyp" and head[8:12] in (b"avif", b"avis"):
        return "avif"
    return None


def auto_format(accept: str) -> str | None:
    """What ``fmt=auto`` serves for an ``Accept`` header: the first of AUTO_ORDER it names with
    a quality above 0 (RFC 9110 §12.4.2: ``q=0`` is "not acceptable"), else None. A range
    (``image/*``, ``*/*``) names none: browsers send one whatever they decode."""
    acceptable: set[str] = set()
    for item in accept.lower().split(","):
        media, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                with contextlib.suppress(ValueError):  # a malformed weight: as if none were given
                    quality = float(value)
        if quality > 0:
            acceptable.add(media)
    return next((fmt for fmt in AUTO_ORDER if MEDIA_TYPES[fmt] in acceptable), None)


def resolve_format(transform: Transform, source: str, accept: str) -> str:
    """The output format: the asked one, the best ``Accept`` allows for ``auto``, else the source's own."""
    if transform.fmt == "auto":
        return auto_format(accept) or ("jpeg" if source in ("jpeg", "tiff") else "png")
    if transform.fmt is not None:
        return transform.fmt
    if source in MEDIA_TYPES:
        return source
    return "png"  # GIF and TIFF sources keep lossless pixels
