"""Image placeholders for the file grid (issue 50): an asset's BlurHash decoded into a tiny PNG,
shown as a ``data:`` image behind its thumbnail until the thumbnail loads.

The dashboard's CSP has no inline styles (``style-src 'self'``), so a per-asset CSS background
is not possible; its ``img-src`` does allow ``data:``, so the placeholder is an ``<img>`` of its
own under the thumbnail. The decoding is the ``blurhash`` library's (the one blob encodes with);
the PNG around its pixels is written here (a few lines: the library answers pixels, not files).
"""

from __future__ import annotations

import base64
import struct
import zlib
from functools import lru_cache

from coffer_kit.contract.resources import Asset

# Pixels on the placeholder's longer side: a BlurHash of 4x3 components holds no more detail,
# and the browser's scaling of 8 pixels to a 256-pixel tile is the blur.
SIDE = 8
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png(rows: list[list[list[int]]]) -> bytes:
    """An 8-bit RGB PNG of ``rows`` (top to bottom, each a list of ``[r, g, b]``)."""
    height, width = len(rows), len(rows[0])
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    raw = b"".join(b"\x00" + bytes(channel for pixel in row for channel in pixel) for row in rows)
    return (
        _PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, 9))
        + _chunk(b"IEND", b"")
    )


def shape(width: int | None, height: int | None) -> tuple[int, int]:
    """The placeholder's size in pixels: the image's proportions, ``SIDE`` on the longer side
    (4:3 when the image's size is unknown)."""
    if not width or not height or width < 0 or height < 0:
        return SIDE, SIDE * 3 // 4
    if width >= height:
        return SIDE, max(1, round(SIDE * height / width))
    return max(1, round(SIDE * width / height)), SIDE


@lru_cache(maxsize=2048)
def data_url(blurhash_text: str, width: int, height: int) -> str | None:
    """The BlurHash as a ``data:image/png`` URL of ``width`` x ``height`` pixels; None for a
    string that is not a BlurHash. Cached: a page of 50 tiles decodes each hash once a process."""
    import blurhash  # on the first grid page only, like Jinja2 (render.Renderer.templates)

    try:
        rows = blurhash.decode(blurhash_text, width, height)
    except (ValueError, KeyError, IndexError):  # what it raises for a malformed hash
        return None
    return "data:image/png;base64," + base64.b64encode(png(rows)).decode("ascii")


def placeholder_url(asset: Asset) -> str | None:
    """The asset's placeholder image, or None (no BlurHash: not an image, or not computed yet)."""
    if not asset.placeholder:
        return None
    size = asset.image
    width, height = shape(size.width if size else None, size.height if size else None)
    return data_url(asset.placeholder, width, height)
