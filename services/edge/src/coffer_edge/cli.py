"""``coffer-edge``: serve the public API, or run one sweeper pass."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import asdict

from coffer_edge.config import Settings


def _sweep(settings: Settings, intent_age: float, tombstone_age: float) -> int:
    from coffer_edge.clients.blob import BlobClient
    from coffer_edge.clients.metadata import MetadataClient
    from coffer_edge.sweeper import sweep_once
    from coffer_kit.internal import internal_client

    async def run() -> int:
        token = settings.internal_secret()
        async with (
            internal_client(settings.metadata_url, token, timeout=30) as metadata_http,
            internal_client(settings.blob_url, token, timeout=30) as blob_http,
        ):
            result = await sweep_once(
                MetadataClient(metadata_http),
                BlobClient(blob_http),
                intent_age=intent_age,
                tombstone_age=tombstone_age,
            )
        print(json.dumps(asdict(result)))
        return 1 if result.failed else 0

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coffer-edge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the edge service")
    sweep = sub.add_parser("sweep", help="delete the bytes of stale uploads and finish stale deletes, once")
    sweep.add_argument("--intent-age", type=float, default=None, metavar="SECONDS")
    sweep.add_argument("--tombstone-age", type=float, default=None, metavar="SECONDS")
    args = parser.parse_args(argv)
    settings = Settings()
    if args.command == "sweep":
        return _sweep(
            settings,
            settings.sweep_intent_age_seconds if args.intent_age is None else args.intent_age,
            settings.sweep_tombstone_age_seconds if args.tombstone_age is None else args.tombstone_age,
        )

    from coffer_edge.main import create_app, create_internal_app
    from coffer_kit.logs import configure_logging
    from coffer_kit.serve import Listener, serve

    configure_logging("edge", settings.log_level, settings.log_format)
    if settings.forwarded_allow_ips is not None:
        # uvicorn takes the client address from X-Forwarded-For only from these peers.
        os.environ["FORWARDED_ALLOW_IPS"] = settings.forwarded_allow_ips
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
