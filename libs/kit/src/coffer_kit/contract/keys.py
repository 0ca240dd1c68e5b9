"""Storage keys, file names and media types (docs/contract.md §4).

A key is ``{organizationId}/{assetId}/{filename}``. The filename is the uploaded name made
safe for every storage backend and for URLs:

- NFC-normalised;
- path separators (``/``, ``\\``), control characters (Unicode category Cc: U+0000–U+001F,
  U+007F–U+009F) and ``?``, ``#``, ``%`` replaced by ``-``; Unicode letters, spaces and the
  extension are kept;
- an empty name, ``.`` or ``..`` becomes ``file``;
- capped at 255 UTF-8 bytes (the ext4 and S3-friendly limit), keeping a short extension.

Sanitising is idempotent, so a key is valid exactly when its filename is its own sanitised
form. Since ``%`` never survives, names starting with ``%`` are free for the storage
driver's own files (metadata sidecars, temp files): no key can ever address them.
"""

from __future__ import annotations

import functools
import mimetypes
import re
import unicodedata

from coffer_kit.contract import urls
from coffer_kit.contract.ids import is_asset_id, is_org_id

MAX_FILENAME_BYTES = 255
# An extension longer than this is not worth keeping when a name must be shortened.
_MAX_EXT_BYTES = 32
FALLBACK_FILENAME = "file"
OCTET_STREAM = "application/octet-stream"

_UNSAFE = re.compile(r"[/\\?#%\x00-\x1f\x7f-\x9f]")
# RFC 9110 token characters, for type and subtype.
_MEDIA_TYPE = re.compile(r"^[!#$%&'*+.^_`|~0-9a-z-]{1,63}/[!#$%&'*+.^_`|~0-9a-z-]{1,127}$")


@functools.cache
def _types() -> mimetypes.MimeTypes:
    """mimetypes' built-in table only, so a guess is the same on every machine (no
    /etc/mime.types); built at the first guess (0.35 MiB a process that names no file lacks)."""
    return mimetypes.MimeTypes()


# A guessed "encoding" means a compressed file: name the compressed format, not what is inside.
_COMPRESSED = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}


def sanitize_filename(name: str | None) -> str:
    """The key's filename segment for an uploaded file name (rules in the module docstring)."""
    cleaned = _UNSAFE.sub("-", unicodedata.normalize("NFC", name or ""))
    if cleaned in ("", ".", ".."):
        return FALLBACK_FILENAME
    return _cap(cleaned)


def _cap(name: str) -> str:
    if len(name.encode()) <= MAX_FILENAME_BYTES:
        return name
    stem, dot, ext = name.rpartition(".")
    suffix = dot + ext if stem and 0 < len(ext.encode()) <= _MAX_EXT_BYTES else ""
    if not suffix:
        stem = name
    room = MAX_FILENAME_BYTES - len(suffix.encode())
    # Cut at a character boundary: a partial UTF-8 sequence at the end is dropped.
    return stem.encode()[:room].decode("utf-8", "ignore") + suffix


def object_key(org_id: str, asset_id: str, filename: str | None) -> str:
    return urls.object_key(org_id, asset_id, sanitize_filename(filename))


def valid_ids(org_id: str, asset_id: str) -> bool:
    return is_org_id(org_id) and is_asset_id(asset_id)


def is_valid_key(key: str) -> bool:
    """True for keys blob can have made: ``org_…/ast_…/<sanitised filename>``."""
    parts = urls.split_key(key)
    return parts is not None and sanitize_filename(parts[2]) == parts[2]


def media_type(declared: str | None) -> str | None:
    """The media type (``type/subtype``, lower case, parameters dropped) of a declared value."""
    if not declared:
        return None
    value = declared.split(";", 1)[0].strip().lower()
    return value if _MEDIA_TYPE.match(value) else None


def choose_mime_type(declared: str | None, filename: str) -> str:
    """docs/contract.md §4: the declared type unless absent or octet-stream, else a guess, else octet-stream.

    Parameters (``; charset=…``) are dropped and a malformed declared value counts as absent.
    """
    declared_type = media_type(declared)
    if declared_type and declared_type != OCTET_STREAM:
        return declared_type
    guessed, encoding = _types().guess_type(filename, strict=False)
    if encoding:
        return _COMPRESSED.get(encoding, OCTET_STREAM)
    return guessed or OCTET_STREAM


def named(org_id: str, asset_id: str, filename: str | None, declared: str | None) -> tuple[str, str]:
    """The key and media type a resumable upload's file gets at its creation in edge: those a
    multipart upload's gets in blob (``object_key``, ``choose_mime_type``)."""
    return object_key(org_id, asset_id, filename), choose_mime_type(declared, sanitize_filename(filename))


_ACTIVE_TYPES = {
    "text/html",
    "text/xsl",
    "text/vnd.wap.wml",
    "application/x-shockwave-flash",
    "application/x-httpd-php",
}
_ACTIVE_WORDS = ("html", "xml", "javascript", "ecmascript", "jscript", "livescript")


def is_active_content(content_type: str) -> bool:
    """HTML, XHTML, SVG, XML (``+xml`` too), JavaScript/ECMAScript: a browser may run script in it."""
    value = media_type(content_type)
    if value is None:
        return True  # unknown shape: assume the worst
    subtype = value.split("/", 1)[1]
    return value in _ACTIVE_TYPES or any(word in subtype for word in _ACTIVE_WORDS)
