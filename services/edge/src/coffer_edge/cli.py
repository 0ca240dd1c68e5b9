"""``coffer-edge``: serve the public API."""

from __future__ import annotations

import argparse
import sys

from coffer_edge.config import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coffer-edge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the edge service")
    parser.parse_args(argv)
    settings = Settings()

    from coffer_kit.logs import configure_logging
    from coffer_kit.serve import Listener, serve

    from coffer_edge.main import create_app, create_internal_app

    configure_logging("edge", settings.log_level)
    public = create_app(settings)
    serve(
        [
            Listener(public, settings.edge_host, settings.edge_port),
            Listener(create_internal_app(public), settings.edge_host, settings.edge_internal_port),
        ],
        graceful_seconds=300,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
