"""Render one variant: header check, shrink-on-load resize, orientation, strip, encode.

Runs in a worker process (never on the CDN's event loop); a libvips call cannot be interrupted.
The header check bounds what a decode costs before any pixel is decoded (:class:`Limits`); the
worker's kernel-enforced memory limit (``worker.init``) bounds whatever the estimate misses.
"""

from __future__ import annotations

import pyvips

from coffer_blob.transforms import engine
from coffer_blob.transforms.limits import Limits
from coffer_kit.contract import errors
from coffer_kit.contract.transforms import Transform

UNBOUNDED = 10_000_000  # libvips's VIPS_MAX_COORD
# Bytes of one sample, by libvips band format.
SAMPLE_BYTES = {
    "uchar": 1,
    "char": 1,
    "ushort": 2,
    "short": 2,
    "uint": 4,
    "int": 4,
    "float": 4,
    "complex": 8,
    "double": 8,
    "dpcomplex": 16,
}
# How libvips and its encoders report an allocation refused (by the worker's RLIMIT_DATA):
# libvips "out of memory", libjpeg "Insufficient memory", libheif "Failed to allocate",
# libwebp's encoder only "unable to encode" (measured with libvips 8.18.7).
MEMORY_MARKS = ("memory", "alloc", "unable to encode")
# A progressive JPEG is decoded from a whole-image buffer of DCT coefficients, 16 bits each,
# whatever the shrink (libjpeg's buffered-image mode).
COEFFICIENT_BYTES = 2


def _flag(header: pyvips.Image, name: str) -> bool:
    return bool(header.get_typeof(name)) and int(header.get(name)) != 0


def check_source(data: bytes, *, limits: Limits | None = None) -> str:
    """The source format after the header check; 415 ``not_an_image`` / 422 ``image_too_large``.

    Only the header is read (libvips loads lazily): no pixel is decoded here. Refused: more
    than ``max_pixels``; more than ``max_pages`` pages or frames; a first page that decodes to
    more than ``max_decoded_bytes``; a source its decoder holds whole (interlaced PNG,
    progressive JPEG) needing more than ``max_whole_bytes``.
    """
    limits = limits or Limits()
    fmt = engine.sniff_format(data[:32])
    if fmt is None:
        raise errors.not_an_image()
    try:
        header = getattr(pyvips.Image, engine.SOURCE_LOADERS[fmt])(data, access="sequential")
    except pyvips.Error as exc:
        raise errors.not_an_image("The asset's image data cannot be read.") from exc
    width, height = int(header.width), int(header.height)
    pixels = width * height
    if pixels > limits.max_pixels:
        raise errors.image_too_large(pixels=pixels, limit=limits.max_pixels)
    pages = int(header.get("n-pages")) if header.get_typeof("n-pages") else 1
    if pages > limits.max_pages:
        raise errors.image_too_costly(
            f"The image has {pages} pages or frames; transforms accept at most {limits.max_pages}.",
            pages=pages,
            limitPages=limits.max_pages,
        )
    bands = int(header.bands)
    decoded = pixels * bands * SAMPLE_BYTES.get(str(header.format), 16)
    if decoded > limits.max_decoded_bytes:
        raise errors.image_too_costly(
            f"The image decodes to {decoded} bytes; transforms accept at most {limits.max_decoded_bytes}.",
            decodedBytes=decoded,
            limitBytes=limits.max_decoded_bytes,
        )
    whole = 0
    if fmt == "png" and _flag(header, "interlaced"):
        whole = decoded  # every pass lands in one full-size buffer
    elif fmt == "jpeg" and _flag(header, "jpeg-multiscan"):
        whole = pixels * bands * COEFFICIENT_BYTES
    if whole > limits.max_whole_bytes:
        raise errors.image_too_costly(
            f"The image is interlaced or progressive, so decoding it holds {whole} bytes at once; "
            f"transforms accept at most {limits.max_whole_bytes}.",
            decodedBytes=whole,
            limitBytes=limits.max_whole_bytes,
        )
    return fmt


def render(data: bytes, transform: Transform, out_fmt: str, *, limits: Limits | None = None) -> bytes:
    """The variant's bytes: never enlarged, EXIF orientation applied, every metadata block dropped."""
    limits = limits or Limits()
    source = check_source(data, limits=limits)
    header = getattr(pyvips.Image, engine.SOURCE_LOADERS[source])(data, access="sequential")
    src_w, src_h = int(header.width), int(header.height)
    if header.get_typeof("orientation") and int(header.get("orientation")) in (5, 6, 7, 8):
        src_w, src_h = src_h, src_w
    width = transform.w or src_w
    height = transform.h
    # libvips's height defaults to the width (a square box): a width alone leaves height free.
    options: dict[str, object] = {"size": "down", "height": height or UNBOUNDED}
    if transform.fit == "cover" and transform.w and transform.h:
        options["crop"] = "centre"
    try:
        image = pyvips.Image.thumbnail_buffer(data, width, **options)
        if transform.fit == "contain" and transform.w and transform.h:
            box_w, box_h = min(transform.w, src_w), min(transform.h, src_h)
            if image.width < box_w or image.height < box_h:
                if not image.hasalpha():
                    image = image.addalpha()  # opaque at the image's own depth (16-bit too)
                # Transparent, in as many bands as the image has (a grey one has two).
                background = [0] * image.bands
                image = image.gravity("centre", box_w, box_h, extend="background", background=background)
        if out_fmt == "jpeg" and image.hasalpha():
            image = image.flatten(background=[255, 255, 255])
        saver = getattr(image, engine.OUTPUT_SAVERS[out_fmt])
        quality: dict[str, object] = {} if out_fmt == "png" else {"Q": transform.q}
        return bytes(saver(keep=0, **quality, **engine.OUTPUT_OPTIONS[out_fmt]))
    except MemoryError as exc:
        raise limits.exceeded() from exc
    except pyvips.Error as exc:
        # An allocation the worker's RLIMIT_DATA refused, as libvips and the encoders say it.
        said = f"{exc.message} {exc.detail}".lower()
        if any(mark in said for mark in MEMORY_MARKS):
            raise limits.exceeded() from exc
        raise errors.not_an_image("The asset's image data cannot be decoded.") from exc
