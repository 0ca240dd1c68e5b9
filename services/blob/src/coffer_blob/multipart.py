"""streaming-form-data's parser, imported without smart_open's remote transports.

streaming-form-data's ``targets`` module imports smart_open, and smart_open's import
registers every transport it knows, importing each one's client library when installed:
S3 (boto3, botocore), HTTP and WebHDFS (requests), GCS, Azure, SSH. Blob uses the parser and
``BaseTarget`` only, never smart_open; boto3 is installed for blob's own S3 driver, which
imports it when that driver is chosen. Those transport modules are hidden during this one
import (a ``None`` entry in ``sys.modules`` makes their import raise ImportError, which
smart_open takes for "not installed"), which keeps about 17 MiB of boto3, botocore and
requests out of a disk-backed blob process. smart_open itself then opens local files only.
"""

from __future__ import annotations

import sys

from python_multipart.multipart import parse_options_header

_REMOTE_TRANSPORTS = (
    "smart_open.s3",
    "smart_open.http",
    "smart_open.webhdfs",
    "smart_open.gcs",
    "smart_open.azure",
    "smart_open.ssh",
    "smart_open.ftp",
    "smart_open.hdfs",
)

_hidden = [name for name in _REMOTE_TRANSPORTS if "smart_open" not in sys.modules and name not in sys.modules]
for _name in _hidden:
    sys.modules[_name] = None  # type: ignore[assignment]
try:
    from streaming_form_data import StreamingFormDataParser
    from streaming_form_data._parser import _Parser
    from streaming_form_data.parser import ParseFailedException
    from streaming_form_data.targets import BaseTarget
finally:
    for _name in _hidden:
        if sys.modules.get(_name, False) is None:
            del sys.modules[_name]

__all__ = ["BaseTarget", "BoundaryParser", "ParseFailedException", "parse_boundary"]


def parse_boundary(content_type: str) -> bytes:
    """The boundary of a ``multipart/form-data`` Content-Type; ParseFailedException when it
    is another type or names none.

    python-multipart's header parser (Starlette's), not streaming-form-data's, which builds
    an ``email`` message for it: 146 µs against 7, once per upload.
    """
    media_type, params = parse_options_header(content_type)
    boundary = params.get(b"boundary", b"").rstrip()  # as email's get_boundary
    if media_type != b"multipart/form-data" or not boundary:
        raise ParseFailedException("not multipart/form-data with a boundary")
    return boundary


class BoundaryParser(StreamingFormDataParser):  # type: ignore[misc]
    """The library's parser, made from a boundary :func:`parse_boundary` has parsed.

    Its own constructor parses the Content-Type header through ``email``'s header registry
    (see :func:`parse_boundary`), and blob needs the boundary itself as well. This is that
    constructor with the parse left out (streaming-form-data 2.1).
    """

    def __init__(self, boundary: bytes) -> None:
        self.headers: dict[str, str] = {}
        self._parser = _Parser(b"\r\n--" + boundary + b"\r\n", b"\r\n--" + boundary + b"--", False)
        self._running = False
