"""What runs in a transform worker process: read the original, render, store the variant.

The CDN process sends only names (the original's key, the variant's key, the transform);
the worker reads the source from the store and writes the variant there itself, so no image
crosses the process boundary and the CDN process never holds one. It answers a small tuple
(never an exception object, which may not survive pickling):

- ``("ok", content_type, size, sha256, evicted)``: the variant is committed under its key,
  ``evicted`` kept variants of the asset deleted to make room (``MAX_VARIANTS_PER_ASSET``);
- ``("found",)``: it was there already (a request that missed it a moment before its render
  finished asks again: the render is not repeated);
- ``("gone",)``: the original is not there (deleted meanwhile);
- ``("refused", status, code, message, details)``: 415 ``not_an_image`` or 422
  ``image_too_large``, raised by :mod:`coffer_blob.transforms.render`.
"""

from __future__ import annotations

import hashlib
import os
import random
import resource
from typing import Any

from coffer_blob.config import Settings
from coffer_blob.storage import Storage, make_driver, read_range
from coffer_blob.transforms import formats
from coffer_blob.transforms.limits import Limits
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.limits import MAX_FILE_BYTES
from coffer_kit.contract.transforms import BUILTIN_PRESETS, MAX_ORG_PRESETS, Transform

Outcome = tuple[Any, ...]

# Variants kept per asset (CONTRACT §10: stored beside the original, outside the quota): every
# public URL of its presets at once (an organization's preset with fmt=auto is three variants,
# AVIF, WebP and its fallback), so anonymous requests alone never make one evict another. Past
# it, or past the asset's bytes below, a new variant takes the place of kept ones, chosen at
# random, whose URLs render them again when next asked: signed URLs with ever new parameters
# cannot store without bound.
MAX_VARIANTS_PER_ASSET = len(BUILTIN_PRESETS) + 3 * MAX_ORG_PRESETS
# What an asset's variants hold in all: a multiple of its source's size, or at least enough
# for every preset of a small image. One variant larger alone (a PNG of a noisy JPEG at full
# size is ten times its source) is refused: 422 ``image_too_large``. One organization's
# variants were 30-330 times its quota (38 MB PNGs of a 3.7 MB JPEG, 32 of them).
VARIANT_BYTES_PER_SOURCE_BYTE = 8
MIN_VARIANT_BYTES = 16 * 1024 * 1024


def variant_budget(source_size: int) -> int:
    return max(VARIANT_BYTES_PER_SOURCE_BYTE * source_size, MIN_VARIANT_BYTES)


VARIANT_PREFIX = "v%"

_storage: Storage | None = None
_limits: Limits | None = None
# Workers run below the CDN process's priority: see init().
WORKER_NICENESS = 5


def init(settings: Settings, environ: dict[str, str]) -> None:
    """Per worker, once: its hard memory limit and priority, libvips's limits, the storage driver.

    ``environ`` is the CDN process's ``AWS_*`` environment when the pool started: workers fork
    from a server that may have started earlier, and boto3 reads its credentials from there.
    """
    # The kernel's limit on this process's heap and anonymous mappings (every buffer libvips
    # and its codecs allocate): past it an allocation fails, so the render fails (libvips's
    # "out of memory", a MemoryError) or, where a library aborts on a failed allocation
    # (glib's g_malloc), this worker dies; either way the request is a 422 and no other process
    # is touched. Set before libvips loads, so nothing escapes it.
    global _storage, _limits
    _limits = Limits.of(settings)
    resource.setrlimit(resource.RLIMIT_DATA, (_limits.memory_bytes, _limits.memory_bytes))
    import pyvips  # libvips is loaded in workers only, never in the CDN process

    os.environ.update(environ)
    # No operation cache: a worker renders each variant once, and the cache would keep the
    # last source's buffer (up to the file size limit) alive between renders.
    pyvips.cache_set_max(0)
    pyvips.cache_set_max_mem(0)
    pyvips.cache_set_max_files(0)
    # Threads per pipeline: each holds its own tile buffers (memory), and the pool's worker
    # count already uses the cores.
    pyvips.concurrency_set(settings.cdn_tuning.transform_threads)
    _storage = make_driver(settings)
    # Below the CDN's own priority once started: renders take the CPU the CDN's downloads
    # leave. Mildly (a weight of a third): the worker still renders on a busy machine.
    os.nice(WORKER_NICENESS)


def ping() -> None:
    """Nothing: the pool's first task, which returns once a worker has started."""


def run(key: str, variant_key: str, transform: Transform, private: bool) -> Outcome:
    """Render ``transform`` of the object under ``key`` and commit it under ``variant_key``.

    ``fmt=auto`` arrives resolved by the CDN from the request's ``Accept`` (AVIF, WebP), or still
    ``auto`` when it allows neither: then the source's family decides (JPEG or PNG).
    """
    from coffer_blob.transforms import render  # see init()

    assert _storage is not None and _limits is not None, "init() runs first"
    if _storage.stat(variant_key) is not None:
        return ("found",)
    try:
        data = read_range(_storage, key, 0, MAX_FILE_BYTES)  # (the file size limit bounds it)
        if data is None:
            return ("gone",)
        source = render.check_source(data, limits=_limits)
        out_fmt = formats.resolve_format(transform, source, "")
        output = render.render(data, transform, out_fmt, limits=_limits)
    except MemoryError:
        error = _limits.exceeded()
        return ("refused", error.status, error.code, error.message, error.details)
    except CofferError as exc:
        return ("refused", exc.status, exc.code, exc.message, exc.details)
    budget = variant_budget(len(data))
    del data
    if len(output) > budget:  # this variant's own refusal: others of the source may fit
        error = variant_too_large(len(output), budget)
        return ("oversize", error.status, error.code, error.message, error.details)
    evicted = _make_room(_storage, variant_key, len(output), budget)
    digest = hashlib.sha256(output).hexdigest()
    writer = _storage.open_writer(variant_key)
    try:
        writer.write(output)
        info = writer.commit(content_type=formats.MEDIA_TYPES[out_fmt], sha256=digest, private=private)
    except BaseException:
        writer.abort()
        raise
    return ("ok", info.content_type, info.size, info.sha256, evicted)


def _make_room(storage: Storage, variant_key: str, size: int, budget: int) -> int:
    """Delete kept variants of the asset, at random, until a new one of ``size`` bytes leaves
    at most ``MAX_VARIANTS_PER_ASSET`` of them and ``budget`` bytes; answers how many went."""
    prefix = variant_key.rsplit("/", 1)[0] + "/"
    listed = storage.sizes(prefix, MAX_VARIANTS_PER_ASSET + 16)
    kept = [(name, bytes_) for name, bytes_ in listed if name.startswith(VARIANT_PREFIX)]
    random.shuffle(kept)
    held = sum(bytes_ for _, bytes_ in kept)
    evicted = 0
    while kept and (len(kept) + 1 > MAX_VARIANTS_PER_ASSET or held + size > budget):
        name, bytes_ = kept.pop()
        storage.delete(prefix + name)
        held, evicted = held - bytes_, evicted + 1
    return evicted


def variant_too_large(size: int, budget: int) -> CofferError:
    return CofferError(
        422,
        "image_too_large",
        f"The transformed image would be {size} bytes; a variant of this source may be at most {budget}.",
        details={"outputBytes": size, "limitBytes": budget},
    )


# A BlurHash of 4×3 components (issue 50), computed from a thumbnail this wide at most: the
# hash keeps 12 colours, so more pixels would only cost time.
PLACEHOLDER_SIDE = 32
PLACEHOLDER_COMPONENTS = (4, 3)


def facts(key: str) -> Outcome:
    """An image's facts: ``("ok", width, height, orientation, blurhash)`` (width and height as
    shown, its EXIF orientation applied); ``("none",)`` for anything the header check refuses
    or libvips cannot decode; ``("gone",)`` when the object is not there."""
    import blurhash
    import pyvips

    from coffer_blob.transforms import engine, render  # see init()

    assert _storage is not None and _limits is not None, "init() runs first"
    data = read_range(_storage, key, 0, MAX_FILE_BYTES)
    if data is None:
        return ("gone",)
    try:
        source = render.check_source(data, limits=_limits)
        header = getattr(pyvips.Image, engine.SOURCE_LOADERS[source])(data, access="sequential")
        width, height = int(header.width), int(header.height)
        orientation = int(header.get("orientation")) if header.get_typeof("orientation") else 1
        if orientation not in range(1, 9):
            orientation = 1
        if orientation in (5, 6, 7, 8):
            width, height = height, width
        # (thumbnail applies the orientation, and shrinks on load: a JPEG decodes at 1/8.)
        small = pyvips.Image.thumbnail_buffer(data, PLACEHOLDER_SIDE, height=PLACEHOLDER_SIDE, size="down")
        small = small.colourspace("srgb")
        if small.hasalpha():
            small = small.flatten(background=[255, 255, 255])
        if small.bands == 1:
            small = small.bandjoin([small, small])
        small = small.extract_band(0, n=3).cast("uchar")
        raw = small.write_to_memory()
    except (CofferError, MemoryError, pyvips.Error):
        return ("none",)
    del data
    w, h = int(small.width), int(small.height)
    rows = [[list(raw[(y * w + x) * 3 : (y * w + x) * 3 + 3]) for x in range(w)] for y in range(h)]
    x_components, y_components = PLACEHOLDER_COMPONENTS
    placeholder = blurhash.encode(rows, components_x=x_components, components_y=y_components)
    return ("ok", width, height, orientation, str(placeholder))
