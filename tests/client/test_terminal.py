"""The progress bar as a person sees it: ``coffer upload`` of 100 MiB in a real terminal (tmux),
the screen read while it runs."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

RATE = re.compile(r"\d+(\.\d+)? (B|KiB|MiB|GiB)/s")
LEFT = re.compile(r"\d+:\d\d:\d\d")


def test_upload_shows_a_bar_a_rate_and_the_file_name(cli: Any, big_file: Any, tmp_path: Path) -> None:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed for this test: apt-get install -y tmux (make test installs it)"
    sock = str(tmp_path / "tmux.sock")
    exe = str(Path(sys.executable).parent / "coffer")
    env = [arg for k, v in cli.env.items() for arg in ("-e", f"{k}={v}")]
    command = f"{shlex.quote(exe)} upload {shlex.quote(str(big_file.path))}; echo EXIT=$?; sleep 600"
    subprocess.run(
        [tmux, "-S", sock, "new-session", "-d", "-s", "t", "-x", "160", "-y", "20", *env, command], check=True
    )
    frames: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            screen = subprocess.run(
                [tmux, "-S", sock, "capture-pane", "-p", "-t", "t"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            frames.append(screen)
            if "EXIT=" in screen:
                break
            time.sleep(0.05)
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], check=False)
    assert frames and "EXIT=0" in frames[-1], frames[-1:]
    running = [f for f in frames if "EXIT=" not in f and "uploaded 1 file" not in f]
    live = [f for f in running if big_file.path.name in f and "━" in f and RATE.search(f) and LEFT.search(f)]
    assert live, "no frame showed the bar while the upload ran:\n" + "\n---\n".join(running[-3:])
    # And the bar moved: some frame shows a part of the file done, neither 0 nor all of it.
    partial = re.compile(r"\b([1-9]\d?(\.\d)?)/100\.0 MiB")
    assert any(partial.search(f) for f in live), live[-1]


def test_no_bars_when_not_a_terminal_or_quiet(cli: Any, tmp_path: Path) -> None:
    f = tmp_path / "small.bin"
    f.write_bytes(b"x" * 300_000)
    r = cli.proc("upload", str(f))
    # No bar, only the summary line: "uploaded 1 file, 293.0 KiB in 0.1 s (2.1 MiB/s)".
    assert r.exit_code == 0 and "━" not in r.stderr
    assert re.fullmatch(r"uploaded 1 file, 293\.0 KiB in \d+\.\d s \([^)]+/s\)\n", r.stderr), r.stderr
    assert "small.bin" in r.stdout
    r = cli.proc("upload", str(f), "-q")
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == ""
