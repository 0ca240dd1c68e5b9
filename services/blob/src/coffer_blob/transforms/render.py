"""Render one variant: header check, shrink-on-load resize, orientation, strip, encode.

Runs in a worker process (never on the CDN's event loop); a libvips call cannot be interrupted.
"""

from __future__ import annotations

import pyvips

from coffer_blob.transforms import engine
from coffer_blob.transforms.formats import AUTO_ORDER, MEDIA_TYPES
from coffer_kit import errors
from coffer_kit.transforms import Transform

DEFAULT_MAX_PIXELS = 50_000_000
UNBOUNDED = 10_000_000  # libvips's VIPS_MAX_COORD


def resolve_format(transform: Transform, source: str, accept: str) -> str:
    """The output format: the asked one, the best ``Accept`` allows for ``auto``, else the source's own."""
    if transform.fmt == "auto":
        offered = accept.lower()
        for fmt in AUTO_ORDER:
            if MEDIA_TYPES[fmt] in offered:
                return fmt
        return "jpeg" if source in ("jpeg", "tiff") else "png"
    if transform.fmt is not None:
        return transform.fmt
    if source in MEDIA_TYPES:
        return source
    return "png"  # GIF and TIFF sources keep lossless pixels


def check_source(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> str:
    """The source format after the header check; 415 ``not_an_image`` / 422 ``image_too_large``.

    Only the header is read (libvips loads lazily): no pixel is decoded here.
    """
    fmt = engine.sniff_format(data[:32])
    if fmt is None:
        raise errors.not_an_image()
    try:
        header = getattr(pyvips.Image, engine.SOURCE_LOADERS[fmt])(data, access="sequential")
    except pyvips.Error as exc:
        raise errors.not_an_image("The asset's image data cannot be read.") from exc
    pixels = int(header.width) * int(header.height)
    if pixels > max_pixels:
        raise errors.image_too_large(pixels=pixels, limit=max_pixels)
    return fmt


def render(data: bytes, transform: Transform, out_fmt: str, *, max_pixels: int = DEFAULT_MAX_PIXELS) -> bytes:
    """The variant's bytes: never enlarged, EXIF orientation applied, every metadata block dropped."""
    source = check_source(data, max_pixels=max_pixels)
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
                    image = image.bandjoin(255)
                image = image.gravity("centre", box_w, box_h, extend="background", background=[0, 0, 0, 0])
        if out_fmt == "jpeg" and image.hasalpha():
            image = image.flatten(background=[255, 255, 255])
        saver = getattr(image, engine.OUTPUT_SAVERS[out_fmt])
        quality: dict[str, object] = {} if out_fmt == "png" else {"Q": transform.q}
        return bytes(saver(keep=0, **quality, **engine.OUTPUT_OPTIONS[out_fmt]))
    except pyvips.Error as exc:
        raise errors.not_an_image("The asset's image data cannot be decoded.") from exc
