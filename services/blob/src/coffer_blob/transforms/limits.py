"""What one render may cost: the header check's limits and a worker's hard memory limit.

Without libvips, so the CDN process and a worker's start (before libvips loads) use them.
Documented with their values in docs/security.md, "Image transforms".
"""

from __future__ import annotations

import dataclasses

from coffer_blob.config import Settings
from coffer_kit.contract.errors import CofferError, image_too_costly

MIB = 1024 * 1024
DEFAULT_MAX_PIXELS = 50_000_000
# Pages (TIFF) or frames (GIF, WebP) a source may have: only the first is rendered, but
# libvips walks them all to read the header, and a frame count is a cost a caller chooses.
MAX_PAGES = 256
# What a worker holds from files (the interpreter, libvips and its codecs: 23 MiB measured),
# which RLIMIT_DATA does not count: its data limit is the setting less this, so its RSS stays
# within the setting.
WORKER_CODE_MB = 32


def worker_data_bytes(settings: Settings) -> int:
    """A worker's RLIMIT_DATA: COFFER_CDN_TRANSFORM_WORKER_MEMORY_MB less its code."""
    return (settings.cdn_transform_worker_memory_mb - WORKER_CODE_MB) * MIB


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a source may cost, checked on its header before any pixel is decoded."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    # width × height × bands × bytes per sample of the first page.
    max_decoded_bytes: int = 200 * MIB
    # What a decoder holds whole (interlaced PNG, progressive JPEG): half a worker's memory.
    max_whole_bytes: int = 176 * MIB
    max_pages: int = MAX_PAGES
    # The worker's hard limit (RLIMIT_DATA), named in the 422 of a render that reached it.
    memory_bytes: int = 352 * MIB

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        memory = worker_data_bytes(settings)
        return cls(
            max_pixels=settings.cdn_tuning.transform_max_pixels,
            max_decoded_bytes=settings.cdn_transform_max_decoded_mb * MIB,
            max_whole_bytes=memory // 2,
            memory_bytes=memory,
        )

    def exceeded(self) -> CofferError:
        """The 422 of a render stopped by its worker's memory limit (or its worker's death)."""
        return image_too_costly(
            f"The image needs more memory to transform than a worker may use ({self.memory_bytes} bytes).",
            limitBytes=self.memory_bytes,
        )
