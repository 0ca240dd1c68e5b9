"""``coffer-blob scrub``: read the manifest, scrub, print the report, export the metrics."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import IO

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from coffer_blob.config import Settings
from coffer_blob.scrub import Manifest, ManifestError, RateLimit, Report, iter_lines, read_manifest, scrub
from coffer_blob.storage import StorageUnavailable, make_driver

CLEAN, PROBLEMS, REFUSED = 0, 1, 2
# The oldest manifest ``--flags fix`` takes: it sets every object's flags to the rows' as the
# manifest read them, so a change made since (a file made private, a delete into the trash)
# would be undone. Restores run it at once, on an installation nobody writes to.
FIX_MAX_AGE = timedelta(minutes=15)
# The largest --orphan-age: ten years (a larger one cannot be subtracted from today).
MAX_ORPHAN_AGE_SECONDS = 10 * 366 * 86400


def parse_verify(value: str | None, default: float) -> float:
    """``all`` → 1, ``none`` → 0, else a share 0-1."""
    if value is None:
        return default
    named = {"all": 1.0, "none": 0.0}
    share = named[value] if value in named else float(value)
    if not 0 <= share <= 1:
        raise ValueError("--verify: all, none, or a number from 0 to 1")
    return share


def metrics(report: Report, rate: float) -> CollectorRegistry:
    """The run's figures as gauges (one registry per run: a batch job's last values)."""
    registry = CollectorRegistry()

    def gauge(name: str, doc: str, value: float) -> None:
        Gauge(name, doc, registry=registry).set(value)

    gauge("coffer_scrub_assets", "Asset rows in the manifest the scrub checked", report.assets)
    gauge("coffer_scrub_objects", "Objects the scrub's walk found in the store", report.objects)
    gauge("coffer_scrub_missing_objects", "Assets whose object is missing", len(report.of("missing")))
    corrupt, orphans = len(report.of("corrupt")), len(report.of("orphan"))
    gauge("coffer_scrub_corrupt_objects", "Objects whose size or SHA-256 differs from the row", corrupt)
    gauge("coffer_scrub_orphan_objects", "Objects no asset owns, older than the in-flight window", orphans)
    gauge("coffer_scrub_orphans_deleted", "Orphans deleted (--delete-orphans)", report.deleted_orphans)
    flags = len(report.of("flags"))
    gauge("coffer_scrub_flag_mismatches", "Objects whose private or trashed flag is not the row's", flags)
    gauge("coffer_scrub_verified_objects", "Objects whose bytes were hashed", report.verified)
    gauge("coffer_scrub_verified_bytes", "Bytes hashed", report.verified_bytes)
    gauge("coffer_scrub_rate_limit_bytes", "The configured bound on bytes hashed a second", rate)
    gauge("coffer_scrub_duration_seconds", "How long the scrub ran", report.seconds)
    gauge("coffer_scrub_last_run_timestamp_seconds", "When the scrub ended (Unix time)", time.time())
    return registry


def run_scrub(args: argparse.Namespace, settings: Settings) -> int:
    """The command's body; answers the exit code."""
    try:
        verify = parse_verify(args.verify, settings.blob_scrub_verify)
        rate = args.rate if args.rate is not None else settings.blob_scrub_rate_bytes
        if rate <= 0:
            raise ValueError("--rate: a positive number of bytes a second")
        age = args.orphan_age if args.orphan_age is not None else settings.blob_scrub_orphan_age_seconds
        if not 0 <= age <= MAX_ORPHAN_AGE_SECONDS:  # (NaN too)
            raise ValueError(f"--orphan-age: seconds, from 0 to {MAX_ORPHAN_AGE_SECONDS}")
        if args.metrics_file and not os.path.isdir(os.path.dirname(args.metrics_file) or "."):
            # Known now, not after a run of hours.
            raise ValueError(f"--metrics-file: {os.path.dirname(args.metrics_file)} is not a directory")
        with _open(args.manifest) as stream:
            manifest = read_manifest(iter_lines(stream), max_entries=settings.blob_scrub_max_assets)
        _check_flags(args.flags, manifest)
    except (ValueError, OSError) as exc:  # ManifestError is a ValueError
        kind = "manifest" if isinstance(exc, (ManifestError, OSError)) else "argument"
        print(f"coffer-blob scrub: bad {kind}: {exc}", file=sys.stderr)
        return REFUSED
    storage = make_driver(settings)
    try:
        report = scrub(
            storage,
            manifest,
            verify=verify,
            limit=RateLimit(rate),
            orphan_age=timedelta(seconds=age),
            delete_orphans=args.delete_orphans,
            flags=args.flags,
            manifest_at=manifest.at,
        )
    except StorageUnavailable as exc:
        print(f"coffer-blob scrub: the store failed: {exc}", file=sys.stderr)
        return REFUSED
    finally:
        storage.close()
    print(json.dumps(report.as_dict(), indent=2) if args.json else report.human())
    registry = metrics(report, rate)
    try:
        if args.metrics_file:
            write_to_textfile(args.metrics_file, registry)
        if args.pushgateway:
            push_to_gateway(args.pushgateway, job="coffer_scrub", registry=registry)
    except OSError as exc:  # (URLError is one) the exit code stays the store's: 0 or 1
        print(f"coffer-blob scrub: the metrics were not exported: {exc}", file=sys.stderr)
    return CLEAN if report.clean else PROBLEMS


def _check_flags(flags: str, manifest: Manifest) -> None:
    """``--flags`` asks what the manifest can answer: flags on every asset line, and for
    ``fix`` a fresh snapshot (FIX_MAX_AGE)."""
    if flags == "skip":
        return
    if flagless := manifest.flagless():
        raise ManifestError(f"--flags: {flagless} asset lines carry no flags (an older coffer-metadata)")
    if flags == "fix" and (manifest.at is None or datetime.now(UTC) - manifest.at > FIX_MAX_AGE):
        raise ManifestError(
            f"--flags fix: the manifest is older than {FIX_MAX_AGE.seconds // 60} minutes (or says not "
            "when it was made); fixing from it could undo changes made since: write a new one"
        )


@contextlib.contextmanager
def _open(path: str) -> Iterator[IO[bytes]]:
    if path == "-":
        yield sys.stdin.buffer
        return
    with open(path, "rb") as stream:
        yield stream
