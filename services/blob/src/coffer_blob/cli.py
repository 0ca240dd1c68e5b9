"""``coffer-blob``: serve blob's internal API and/or the CDN host, or scrub the store."""

from __future__ import annotations

import argparse
import sys

from coffer_blob.config import Settings
from coffer_blob.scrub import FLAG_MODES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coffer-blob", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve_p = sub.add_parser("serve", help="run the blob service")
    serve_p.add_argument(
        "--role",
        choices=["all", "api", "cdn"],
        default="all",
        help="api: internal API only; cdn: CDN host (plus health and metrics); all: both",
    )
    scrub_p = sub.add_parser(
        "scrub",
        help="check the store against metadata's manifest (coffer-metadata manifest)",
        description="Report assets whose object is missing or corrupt and objects no asset owns. "
        "Exit 0: clean; 1: problems found; 2: bad arguments or manifest.",
    )
    scrub_p.add_argument("--manifest", required=True, help="the manifest's path, or - for standard input")
    scrub_p.add_argument("--json", action="store_true", help="print the report as JSON")
    scrub_p.add_argument(
        "--delete-orphans", action="store_true", help="delete the orphans found (nothing else is changed)"
    )
    scrub_p.add_argument(
        "--flags",
        choices=FLAG_MODES,
        default="skip",
        help="compare each asset's private and trashed flags with its row (check; one stat an object),"
        " and set the row's (fix: after a restore); default skip",
    )
    scrub_p.add_argument(
        "--verify", help="hash all, none, or a share (0-1) of the objects (default: COFFER_BLOB_SCRUB_VERIFY)"
    )
    scrub_p.add_argument("--rate", type=int, help="bytes a second to hash (COFFER_BLOB_SCRUB_RATE_BYTES)")
    scrub_p.add_argument(
        "--orphan-age", type=float, help="seconds an unowned object must be old to count (in-flight window)"
    )
    scrub_p.add_argument("--metrics-file", help="write the metrics there (node exporter textfile format)")
    scrub_p.add_argument("--pushgateway", help="push the metrics to this Prometheus Pushgateway (host:port)")
    args = parser.parse_args(argv)
    settings = Settings()
    if args.command == "scrub":
        from coffer_blob.scrub_cli import run_scrub

        return run_scrub(args, settings)

    from coffer_blob.main import create_app, create_cdn_app
    from coffer_kit.logs import configure_logging
    from coffer_kit.serve import Listener, serve

    configure_logging("blob", settings.log_level, settings.log_format)
    listeners = [
        Listener(create_app(settings, api=args.role != "cdn"), settings.blob_host, settings.blob_port)
    ]
    if args.role in ("all", "cdn"):
        # Beside the internal API, the CDN host has a loop of its own: downloads never wait
        # while an upload's multipart body is parsed (issue 23).
        cdn = create_cdn_app(settings)
        listeners.append(Listener(cdn, settings.cdn_host, settings.cdn_port, own_loop=args.role == "all"))
    serve(listeners, graceful_seconds=300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
