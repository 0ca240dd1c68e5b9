"""Progress bars for transfers: one line per file in flight and one for the total, each with the
rate and the time left. Shown only on a terminal (stderr), never with ``--quiet`` or ``--json``."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import ProgressColumn, TaskID

Update = Callable[[int, "int | None"], None]
Finish = Callable[[bool], None]


def transfers(console: Callable[[], Console], *, enabled: bool, total_bytes: int, files: int) -> Bars:
    """Bars on ``console()`` (stderr) when ``enabled`` and it is a terminal; with ``--quiet`` or
    ``--json`` neither the console nor rich is made at all."""
    if not enabled:
        return Bars()
    return Transfers(console(), enabled=True, total_bytes=total_bytes, files=files)


def human(n: float) -> str:
    """A size in binary units, as the bars and the listings write them: 512 B, 3.9 MiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def counted(n: int, noun: str) -> str:
    """``1 file``, ``3 files``, ``1,000 files``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _speed_column() -> ProgressColumn:
    """The rate in the same binary units as the sizes beside it (rich's own column writes
    "kB/s" next to "MiB"). While a bar runs: rich's estimate over its recent samples. Once it is
    done: the mean over the whole transfer. rich's estimate leaves out its first sample's bytes,
    so a short transfer of a few chunks showed a fraction of its rate: 8.0 KiB/s on a total bar
    that moved 293 KiB in 0.2 s."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    class BinarySpeedColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            took = task.finished_time if task.finished else None
            speed = task.completed / took if took else task.speed
            return Text("?" if speed is None else f"{human(speed)}/s", style="progress.data.speed")

    return BinarySpeedColumn()


def _description_column() -> ProgressColumn:
    """The file's name (or the total's bold label), as markup without emoji codes: rich's own
    column made ``:warning:.txt`` into ⚠.txt, a name that is not the file's."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    class DescriptionColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text.from_markup(task.description, emoji=False, justify="left")

    return DescriptionColumn()


def _ignore(*_: object) -> None:
    return None


# Control characters a terminal acts on (escape sequences, carriage returns, bells) in what a
# service sends (names, messages): shown as \xNN instead. Tabs and line breaks are kept: the
# command line's own output is made of them.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character a terminal would act on written out."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class Bars:
    """No bars: what a transfer sees when nothing is shown."""

    def __enter__(self) -> Bars:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def file(self, name: str, size: int | None) -> tuple[Update, Finish]:  # noqa: ARG002
        """A progress callback for one file, and a ``done(ok)`` to call when it ends."""
        return _ignore, _ignore


class Transfers(Bars):
    """``with Transfers(console, enabled, total_bytes, files) as t: cb = t.file(name, size)``."""

    def __init__(self, console: Console, *, enabled: bool, total_bytes: int, files: int) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
        )

        self.enabled = enabled and console.is_terminal
        self.files = files
        self.finished = 0
        self._lock = threading.Lock()
        self._progress = Progress(
            _description_column(),
            BarColumn(bar_width=30),
            DownloadColumn(binary_units=True),
            _speed_column(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=not self.enabled,
            # 4 refreshes a second: smooth enough to read, and cheap beside the transfer.
            refresh_per_second=4,
        )
        self._total: TaskID | None = None
        self._total_bytes = total_bytes

    def __enter__(self) -> Transfers:
        self._progress.__enter__()
        if self.files > 1:
            self._total = self._progress.add_task(self._total_label(), total=self._total_bytes)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.__exit__(et, e, tb)

    def _total_label(self) -> str:
        return f"[bold]total[/] {self.finished}/{self.files} files"

    def file(self, name: str, size: int | None) -> tuple[Update, Finish]:
        from rich.markup import escape

        name = visible(name)
        short = name if len(name) <= 40 else "…" + name[-39:]
        # The description is markup (the total's is bold): a name is shown as it is.
        task = self._progress.add_task(escape(short), total=size)
        seen = 0

        def update(done: int, total: int | None) -> None:
            nonlocal seen
            delta, seen = done - seen, done
            self._progress.update(task, completed=done, total=total)
            if self._total is not None:
                # A retried upload starts again from 0: the total goes back with it.
                self._progress.advance(self._total, delta)

        def finish(ok: bool) -> None:
            with self._lock:
                self.finished += 1
            if self.files > 1:
                # Many files: keep the screen to the ones in flight plus the total.
                self._progress.remove_task(task)
                if self._total is not None:
                    self._progress.update(self._total, description=self._total_label())
            elif ok:
                self._progress.update(task, completed=size or seen)

        return update, finish
