"""A real ClamAV daemon for tests (issue 48), with its own configuration and a database made here.

Signature downloads are not reachable from the test machines, so the daemon loads only a
signature database written for the test: an ``.hdb`` (MD5, size, name) of the EICAR test file,
which ClamAV reads from its database directory like any other. The EICAR string itself is
put together at run time, so no file in the repository is one a scanner would flag.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coffer_testkit.testing import free_port

# The 68-byte EICAR anti-virus test file (eicar.org), in two halves.
EICAR = b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$" + b"EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*"
SIGNATURE = "Coffer.Test.EICAR"


@dataclass
class Clamd:
    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        """Start clamd and wait until it answers PING."""
        log = (self.root / "clamd.out").open("ab")
        self.process = subprocess.Popen(
            [_clamd(), "-c", str(self.root / "clamd.conf")], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                out = (self.root / "clamd.out").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"clamd did not start: {out}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"nPING\n")
                return s.recv(16).strip() == b"PONG"
        except OSError:
            return False


def _clamd() -> str:
    found = shutil.which("clamd") or ("/usr/sbin/clamd" if Path("/usr/sbin/clamd").exists() else None)
    if found is None:
        raise RuntimeError("clamd is not installed: `make test` installs Debian's clamav-daemon")
    return found


def eicar_database(directory: Path) -> Path:
    """A signature database of the EICAR file alone (an ``.hdb``: MD5, size, name) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    digest = hashlib.md5(EICAR, usedforsecurity=False).hexdigest()
    (directory / "coffer-test.hdb").write_text(f"{digest}:{len(EICAR)}:{SIGNATURE}\n")
    return directory


# Coffer's file limit (100 MiB) with room to spare, so every upload can be streamed whole: the
# chart's clamd.conf says the same (charts/coffer/values.yaml, clamav.streamMaxLength).
STREAM_MAX_LENGTH = "101M"


@contextlib.contextmanager
def running_clamd(root: Path, *, stream_max_length: str = STREAM_MAX_LENGTH) -> Iterator[Clamd]:
    """clamd on a free loopback port, its database the EICAR signature alone; stopped after.
    ``stream_max_length``: clamd's StreamMaxLength (a test of a stream past it sets less)."""
    database = eicar_database(root / "db")
    port = free_port()
    (root / "clamd.conf").write_text(
        "\n".join(
            [
                f"TCPSocket {port}",
                "TCPAddr 127.0.0.1",
                f"DatabaseDirectory {database}",
                "Foreground yes",
                f"LogFile {root / 'clamd.log'}",
                f"PidFile {root / 'clamd.pid'}",
                f"StreamMaxLength {stream_max_length}",
                f"MaxFileSize {stream_max_length}",
                f"MaxScanSize {stream_max_length}",
                "AlertExceedsMax yes",  # as the chart's: a file not scanned whole is no pass
                "",
            ]
        )
    )
    clamd = Clamd(root, port)
    clamd.start()
    try:
        yield clamd
    finally:
        clamd.stop()
