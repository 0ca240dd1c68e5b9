"""What can be named without loading the HTTP stack: the retry policy, the size limit, the chunk
size. ``coffer --help`` and ``coffer --version`` import only this, the errors and typer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CHUNK", "MAX_FILE_BYTES", "UNSET", "ProgressCallback", "RetryPolicy"]

#: ``progress(done, total)`` after each chunk; ``total`` is None when the size is not known.
ProgressCallback = Callable[[int, "int | None"], None]

#: CONTRACT §7: the service refuses a file part above 100 MiB.
MAX_FILE_BYTES = 100 * 1024 * 1024
#: Bytes read from disk (or the socket) per step. 1 MiB keeps a 100 MiB upload at about 1 MiB of
#: buffers in the client while making only ~100 reads and writes.
CHUNK = 1024 * 1024


@dataclass(frozen=True)
class RetryPolicy:
    """Retries on 429 and 503 (waiting at least ``Retry-After``), and on connection failures, where a
    retry can neither duplicate nor lose anything: a POST only when the service cannot have received
    all of it (docs/client.md, "Retries")."""

    attempts: int = 5
    initial_wait: float = 0.5
    max_wait: float = 30.0

    @classmethod
    def none(cls) -> RetryPolicy:
        return cls(attempts=1)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: "Leave as it is" for arguments where None means "the root".
UNSET: Any = _Unset()
