"""Log lines: JSON for pipelines, aligned console lines for a person at a terminal."""

from __future__ import annotations

import io
import json
import logging

import pytest

from coffer_kit.logs import ConsoleFormatter, JsonFormatter, log_format


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def access_record() -> logging.LogRecord:
    record = logging.LogRecord("coffer.access", logging.INFO, __file__, 1, "request", None, None)
    extra = {"request_id": "req_1", "trace_id": None, "method": "GET", "route": "/api/assets"}
    for key, value in {**extra, "status": 200, "duration_ms": 3.1}.items():
        setattr(record, key, value)
    return record


def test_the_format_follows_the_terminal_unless_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COFFER_LOG_FORMAT", raising=False)
    assert log_format(io.StringIO()) == "json"
    assert log_format(Terminal()) == "console"
    assert log_format(Terminal(), "json") == "json"
    monkeypatch.setenv("COFFER_LOG_FORMAT", "console")
    assert log_format(io.StringIO()) == "console"
    monkeypatch.setenv("COFFER_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="json or console"):
        log_format(io.StringIO())


def test_json_lines_carry_the_context() -> None:
    line = json.loads(JsonFormatter("edge").format(access_record()))
    assert line["msg"] == "request" and line["service"] == "edge" and line["level"] == "info"
    assert line["route"] == "/api/assets" and line["status"] == 200
    assert line["ts"].endswith("Z")


def test_console_lines_are_aligned_and_coloured_by_level() -> None:
    plain = ConsoleFormatter("edge", colour=False)
    line = plain.format(access_record())
    assert "\n" not in line
    fields = line.split()
    assert fields[1:7] == ["INFO", "edge", "GET", "/api/assets", "200", "3.1ms"]
    assert fields[-1] == "request_id=req_1"  # None values are left out
    warning = logging.LogRecord("coffer.x", logging.WARNING, __file__, 1, "slow", None, None)
    assert plain.format(warning).index("edge") == line.index("edge")  # aligned across levels
    assert "\x1b[33m" in ConsoleFormatter("edge").format(warning)
    assert "\x1b[" not in line
