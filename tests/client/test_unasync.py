"""One SDK source (issue 28): ``Coffer`` (``_sync.py``) is what unasync generates from
``AsyncCoffer`` (``_async.py``), so a fix made in one is in both. A change to ``_async.py``
without ``make unasync`` fails here, and so does an edit of the generated file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_sync_client_is_generated_from_the_async_one() -> None:
    check = [sys.executable, str(REPO / "scripts" / "unasync_client.py"), "--check"]
    done = subprocess.run(check, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_generated_client_says_so_and_needs_no_event_loop() -> None:
    text = (REPO / "clients" / "python" / "src" / "coffer_client" / "_sync.py").read_text()
    assert text.startswith("# Generated from _async.py by scripts/unasync_client.py")
    for word in ("async ", "await ", "anyio", "_async_io"):
        assert word not in text.split('"""', 2)[2], word  # past the module docstring
