"""Generate the client's ``_sync.py`` (``Coffer``) from ``_async.py`` (``AsyncCoffer``) with unasync,
as httpcore generates its synchronous layer: ``async``/``await`` dropped, the names below swapped,
then ruff's formatting and import order. ``make unasync`` writes the file; ``--check`` (run by
tests/client/test_unasync.py) exits 1 when it is not what the source generates."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

PACKAGE = Path(__file__).resolve().parents[1] / "clients" / "python" / "src" / "coffer_client"
SOURCE = PACKAGE / "_async.py"
TARGET = PACKAGE / "_sync.py"
HEADER = "# Generated from _async.py by scripts/unasync_client.py (make unasync): edit _async.py.\n"

# Beyond unasync's own (__aenter__, AsyncIterator, ...): every other Async* name the source uses
# (unasync would make it Sync*), and the awaitable methods of httpx and of our own helpers.
REPLACEMENTS = {
    "AsyncCoffer": "Coffer",
    "AsyncClient": "Client",
    "AsyncRetrying": "Retrying",
    "AsyncLazyTLSTransport": "LazyTLSTransport",
    "_async_io": "_sync_io",
    "aclose": "close",
    "aread": "read",
    "aiter_bytes": "iter_bytes",
    "atrack": "track",
}


def _ruff(*args: str, source: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(TARGET), "-"],
        input=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"ruff {args[0]} failed on the generated client:\n{done.stdout}{done.stderr}")
    return done.stdout


def generate() -> str:
    """What ``_sync.py`` must hold."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / SOURCE.name
        shutil.copyfile(SOURCE, copy)
        rule = unasync.Rule(fromdir=SOURCE.name, todir=TARGET.name, additional_replacements=REPLACEMENTS)
        unasync.unasync_files([str(copy)], rules=[rule])
        text = (Path(tmp) / TARGET.name).read_text()
    text = _ruff("check", "--fix", "--quiet", "--exit-zero", source=HEADER + text)
    return _ruff("format", "--quiet", source=text)


def main() -> None:
    text = generate()
    if sys.argv[1:] == ["--check"]:
        if TARGET.read_text() != text:
            raise SystemExit(f"{TARGET} is not what {SOURCE.name} generates: run `make unasync`.")
        return
    TARGET.write_text(text)
    print(f"wrote {TARGET}")


if __name__ == "__main__":
    main()
