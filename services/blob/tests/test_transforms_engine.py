"""The image engine (issue 26, step 1): libvips from the ``pyvips-binary`` wheel has every loader
and saver CONTRACT §10 needs, and only the contract's source formats are recognised.

The images are made here by libvips itself, in each format, then read back by the loader
the sniffer chose.
"""

from __future__ import annotations

import pytest
import pyvips

from coffer_blob.transforms import engine


def test_libvips_is_the_locked_wheel_with_every_needed_codec() -> None:
    assert engine.libvips_version().startswith("8.18.")
    assert engine.missing_operations() == []


def _image(width: int, height: int) -> pyvips.Image:
    return pyvips.Image.black(width, height, bands=3).new_from_image([200, 100, 50])


@pytest.mark.parametrize(
    ("fmt", "suffix"),
    [
        ("jpeg", ".jpg"),
        ("png", ".png"),
        ("webp", ".webp"),
        ("gif", ".gif"),
        ("tiff", ".tif"),
        ("avif", ".avif"),
    ],
)
def test_each_source_format_is_sniffed_and_read_by_its_own_loader(fmt: str, suffix: str) -> None:
    data = _image(64, 48).write_to_buffer(suffix)
    assert engine.sniff_format(data[:32]) == fmt
    image = getattr(pyvips.Image, engine.SOURCE_LOADERS[fmt])(data)
    assert (image.width, image.height) == (64, 48)


@pytest.mark.parametrize("fmt", ["webp", "avif", "jpeg", "png"])
def test_each_output_format_encodes(fmt: str) -> None:
    saver = getattr(_image(32, 32), engine.OUTPUT_SAVERS[fmt])
    out = saver(**engine.OUTPUT_OPTIONS[fmt])
    assert engine.sniff_format(out[:32]) == fmt


@pytest.mark.parametrize(
    "head",
    [
        b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>',
        b'<svg xmlns="http://www.w3.org/2000/svg"/>',
        b"just some text, not an image",
        b"",
        b"%PDF-1.7\n",
    ],
)
def test_svg_text_and_other_files_are_not_images(head: bytes) -> None:
    assert engine.sniff_format(head) is None
