"""Rendering one variant (issue 26, step 2 core): size and type by decoding the output, never
enlarged, EXIF orientation applied then no metadata left, GIF first frame, refusals by header.

Images are made here with libvips; outputs are decoded with libvips.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
import pyvips

from coffer_blob.config import Settings
from coffer_blob.transforms import formats, render
from coffer_blob.transforms.limits import MIB, Limits
from coffer_kit.contract import transforms as params
from coffer_kit.contract.errors import CofferError
from coffer_testkit import images


def _rgb(width: int, height: int, colour: list[int] | None = None) -> pyvips.Image:
    return pyvips.Image.black(width, height, bands=3).new_from_image(colour or [200, 100, 50])


def _decode(data: bytes) -> pyvips.Image:
    return pyvips.Image.new_from_buffer(data, "")


@pytest.mark.parametrize(
    ("query", "size", "loader"),
    [
        ({"preset": "thumb"}, (256, 256), "webpload_buffer"),
        ({"preset": "small"}, (640, 480), "jpegload_buffer"),
        ({"w": "100", "h": "100", "fit": "inside", "fmt": "png"}, (100, 75), "pngload_buffer"),
        ({"w": "100", "h": "100", "fit": "contain", "fmt": "png"}, (100, 100), "pngload_buffer"),
        ({"w": "300", "h": "100", "fmt": "avif"}, (300, 100), "heifload_buffer"),
        ({"w": "4096", "fmt": "jpeg", "q": "50"}, (1600, 1200), "jpegload_buffer"),  # never enlarged
    ],
)
def test_presets_and_free_parameters_give_the_right_type_and_size(
    query: dict[str, str], size: tuple[int, int], loader: str
) -> None:
    source = _rgb(1600, 1200).jpegsave_buffer()
    transform = params.parse(query, signed=True)
    assert transform is not None
    out = render.render(source, transform, formats.resolve_format(transform, "jpeg", ""))
    image = _decode(out)
    assert (image.width, image.height) == size
    assert image.get("vips-loader") == loader


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("grey JPEG", lambda: (pyvips.Image.black(300, 200) + 128).cast("uchar").jpegsave_buffer()),
        ("16-bit grey PNG", lambda: (pyvips.Image.black(300, 200) + 40000).cast("ushort").pngsave_buffer()),
        ("grey PNG with alpha", lambda: pyvips.Image.black(300, 200, bands=2).cast("uchar").pngsave_buffer()),
        ("RGB JPEG", lambda: _rgb(300, 200).jpegsave_buffer()),
    ],
)
@pytest.mark.parametrize("fmt", ["png", "webp", "jpeg", "avif"])
def test_contain_pads_every_kind_of_image(name: str, source: Callable[[], bytes], fmt: str) -> None:
    """``fit=contain`` pads with a transparent background (white in JPEG): a greyscale source
    (one or two bands) was a 415, remembered for every other variant of it."""
    out = _decode(render.render(source(), params.Transform(w=100, h=100, fit="contain", fmt=fmt), fmt))
    assert (out.width, out.height) == (100, 100), name
    if fmt in ("png", "webp"):
        assert out.hasalpha() and out.extract_band(out.bands - 1)(50, 2)[0] == 0  # padding: transparent
        assert out.extract_band(out.bands - 1)(50, 50)[0] == out.max()  # the image: opaque


def test_exif_orientation_is_applied_then_every_metadata_block_is_dropped() -> None:
    source_image = _rgb(400, 200).copy()
    source_image.set_type(pyvips.GValue.gint_type, "orientation", 6)
    source_image.set_type(pyvips.GValue.gstr_type, "exif-ifd0-Artist", "someone")
    source = source_image.jpegsave_buffer()
    assert "exif-data" in _decode(source).get_fields()
    for fmt in ("jpeg", "webp", "png", "avif"):
        out = render.render(source, params.Transform(w=100, fmt=fmt), fmt)
        image = _decode(out)
        assert (image.width, image.height) == (100, 200)  # rotated: portrait
        metadata = ("exif", "xmp", "iptc", "icc", "orientation")
        leaked = [f for f in image.get_fields() if f.startswith(metadata)]
        assert leaked == [], fmt


def test_gif_gives_its_first_frame() -> None:
    frames = [_rgb(40, 30, [255, 0, 0]), _rgb(40, 30, [0, 0, 255])]
    animation = pyvips.Image.arrayjoin(frames, across=1).copy()
    animation.set_type(pyvips.GValue.gint_type, "page-height", 30)
    source = animation.gifsave_buffer()
    out = render.render(source, params.Transform(w=20, fmt="png"), "png")
    image = _decode(out)
    assert (image.width, image.height) == (20, 15)
    red, _, blue = image.getpoint(10, 7)[:3]
    assert red > 200 and blue < 50


@pytest.mark.parametrize(
    "source",
    [b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', b"hello, plain text\n"],
)
def test_svg_and_text_are_not_images(source: bytes) -> None:
    with pytest.raises(CofferError) as caught:
        render.render(source, params.BUILTIN_PRESETS["thumb"], "webp")
    assert (caught.value.status, caught.value.code) == (415, "not_an_image")


def _png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = chunk(b"IDAT", zlib.compress(b"\x00" * 16))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + idat + chunk(b"IEND", b"")


def test_a_header_claiming_20000_by_20000_is_refused_before_decoding() -> None:
    with pytest.raises(CofferError) as caught:
        render.render(_png_header_only(20_000, 20_000), params.BUILTIN_PRESETS["thumb"], "webp")
    assert (caught.value.status, caught.value.code) == (422, "image_too_large")
    assert caught.value.details == {"pixels": 400_000_000, "limitPixels": 50_000_000}


def test_public_urls_take_presets_only_and_the_canonical_form_ignores_spelling() -> None:
    with pytest.raises(CofferError) as caught:
        params.parse({"w": "100"}, signed=False)
    assert (caught.value.status, caught.value.code) == (400, "invalid_transform")
    assert params.parse({}, signed=False) is None
    assert params.parse({"preset": "thumb"}, signed=False) == params.BUILTIN_PRESETS["thumb"]
    one = params.parse({"w": "10", "fit": "cover", "q": "80"}, signed=True)
    two = params.parse({"q": "80", "w": "10"}, signed=True)
    assert one is not None and two is not None and one.canonical() == two.canonical()
    for bad in ({"w": "0"}, {"h": "4097"}, {"q": "19"}, {"fit": "fill"}, {"fmt": "bmp"}, {"w": "1e3"}):
        with pytest.raises(CofferError) as caught:
            params.parse(bad, signed=True)
        assert caught.value.code == "invalid_transform"


# Issue 44: the header check counts decoded bytes and how the format decodes, not pixels alone.
@pytest.mark.parametrize(
    ("make", "details"),
    [
        # 7000² × 4 bands × 2 bytes: 374 MiB decoded, over the 200 MiB limit.
        (images.interlaced_png_16bit, {"decodedBytes": 392_000_000, "limitBytes": 200 * MIB}),
        # Progressive: 3 bands × 2 bytes of DCT coefficient per pixel held at once, over half
        # of a worker's memory (384 MiB less 32 MiB of code).
        (images.progressive_jpeg, {"decodedBytes": 8660 * 5773 * 6, "limitBytes": 176 * MIB}),
        (images.gif_of_frames, {"pages": 1000, "limitPages": 256}),
        (images.webp_of_frames, {"pages": 1000, "limitPages": 256}),
        (images.tiff_of_pages, {"pages": 1000, "limitPages": 256}),
    ],
    ids=[
        "interlaced-16-bit-png",
        "progressive-50mp-jpeg",
        "gif-1000-frames",
        "webp-1000-frames",
        "tiff-1000",
    ],
)
def test_hostile_sources_are_refused_from_their_header(
    make: Callable[[], bytes], details: dict[str, int]
) -> None:
    with pytest.raises(CofferError) as caught:
        render.check_source(make())
    assert (caught.value.status, caught.value.code, caught.value.details) == (422, "image_too_large", details)


@pytest.mark.parametrize(
    "source",
    [images.png_header_only(2**31, 1), images.SVG, images.PDF],
    ids=["png-width-2^31", "svg", "pdf"],
)
def test_impossible_headers_svg_and_pdf_are_not_images(source: bytes) -> None:
    with pytest.raises(CofferError) as caught:
        render.check_source(source)
    assert (caught.value.status, caught.value.code) == (415, "not_an_image")


def test_what_fits_the_limits_renders() -> None:
    # The same shapes, small enough: a progressive JPEG, an interlaced 16-bit PNG, 256 frames.
    small = params.Transform(w=8, fmt="png")
    for source in (
        images.progressive_jpeg(2000, 1500),
        images.interlaced_png_16bit(1000),
        images.gif_of_frames(256),
        images.tiff_of_pages(256),
    ):
        assert _decode(render.render(source, small, "png")).width == 8


def test_the_limits_follow_the_settings(settings: Settings) -> None:
    limits = Limits.of(settings.model_copy(update={"cdn_transform_worker_memory_mb": 160}))
    assert (limits.memory_bytes, limits.max_whole_bytes, limits.max_decoded_bytes) == (
        128 * MIB,
        64 * MIB,
        200 * MIB,
    )
    source = images.interlaced_png_16bit(3000)  # 72 MB decoded: within 200 MiB, not within 64
    assert render.check_source(source) == "png"
    with pytest.raises(CofferError) as caught:
        render.check_source(source, limits=limits)
    assert caught.value.details == {"decodedBytes": 72_000_000, "limitBytes": 64 * MIB}
