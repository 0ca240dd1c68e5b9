"""The ``coffer`` program (also ``python -m coffer_client``). ``coffer --version`` answers here,
before typer and the commands load; everything else goes to ``coffer_client.cli``."""

from __future__ import annotations

import gc
import sys


def version_line() -> str:
    # A constant, not importlib.metadata: reading the installed metadata costs more CPU than
    # everything else ``--version`` does (tests/client/test_cli.py checks that they agree).
    from coffer_client import __version__

    return f"coffer {__version__}"


def main() -> None:
    if sys.argv[1:] in (["--version"], ["-V"]):
        print(version_line())
        return
    # Python's collector would run over and over while a command's ~1,300 modules load (a pass per
    # 700 new objects, now and then a full one over all of them) and once more over everything at
    # exit, finding next to nothing: importing the command line and the SDK, then exiting, took
    # 0.40 s of CPU with it and 0.25 s without, ~0.09 s of that at exit (docs/client.md). So it stays
    # off until the command has loaded what it needs (``started`` below), and what is loaded by
    # then is frozen: alive until exit, never scanned.
    gc.disable()
    from coffer_client.cli import main as cli

    try:
        cli()
    finally:
        gc.freeze()  # the last collections at exit would only walk what lived all along


def started() -> None:
    """The command has loaded its libraries: collect garbage from here on, never scanning those.
    Does nothing unless ``main`` turned the collector off (the SDK in someone's process, tests)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


if __name__ == "__main__":
    main()
