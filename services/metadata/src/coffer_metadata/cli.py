"""``coffer-metadata``: serve the metadata API, migrate its database, or write the manifest."""

from __future__ import annotations

import argparse
import json
import os
import sys

from coffer_metadata.config import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coffer-metadata", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the metadata service")
    sub.add_parser("migrate", help="create or upgrade the metadata database schema")
    sub.add_parser("dispatch", help="run the webhook dispatcher (health and metrics on its own port)")
    manifest_p = sub.add_parser(
        "manifest", help="write what the store should hold as JSON lines (for coffer-blob scrub)"
    )
    manifest_p.add_argument("--output", default="-", help="a file to write, or - for standard output")
    args = parser.parse_args(argv)
    settings = Settings()
    if args.command == "manifest":
        from coffer_kit.db import make_engine
        from coffer_metadata.manifest import write_manifest

        engine = make_engine(settings.metadata_database_url, pool_size=1)
        try:
            if args.output == "-":
                write_manifest(engine, sys.stdout)
            else:
                with open(args.output, "w", encoding="utf-8") as out:
                    write_manifest(engine, out)
        finally:
            engine.dispose()
        return 0
    if args.command == "migrate":
        from coffer_metadata.migrations import migrate

        migrate(settings.metadata_database_url)
        print(json.dumps({"migrated": True}))
        return 0
    from coffer_kit.logs import configure_logging
    from coffer_kit.serve import Listener, serve

    if args.command == "dispatch":
        from coffer_metadata.webhooks.dispatch.app import create_dispatcher_app

        configure_logging("webhooks", settings.log_level, settings.log_format)
        os.nice(settings.metadata_webhook_tuning.niceness)
        port = settings.metadata_dispatcher_port
        serve([Listener(create_dispatcher_app(settings), settings.metadata_host, port)], graceful_seconds=15)
        return 0
    # Imported here, not above: the dispatcher does not load the API's routers (their idle RSS:
    # bench/results/journal.md, "Figures moved out of code comments").
    from coffer_metadata.main import create_app

    configure_logging("metadata", settings.log_level, settings.log_format)
    listeners = [Listener(create_app(settings), settings.metadata_host, settings.metadata_port)]
    if settings.metadata_webhooks_in_process:
        from coffer_metadata.webhooks.dispatch.app import create_dispatcher_app

        # Its own loop and thread: a round of deliveries never waits on the API's loop, nor
        # the API's requests on its (the niceness of a process apart has no equal here).
        dispatcher = create_dispatcher_app(settings)
        port = settings.metadata_dispatcher_port
        listeners.append(Listener(dispatcher, settings.metadata_host, port, own_loop=True))
    serve(listeners)
    return 0


if __name__ == "__main__":
    sys.exit(main())
