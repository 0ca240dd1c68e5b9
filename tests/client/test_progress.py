"""The bars' figures, rendered in process on a console that says it is a terminal."""

from __future__ import annotations

import io
import re
import time

from rich.console import Console

from coffer_client._progress import Transfers

RATE = re.compile(r"total 3/3 files .* ([\d.]+) (B|KiB|MiB|GiB)/s")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_a_finished_total_shows_its_mean_rate() -> None:
    """Three files, the biggest first, each in one chunk (as `coffer sync` of a small site): the
    finished total bar's rate is at least what the bytes over the whole time give."""
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    sizes = [300_000, 7, 12]
    started = time.monotonic()
    with Transfers(console, enabled=True, total_bytes=sum(sizes), files=len(sizes)) as bars:
        for i, size in enumerate(sizes):
            update, finish = bars.file(f"f{i}", size)
            time.sleep(0.02)  # time for the bytes to take, so that the rate is finite
            update(size, size)
            finish(True)
    elapsed = time.monotonic() - started
    text = ESCAPE.sub("", screen.getvalue())
    found = RATE.findall(text)
    assert found, text
    value, unit = found[-1]
    shown = float(value) * UNITS[unit]
    # human() rounds to one decimal place: allow that much below the true mean.
    assert shown >= 0.95 * sum(sizes) / elapsed, (found[-1], sum(sizes) / elapsed)
