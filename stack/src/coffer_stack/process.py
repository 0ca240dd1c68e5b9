"""What a stack asks of a service's process, however it was started."""

from __future__ import annotations

import signal
import sys
from typing import Protocol


class Process(Protocol):
    """The part of ``subprocess.Popen`` a stack uses (a zygote's child has it too)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def terminate_with_parent() -> None:
    """In a child: get SIGTERM when its parent dies, however it dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
