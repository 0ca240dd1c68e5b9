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
    from streaming_form_data.parser import ParseFailedException, parse_content_boundary
    from streaming_form_data.targets import BaseTarget
finally:
    for _name in _hidden:
        if sys.modules.get(_name, False) is None:
            del sys.modules[_name]

__all__ = ["BaseTarget", "BoundaryParser", "ParseFailedException", "parse_content_boundary"]


class BoundaryParser(StreamingFormDataParser):  # type: ignore[misc]
    """The library's parser, made from a boundary the caller has already parsed.

    Its own constructor parses the Content-Type header again, through ``email``'s header
    registry: 0.6 ms per upload on the shared bench machine (a tenth of blob's CPU for a
    4 KiB upload), spent twice when blob also needs the boundary. This is that constructor
    with the parse left out (streaming-form-data 2.1).
    """

    def __init__(self, boundary: bytes) -> None:
        self.headers: dict[str, str] = {}
        self._parser = _Parser(b"\r\n--" + boundary + b"\r\n", b"\r\n--" + boundary + b"--", False)
        self._running = False
