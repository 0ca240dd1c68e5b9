"""Public CDN URLs of storage keys (CONTRACT §4)."""

from __future__ import annotations

from urllib.parse import quote

# Files larger than this are refused with 413 file_too_large (CONTRACT §3, §7).
MAX_FILE_BYTES = 100 * 1024 * 1024


def public_url(cdn_url: str, key: str) -> str:
    """``{cdn_url}/`` and the key, each segment percent-encoded per RFC 3986."""
    return cdn_url.rstrip("/") + "/" + "/".join(quote(segment, safe="") for segment in key.split("/"))
