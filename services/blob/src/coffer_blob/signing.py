"""Signed CDN URLs: HMAC-SHA256 over the key and the expiry, with a secret only blob knows."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

# Versioned domain tag, then NUL-separated fields: expires is digits only and keys never
# contain NUL, so no two (key, expires) pairs share a message.
_DOMAIN = b"coffer-cdn-url-v1"
# A transformed URL (CONTRACT §10) signs the transform's canonical form too, under its own tag,
# so an untransformed URL's signature is unchanged and never valid for any transform.
_DOMAIN_TRANSFORM = b"coffer-cdn-url-transform-v1"
_EXPIRES = re.compile(r"0|[1-9][0-9]{0,11}")  # canonical: one URL per expiry (fullmatch)


def signature(secret: bytes, key: str, expires: int, transform: str = "") -> str:
    """base64url (no padding) of HMAC-SHA256(secret, tag NUL expires NUL key [NUL transform]).

    ``transform`` is the canonical form (``coffer_kit.contract.transforms.spec_of``);
    empty for the original.
    """
    fields: tuple[bytes, ...]
    if transform:
        fields = (_DOMAIN_TRANSFORM, str(expires).encode(), transform.encode(), key.encode())
    else:
        fields = (_DOMAIN, str(expires).encode(), key.encode())
    message = b"\x00".join(fields)
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def check(secret: bytes, key: str, expires: str, sent: str, *, now: float, transform: str = "") -> str | None:
    """Why a signed request must be refused, or None when it is valid and unexpired."""
    if not _EXPIRES.fullmatch(expires):  # ($ of match took "123\n" too)
        return "The signed URL is malformed."
    expected = signature(secret, key, int(expires), transform)
    # Constant time over the whole value, whatever the sender put in it.
    if not hmac.compare_digest(expected.encode(), sent.encode("utf-8", "surrogateescape")):
        return "The URL signature is not valid."
    if int(expires) <= now:
        return "The signed URL has expired."
    return None
