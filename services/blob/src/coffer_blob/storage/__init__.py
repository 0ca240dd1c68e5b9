"""Storage drivers: ``fs`` (a directory, the embedded default) and ``s3`` (any S3-compatible store)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coffer_blob.storage.base import (
    ObjectInfo,
    Reader,
    Storage,
    StorageUnavailable,
    StoredObject,
    Writer,
    read_range,
    write_small,
)

if TYPE_CHECKING:
    from coffer_blob.config import Settings

__all__ = [
    "ObjectInfo",
    "Reader",
    "Storage",
    "StorageUnavailable",
    "StoredObject",
    "Writer",
    "make_driver",
    "make_storage",
    "read_range",
    "write_small",
]


def make_storage(settings: Settings) -> Storage:
    """The driver that ``COFFER_STORAGE`` names, configured from settings, timed and traced."""
    from coffer_blob.metrics import InstrumentedStorage

    return InstrumentedStorage(make_driver(settings))


def make_driver(settings: Settings) -> Storage:
    """The bare driver that ``COFFER_STORAGE`` names (a transform worker's: no metrics to scrape there)."""
    driver: Storage
    if settings.storage == "s3":
        from coffer_blob.storage.s3 import S3Storage

        driver = S3Storage.from_settings(settings)
    else:
        from coffer_blob.storage.fs import FsStorage

        assert settings.blob_dir is not None
        driver = FsStorage(settings.blob_dir)
    return driver
