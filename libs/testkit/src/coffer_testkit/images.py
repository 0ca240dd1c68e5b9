"""Hostile images for the transform tests (issue 44): each small on disk and quick to make,
each costly (or impossible) to decode naively.

libvips makes what it can write; the rest (a GIF of many frames libvips would merge, a PNG
header no encoder writes) is written by hand.
"""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Any

MIB = 1024 * 1024


def _pyvips() -> Any:
    import pyvips  # the blob service's dependency: only tests that make images need it

    return pyvips


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` × ``height`` (8-bit RGB) over a few bytes of data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(b"\0" * 16))
        + _png_chunk(b"IEND", b"")
    )


def interlaced_png_16bit(side: int = 7000) -> bytes:
    """An Adam7-interlaced 16-bit RGBA PNG of zeros (7000²: 372 KiB, 374 MiB decoded)."""
    image = _pyvips().Image.black(side, side, bands=4).cast("ushort").copy(interpretation="rgb16")
    return bytes(image.pngsave_buffer(interlace=True, compression=9))


def progressive_jpeg(width: int = 8660, height: int = 5773) -> bytes:
    """A progressive JPEG of black (8660×5773, just under 50 MP: 290 KiB; its DCT coefficients 286 MiB)."""
    image = _pyvips().Image.black(width, height, bands=3)
    return bytes(image.jpegsave_buffer(interlace=True, Q=50))


def gif_of_frames(frames: int = 1000, side: int = 16) -> bytes:
    """An animated GIF of ``frames`` 1×1 frames on a ``side``² canvas (23 bytes a frame)."""
    screen = struct.pack("<HHBBB", side, side, 0x80, 0, 0)  # a global table of 2 colours
    table = b"\x00\x00\x00\xff\xff\xff"
    loop = b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    control = b"\x21\xf9\x04\x00\x0a\x00\x00\x00"  # 0.1 s a frame
    descriptor = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0)
    pixel = b"\x02\x02\x44\x01\x00"  # LZW, minimum code size 2: clear, index 0, end
    return b"GIF89a" + screen + table + loop + (control + descriptor + pixel) * frames + b"\x3b"


def _strip_of_frames(frames: int, side: int) -> Any:
    """``frames`` distinct ``side``² frames stacked as one image with its page height set."""
    pyvips = _pyvips()
    where = pyvips.Image.xyz(side, side * frames)
    index = (where[1] / side).floor()
    bands = (index % 256).bandjoin([(index / 256).floor() * 60, where[0] * 16])
    strip = bands.cast("uchar").copy(interpretation="srgb")
    strip.set_type(pyvips.GValue.gint_type, "page-height", side)
    return strip


def webp_of_frames(frames: int = 1000, side: int = 16) -> bytes:
    """An animated WebP of ``frames`` distinct frames (1000 of 16²: 74 KiB)."""
    return bytes(_strip_of_frames(frames, side).webpsave_buffer(effort=0, lossless=True))


def tiff_of_pages(pages: int = 1000, side: int = 16) -> bytes:
    """A multi-page TIFF of ``pages`` pages (1000 of 16²: 272 KiB)."""
    return bytes(_strip_of_frames(pages, side).tiffsave_buffer(compression="deflate", page_height=side))


SVG = (
    b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="100000" height="100000">'
    b'<rect width="100%" height="100%"/></svg>\n'
)
PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n"
    b"3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 14400 14400]>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)


@functools.cache
def hostile_corpus() -> dict[str, tuple[str, str, bytes]]:
    """Each hostile image by name: (file name, declared media type, bytes); made once (4 s)."""
    return {
        "interlaced 16-bit PNG": ("zeros.png", "image/png", interlaced_png_16bit()),
        "progressive 50 MP JPEG": ("dark.jpg", "image/jpeg", progressive_jpeg()),
        "GIF of 1000 frames": ("frames.gif", "image/gif", gif_of_frames()),
        "WebP of 1000 frames": ("frames.webp", "image/webp", webp_of_frames()),
        "TIFF of 1000 pages": ("pages.tiff", "image/tiff", tiff_of_pages()),
        "PNG of width 2^31": ("wide.png", "image/png", png_header_only(2**31, 1)),
        "SVG as a PNG": ("drawing.png", "image/png", SVG),
        "PDF as a JPEG": ("document.jpg", "image/jpeg", PDF),
    }
