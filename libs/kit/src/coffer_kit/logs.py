"""Logs: one line per record, with whatever context the caller attached.

JSON lines by default (what a log pipeline reads); on a terminal, aligned lines coloured by
level (what ``make run`` shows a person). ``COFFER_LOG_FORMAT=json|console`` picks either.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from itertools import islice
from typing import Any, Literal, TextIO

LogFormat = Literal["json", "console"]

# Attributes every LogRecord has; anything else was passed through ``extra=`` and is context.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


# A record's __init__ sets the standard attributes first, then makeRecord adds ``extra``'s:
# the context starts after this many (one access line per request: half the scan).
_STANDARD_COUNT = len(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


def _context(record: logging.LogRecord) -> dict[str, Any]:
    """What the caller attached to a record through ``extra=``."""
    attributes = islice(vars(record).items(), _STANDARD_COUNT, None)
    return {k: v for k, v in attributes if k not in _STANDARD and not k.startswith("_")}


# json.dumps(out, default=str, ensure_ascii=False) builds this encoder anew on every call.
_ENCODER = json.JSONEncoder(default=str, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (timestamps in UTC).

    Every request writes one line (the access log), so the line is built cheaply: the
    timestamp's seconds are formatted once per second, the encoder is built once.
    """

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service
        self._second: tuple[int, str] = (-1, "")

    def _stamp(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        cached = self._second
        if cached[0] != second:
            # One tuple, replaced whole: a formatter shared by threads never pairs stale parts.
            cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(second)))
            self._second = cached
        return f"{cached[1]}.{int(record.msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self._stamp(record),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_context(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return _ENCODER.encode(out)


JsonFormatter.converter = time.gmtime

_COLOURS = {
    "DEBUG": "\x1b[2m",  # dim
    "INFO": "\x1b[32m",  # green
    "WARNING": "\x1b[33m",  # yellow
    "ERROR": "\x1b[31m",  # red
    "CRITICAL": "\x1b[1;31m",  # bold red
}
_RESET = "\x1b[0m"
_DIM = "\x1b[2m"


class ConsoleFormatter(logging.Formatter):
    """One aligned line per record for a person at a terminal: local time, level (coloured),
    service, message, then the context as ``key=value``; a request reads as
    ``GET /api/assets 200 3.1ms``."""

    def __init__(self, service: str, *, colour: bool = True) -> None:
        super().__init__()
        self.service = service
        self.colour = colour

    def format(self, record: logging.LogRecord) -> str:
        context = {k: v for k, v in _context(record).items() if v is not None}
        message = record.getMessage()
        if record.name == "coffer.access" and {"method", "route", "status"} <= context.keys():
            message = f"{context.pop('method')} {context.pop('route')} {context.pop('status')}"
            if "duration_ms" in context:
                message += f" {context.pop('duration_ms')}ms"
        stamp = self.formatTime(record, "%H:%M:%S") + f".{int(record.msecs):03d}"
        level = f"{record.levelname:<8}"
        if self.colour:
            level = _COLOURS.get(record.levelname, "") + level + _RESET
        line = f"{stamp} {level} {self.service:<8} {message:<32}"
        if context:
            pairs = " ".join(f"{k}={v}" for k, v in context.items())
            line += f" {_DIM}{pairs}{_RESET}" if self.colour else f" {pairs}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line.rstrip()


def log_format(stream: TextIO, requested: str | None = None) -> LogFormat:
    """``requested`` (or ``COFFER_LOG_FORMAT``) if set; else console on a terminal, JSON elsewhere."""
    chosen = (requested or os.environ.get("COFFER_LOG_FORMAT") or "").strip().lower()
    if chosen in ("json", "console"):
        return "json" if chosen == "json" else "console"
    if chosen:
        raise ValueError(f"COFFER_LOG_FORMAT must be json or console, not {chosen!r}")
    return "console" if stream.isatty() else "json"


def configure_logging(service: str, level: str = "INFO", format: str | None = None) -> None:
    """Send every logger, uvicorn's included, to stderr: JSON lines, or console lines on a
    terminal (see :func:`log_format`)."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format(sys.stderr, format) == "console":
        handler.setFormatter(ConsoleFormatter(service, colour=not os.environ.get("NO_COLOR")))
    else:
        handler.setFormatter(JsonFormatter(service))
    # Neither format writes a record's source line, thread or process, so no record gathers
    # them: finding the caller walks the stack on every line, one access line per request
    # (the logging HOWTO's "Optimization" section names these switches).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Our own middleware writes one line per request; uvicorn's access log would duplicate it.
    logging.getLogger("uvicorn.access").disabled = True
