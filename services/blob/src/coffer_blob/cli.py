"""``coffer-blob``: serve blob's internal API and/or the CDN host."""

from __future__ import annotations

import argparse
import sys

from coffer_blob.config import Settings


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
    args = parser.parse_args(argv)
    settings = Settings()

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
