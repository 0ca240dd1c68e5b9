"""What runs in a transform worker process: read the original, render, store the variant.

The CDN process sends only names (the original's key, the variant's key, the transform);
the worker reads the source from the store and writes the variant there itself, so no image
crosses the process boundary and the CDN process never holds one. It answers a small tuple
(never an exception object, which may not survive pickling):

- ``("ok", content_type, size, sha256)``: the variant is committed under its key;
- ``("found",)``: it was there already (a request that missed it a moment before its render
  finished asks again: the render is not repeated);
- ``("gone",)``: the original is not there (deleted meanwhile);
- ``("refused", status, code, message, details)``: 415 ``not_an_image`` or 422
  ``image_too_large``, raised by :mod:`coffer_blob.transforms.render`.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from coffer_blob.config import Settings
from coffer_blob.storage import Storage, make_driver, read_range
from coffer_blob.transforms import formats
from coffer_kit.errors import CofferError
from coffer_kit.limits import MAX_FILE_BYTES
from coffer_kit.transforms import Transform

Outcome = tuple[Any, ...]

_storage: Storage | None = None


def init(settings: Settings, environ: dict[str, str]) -> None:
    """Per worker, once: libvips's limits, then the storage driver.

    ``environ`` is the CDN process's ``AWS_*`` environment when the pool started: workers fork
    from a server that may have started earlier, and boto3 reads its credentials from there.
    """
    import pyvips  # libvips is loaded in workers only, never in the CDN process

    os.environ.update(environ)
    global _storage
    memory = settings.cdn_transform_worker_memory_mb * 1024 * 1024
    # The operation cache helps a pipeline that reuses intermediate images; a worker renders
    # each variant once, so a small cache is all it needs, bounded in bytes and open files.
    pyvips.cache_set_max_mem(memory // 4)
    pyvips.cache_set_max(100)
    pyvips.cache_set_max_files(10)
    # Threads per pipeline: each holds its own tile buffers (memory), and the pool's worker
    # count already uses the cores.
    pyvips.concurrency_set(settings.cdn_transform_threads)
    _storage = make_driver(settings)


def run(key: str, variant_key: str, transform: Transform, private: bool, max_pixels: int) -> Outcome:
    """Render ``transform`` of the object under ``key`` and commit it under ``variant_key``.

    ``fmt=auto`` arrives resolved by the CDN from the request's ``Accept`` (AVIF, WebP), or still
    ``auto`` when it allows neither: then the source's family decides (JPEG or PNG).
    """
    from coffer_blob.transforms import render  # see init()

    assert _storage is not None, "init() runs first"
    if _storage.stat(variant_key) is not None:
        return ("found",)
    data = read_range(_storage, key, 0, MAX_FILE_BYTES)  # (the file size limit bounds it)
    if data is None:
        return ("gone",)
    try:
        source = render.check_source(data, max_pixels=max_pixels)
        out_fmt = render.resolve_format(transform, source, "")
        output = render.render(data, transform, out_fmt, max_pixels=max_pixels)
    except CofferError as exc:
        return ("refused", exc.status, exc.code, exc.message, exc.details)
    del data
    digest = hashlib.sha256(output).hexdigest()
    writer = _storage.open_writer(variant_key)
    try:
        writer.write(output)
        info = writer.commit(content_type=formats.MEDIA_TYPES[out_fmt], sha256=digest, private=private)
    except BaseException:
        writer.abort()
        raise
    return ("ok", info.content_type, info.size, info.sha256)
