"""The libvips engine: which source formats are accepted, and the loaders that read them."""

from __future__ import annotations

import pyvips

from coffer_blob.transforms.formats import sniff_format

__all__ = [
    "OUTPUT_OPTIONS",
    "OUTPUT_SAVERS",
    "SOURCE_LOADERS",
    "has_operation",
    "libvips_version",
    "missing_operations",
    "sniff_format",
]

# Source formats of CONTRACT §10, by the libvips loader that reads each from a buffer.
# SVG (``svgload``) and every other loader libvips knows are deliberately absent.
SOURCE_LOADERS: dict[str, str] = {
    "jpeg": "jpegload_buffer",
    "png": "pngload_buffer",
    "webp": "webpload_buffer",
    "avif": "heifload_buffer",
    "gif": "gifload_buffer",
    "tiff": "tiffload_buffer",
}

# Output formats, by the libvips saver that writes each to a buffer.
OUTPUT_SAVERS: dict[str, str] = {
    "webp": "webpsave_buffer",
    "avif": "heifsave_buffer",
    "jpeg": "jpegsave_buffer",
    "png": "pngsave_buffer",
}

# Options each saver needs on top of quality: heifsave defaults to HEVC, AVIF is AV1.
OUTPUT_OPTIONS: dict[str, dict[str, object]] = {
    "webp": {},
    "avif": {"compression": "av1"},
    "jpeg": {},
    "png": {},
}


def libvips_version() -> str:
    """The loaded libvips's version, e.g. ``8.18.7``."""
    return f"{pyvips.version(0)}.{pyvips.version(1)}.{pyvips.version(2)}"


def has_operation(name: str) -> bool:
    """Whether the loaded libvips has the operation (a loader or a saver) ``name``."""
    return bool(pyvips.type_find("VipsOperation", name) != 0)


def missing_operations() -> list[str]:
    """The loaders and savers the contract needs that this libvips lacks (empty when all present)."""
    wanted = [*SOURCE_LOADERS.values(), *OUTPUT_SAVERS.values()]
    return [name for name in wanted if not has_operation(name)]
