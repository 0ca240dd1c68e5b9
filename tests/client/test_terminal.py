"""The progress bar as a person sees it: ``coffer upload`` of 100 MiB in a real terminal (tmux),
over a link of 50 MiB/s (a loopback proxy), the screen read while it runs."""

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

from coffer_testkit.testing import TcpProxy

pytestmark = pytest.mark.e2e

RATE = re.compile(r"\d+(\.\d+)? (B|KiB|MiB|GiB)/s")
LEFT = re.compile(r"\d+:\d\d:\d\d")
LINK_RATE = 50 * 1024 * 1024  # bytes a second the link lets through at most


def test_upload_shows_a_bar_a_rate_and_the_file_name(
    own_stack_with: Any, admin_for: Any, cli_for: Any, big_file: Any, tmp_path: Path
) -> None:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed for this test: apt-get install -y tmux (make test installs it)"
    sock = str(tmp_path / "tmux.sock")
    screen_log = tmp_path / "screen.log"
    exe = str(Path(sys.executable).parent / "coffer")
    # Through a slower link (the tus chunks too: the stack's base URL is the link's), as a
    # person's would be: on a quiet machine the whole file went in 0.2 s, between two of rich's
    # frames, and no frame showed a part of it done.
    link = TcpProxy("127.0.0.1", 1, upload_rate=LINK_RATE).start()
    url = f"http://127.0.0.1:{link.port}"
    stack = own_stack_with(COFFER_BASE_URL=url)
    link.target = ("127.0.0.1", stack.ports.edge)
    admin = admin_for(stack)
    key = admin("create-key", "--org", admin("create-org", "--name", "Terminal")["id"])["key"]
    env = [arg for k, v in cli_for(url, key).env.items() for arg in ("-e", f"{k}={v}")]
    # Every byte the terminal is sent is recorded (pipe-pane), so no frame rich draws can fall
    # between two samples of the screen (CI once sampled none while the upload ran). The command
    # waits on a tmux channel until the recording has started.
    wait = f"{shlex.quote(tmux)} -S {shlex.quote(sock)} wait-for go"
    upload = f"{shlex.quote(exe)} upload {shlex.quote(str(big_file.path))}"
    command = f"{wait}; {upload}; echo EXIT=$?; sleep 600"
    subprocess.run(
        [tmux, "-S", sock, "new-session", "-d", "-s", "t", "-x", "160", "-y", "20", *env, command], check=True
    )
    try:
        subprocess.run(
            [tmux, "-S", sock, "pipe-pane", "-o", "-t", "t", f"cat >> {shlex.quote(str(screen_log))}"],
            check=True,
        )
        subprocess.run([tmux, "-S", sock, "wait-for", "-S", "go"], check=True)
        deadline = time.monotonic() + 240
        while "EXIT=" not in (shown := _text(screen_log)):
            assert time.monotonic() < deadline, "the upload did not end within 240 s:\n" + shown[-2000:]
            time.sleep(0.05)
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], check=False)
        link.cut()
    assert re.search(r"EXIT=0\b", shown), shown[-2000:]
    # Each line rich drew before the command ended, in the order drawn.
    running = [line for line in re.split(r"[\r\n]+", shown.split("EXIT=", 1)[0]) if line.strip()]
    running = [line for line in running if "uploaded 1 file" not in line]
    live = [
        line
        for line in running
        if big_file.path.name in line and "━" in line and RATE.search(line) and LEFT.search(line)
    ]
    assert live, "no frame showed the bar while the upload ran:\n" + "\n---\n".join(running[-3:])
    # And the bar moved: some frame shows a part of the file done, neither 0 nor all of it.
    partial = re.compile(r"\b([1-9]\d?(\.\d)?)/100\.0 MiB")
    assert any(partial.search(line) for line in live), live[-1]


# Control sequences (CSI, OSC, charset selection): what remains is the text the terminal shows.
ESCAPES = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]"  # CSI: cursor, erase, colour
    r"|\x1b\][^\x07\x1b]*(\x07|\x1b\\)"  # OSC: title, hyperlink
    r"|\x1b[()][0-9A-Za-z]|\x1b[=>78]"
)


def _text(path: Path) -> str:
    """The text written to the terminal so far, without its control sequences."""
    raw = path.read_bytes().decode("utf-8", "replace") if path.exists() else ""
    return ESCAPES.sub("", raw)


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
