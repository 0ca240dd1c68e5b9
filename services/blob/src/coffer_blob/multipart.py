"""The multipart/form-data parser blob streams uploads through: python-multipart's (Starlette's
own, already here for FastAPI), through its public API only, each part handed to a target
registered under its name.

It replaced streaming-form-data, which blob drove through a private class (``_Parser``, built
by hand to skip an ``email`` header parse per upload) and imported with smart_open's remote
transports hidden in ``sys.modules`` (its ``targets`` module imports smart_open, which
imports boto3 and requests): either would break silently on an upgrade (issue 28). Measured
in one process on 64 KiB writes, a small upload's body parses much quicker here and a 100 MiB
one a little slower, a small part of its upload's time (bench/results/journal.md, "Figures
moved out of code comments").

Part heads are bounded before any byte reaches the parser (``uploads._PartHeads``), so what
this keeps of a head is bounded too.
"""

from __future__ import annotations

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from coffer_kit.contract.limits import MAX_BOUNDARY_CHARS

__all__ = ["ParseFailed", "PartRouter", "Target", "parse_boundary"]


class ParseFailed(Exception):
    """The body cannot be split into parts."""


def parse_boundary(content_type: str) -> bytes:
    """The boundary of a ``multipart/form-data`` Content-Type; ParseFailed when it is another
    type, or names none or one longer than RFC 2046 allows (``MAX_BOUNDARY_CHARS``)."""
    media_type, params = parse_options_header(content_type)
    boundary = params.get(b"boundary", b"").rstrip()
    if media_type != b"multipart/form-data" or not boundary:
        raise ParseFailed("not multipart/form-data with a boundary")
    if len(boundary) > MAX_BOUNDARY_CHARS:
        raise ParseFailed(f"a boundary longer than {MAX_BOUNDARY_CHARS} characters")
    return boundary


class Target:
    """One part's receiver: ``on_start`` once its head is read (``multipart_filename`` and
    ``multipart_content_type`` set from it), ``on_data_received`` for each piece of its
    bytes, ``on_finish`` when the boundary after it went by."""

    def __init__(self) -> None:
        self.multipart_filename: str | None = None
        self.multipart_content_type: str | None = None

    def start(self, filename: str | None, content_type: str | None) -> None:
        self.multipart_filename, self.multipart_content_type = filename, content_type
        self.on_start()

    def on_start(self) -> None:
        pass

    def on_data_received(self, chunk: bytes) -> None:
        pass

    def on_finish(self) -> None:
        pass


def _text(raw: bytes) -> str:
    """A head's value as sent: UTF-8 (RFC 7578 §4.2, what browsers send). UnicodeDecodeError
    for anything else, which the caller refuses: a Latin-1 name cannot be read back reliably."""
    return raw.decode("utf-8")


class PartRouter:
    """python-multipart's streaming parser, handing each part to the target registered under
    the part's ``name`` (others to the fallback)."""

    def __init__(self, boundary: bytes, targets: dict[str, Target], fallback: Target) -> None:
        self.targets, self.fallback = targets, fallback
        self._field, self._value = bytearray(), bytearray()
        self._headers: dict[bytes, bytes] = {}
        self._current: Target | None = None
        try:
            self._parser = MultipartParser(
                boundary,
                {
                    "on_part_begin": self._begin,
                    "on_header_field": self._header_field,
                    "on_header_value": self._header_value,
                    "on_header_end": self._header_end,
                    "on_headers_finished": self._headers_finished,
                    "on_part_data": self._data,
                    "on_part_end": self._end,
                },
            )
        except FormParserError as exc:  # a boundary it cannot take (parse_boundary refuses it first)
            raise ParseFailed(str(exc)) from None

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.write(data)
        except FormParserError as exc:  # MultipartParseError, and any other refusal of the parser's
            raise ParseFailed(str(exc)) from None

    def _begin(self) -> None:
        self._headers.clear()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers[bytes(self._field).lower()] = bytes(self._value)
        self._field.clear()
        self._value.clear()

    def _headers_finished(self) -> None:
        # Bytes in, bytes out: python-multipart reads bytes as Latin-1 and writes them back.
        _, params = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = _text(params.get(b"name", b""))
        filename = _text(params[b"filename"]) if b"filename" in params else None
        content_type = self._headers.get(b"content-type")
        self._current = self.targets.get(name, self.fallback)
        self._current.start(filename, _text(content_type).strip() if content_type is not None else None)

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._current is not None:
            self._current.on_data_received(data[start:end])

    def _end(self) -> None:
        if self._current is not None:
            self._current.on_finish()
            self._current = None
