"""Blob settings (``COFFER_BLOB_*``, ``COFFER_CDN_*``, storage, plus the shared ``COFFER_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from coffer_kit import ports
from coffer_kit.settings import BaseServiceSettings, checked_secret


class CdnTuning(BaseModel):
    """The CDN's internal tuning; an operator never needs to change it."""

    model_config = ConfigDict(extra="forbid")

    # libvips threads per render (each holds its own buffers).
    transform_threads: int = Field(default=1, ge=1, le=16)
    # Sources above this many pixels (read from the header) are refused: 422 image_too_large.
    transform_max_pixels: int = Field(default=50_000_000, ge=1, le=50_000_000)
    # How long the CDN keeps an organization's presets before reading them again (<= 5 s); a
    # name it lacks is read again at once.
    preset_cache_seconds: float = Field(default=5.0, ge=0, le=5)
    # How long the CDN keeps what it read of an authority's revocation (<= 2 s): a signed URL
    # dies within this of its revocation reaching blob (coffer_blob.grants).
    revocation_cache_seconds: float = Field(default=2.0, ge=0, le=2)


class Settings(BaseServiceSettings):
    blob_host: str = "127.0.0.1"
    blob_port: int = ports.BLOB
    cdn_host: str = "127.0.0.1"
    cdn_port: int = ports.CDN
    # Cache lifetime of public CDN answers (CONTRACT §6, §12): a shared cache may keep what it
    # fetched this long after the asset is deleted or made private.
    cdn_public_max_age: int = Field(default=31_536_000, ge=0, le=31_536_000)
    # Image transforms on the CDN (CONTRACT §10). Off: a transformed URL answers 404.
    transforms: bool = True  # COFFER_TRANSFORMS=on|off
    # Worker processes rendering variants (a libvips call cannot be interrupted, so each runs
    # in a process that is killed and replaced past the time limit).
    cdn_transform_workers: int = Field(default=2, ge=1, le=64)
    # Transforms waiting for a worker beyond those running; past it, 503 with Retry-After.
    cdn_transform_queue: int = Field(default=8, ge=0, le=1024)
    # Wall time of one transform, queue wait included (CONTRACT §10: 10 s); then 503.
    cdn_transform_timeout: float = Field(default=10.0, gt=0, le=60)
    # Memory one worker may use (MiB), enforced by the kernel: the worker's RLIMIT_DATA (its
    # heap and anonymous mappings, libvips's buffers included) is this less the ~48 MiB its
    # interpreter and libraries hold, so its RSS stays within it. A render that needs more
    # fails in that worker alone (422 image_too_large, remembered for the source); libvips's
    # operation cache gets a quarter of it. Size the CDN pod's memory as (about 100 MiB for
    # the CDN process) + workers × this (docs/operations.md, docs/security.md).
    cdn_transform_worker_memory_mb: int = Field(default=384, ge=128, le=16_384)
    # Sources whose first page decodes to more than this (MiB: width × height × bands × bytes
    # per sample, from the header) are refused before decoding: 422 image_too_large. 200 lets
    # 50 MP of 8-bit RGBA through and refuses 7000×7000 of 16-bit RGBA (374 MiB). Sources a
    # decoder holds whole (interlaced PNG: the pixels; progressive JPEG: 2 bytes of DCT
    # coefficient per sample) must also fit in half a worker's memory, and a source has at
    # most 256 pages or frames (coffer_blob.transforms.render).
    cdn_transform_max_decoded_mb: int = Field(default=200, ge=1, le=4096)
    # The CDN's internal tuning (CdnTuning): not an operator's setting, so not in
    # docs/operations.md; tests set it through the constructor (or, for a process,
    # COFFER_CDN_TUNING as JSON).
    cdn_tuning: CdnTuning = Field(default_factory=CdnTuning)
    # Malware scanning (issue 48): clamd's address, tcp://HOST:PORT or unix:///PATH; unset, every
    # scan answers 503 scanner_unavailable (edge retries, then marks the asset unscanned).
    blob_clamd_url: str | None = Field(default=None, pattern=r"^(tcp://[^/:]+:\d{1,5}|unix:///.+)$")
    # Scans streaming to clamd at once from this process, and how long one may take (clamd's
    # own threads, MaxThreads, bound it too); past the timeout, 503 scanner_unavailable.
    blob_scan_concurrency: int = Field(default=2, ge=1, le=64)
    # At most 120: edge waits 150 s for one scan's answer (coffer_edge.scans.SCAN_TIMEOUT_SECONDS);
    # a scan that ran longer ended unscanned there, and its late clean released the file's hold
    # while it was still pending under block.
    blob_scan_timeout_seconds: float = Field(default=120.0, gt=0, le=120)
    # HMAC secret for signed CDN URLs; only blob knows it.
    signing_secret: SecretStr | None = None
    storage: Literal["fs", "s3"] = "fs"
    blob_dir: Path | None = None
    # storage = s3: any S3-compatible store. Credentials come from boto3's default chain
    # (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, a profile, an IAM role).
    s3_endpoint_url: str | None = None  # unset: AWS S3
    s3_bucket: str = ""
    s3_region: str | None = None
    s3_force_path_style: bool = False  # MinIO, Ceph RGW and moto usually need path-style URLs

    # The scrub (``coffer-blob scrub``, issue 47; docs/operations.md, "The scrub"). Bytes a
    # second it reads to hash objects, at most (COFFER_BLOB_SCRUB_RATE_BYTES): 32 MiB/s leaves
    # the disk or the bucket's bandwidth to the uploads and downloads.
    blob_scrub_rate_bytes: int = Field(default=32 * 1024 * 1024, ge=1024, le=10 * 1024**3)
    # The share of assets whose bytes each run hashes, 0-1 (COFFER_BLOB_SCRUB_VERIFY): 1 reads
    # every object, 0.1 a random tenth (every object about once in ten runs); sizes and
    # presence are checked for every asset whatever this is.
    blob_scrub_verify: float = Field(default=0.1, ge=0, le=1)
    # An object without a row is an orphan only once older than this (the in-flight window,
    # COFFER_BLOB_SCRUB_ORPHAN_AGE_SECONDS): an upload's bytes are published before its row.
    blob_scrub_orphan_age_seconds: float = Field(default=86_400, ge=0, le=90 * 86_400)
    # Manifest entries one run holds (about 300 bytes each): past it the run stops, refused.
    blob_scrub_max_assets: int = Field(default=20_000_000, ge=1)

    @model_validator(mode="after")
    def _blob(self) -> Settings:
        self.signing_secret = checked_secret(
            self.signing_secret,
            name="COFFER_SIGNING_SECRET",
            mode=self.mode,
            data_dir=self.data_dir,
            file="signing_secret",
        )
        if self.blob_dir is None:
            self.blob_dir = self.data_dir / "blobs"
        if self.storage == "s3" and not self.s3_bucket:
            raise ValueError("COFFER_S3_BUCKET must be set when COFFER_STORAGE is s3")
        return self
