"""Signed CDN URLs: HMAC-SHA256 over the key and the expiry, with a secret only blob knows.

A URL made under an authority (``SignIn.by``: an API key or a dashboard member) also carries
``by=<tag>.<issued>``: the authority's grant tag and the second it was made, covered by the
signature, so the CDN can refuse it once that authority is revoked (``coffer_blob.grants``).
"""

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
# A URL with ``by`` signs it too, under tags of their own: a v1 URL's signature is unchanged,
# and ``by`` cannot be added to one, stripped from one, or changed.
_DOMAIN_BY = b"coffer-cdn-url-v2"
_DOMAIN_TRANSFORM_BY = b"coffer-cdn-url-transform-v2"
# The tag of a message, by (transformed, with ``by``).
_DOMAINS = {
    (False, False): _DOMAIN,
    (True, False): _DOMAIN_TRANSFORM,
    (False, True): _DOMAIN_BY,
    (True, True): _DOMAIN_TRANSFORM_BY,
}
# The grant tag's own domain: no signature and no tag share a message.
_DOMAIN_GRANT = b"coffer-cdn-grant-v1"
_SECONDS = r"0|[1-9][0-9]{0,11}"  # canonical: one URL per value (fullmatch)
_EXPIRES = re.compile(_SECONDS)
# 22 base64url characters: 128 bits of the tag's HMAC, enough that no two authorities share one.
TAG_CHARS = 22
_BY = re.compile(rf"([A-Za-z0-9_-]{{{TAG_CHARS}}})\.({_SECONDS})")


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def grant_tag(secret: bytes, org_id: str, authority: str) -> str:
    """The tag a URL made under ``authority`` in ``org_id`` carries: it names neither (the
    URL is a bearer link), and only blob, with the secret, can tell which one it is."""
    message = b"\x00".join((_DOMAIN_GRANT, org_id.encode(), authority.encode()))
    return _b64(hmac.new(secret, message, hashlib.sha256).digest())[:TAG_CHARS]


def by_value(tag: str, issued: int) -> str:
    """The ``by`` parameter of a URL made at ``issued`` (unix seconds) under ``tag``."""
    return f"{tag}.{issued}"


def parse_by(value: str) -> tuple[str, int] | None:
    """(tag, issued) of a ``by`` parameter, or None when it is malformed."""
    match = _BY.fullmatch(value)
    return (match.group(1), int(match.group(2))) if match else None


def signature(secret: bytes, key: str, expires: int, transform: str = "", by: str = "") -> str:
    """base64url (no padding) of HMAC-SHA256(secret, tag NUL expires [NUL transform] [NUL by] NUL key).

    ``transform`` is the canonical form (``coffer_kit.contract.transforms.spec_of``);
    empty for the original. ``by`` is the ``by`` parameter; empty for a URL without one, which
    keeps the v1 tags (and so the signatures of every URL made before ``by`` existed).
    """
    domain = _DOMAINS[bool(transform), bool(by)]
    fields = (domain, str(expires).encode(), *(f.encode() for f in (transform, by) if f), key.encode())
    digest = hmac.new(secret, b"\x00".join(fields), hashlib.sha256).digest()
    return _b64(digest)


def check(
    secret: bytes,
    key: str,
    expires: str,
    sent: str,
    *,
    now: float,
    transform: str = "",
    by: str | None = None,
) -> str | None:
    """Why a signed request must be refused, or None when it is valid and unexpired.

    ``by``: the URL's ``by`` parameter, None when it has none. Whether its authority was
    revoked is the caller's to ask, once this has passed (a look-up only for genuine URLs).
    """
    if not _EXPIRES.fullmatch(expires):  # ($ of match took "123\n" too)
        return "The signed URL is malformed."
    if by is not None and parse_by(by) is None:
        return "The signed URL is malformed."
    expected = signature(secret, key, int(expires), transform, by or "")
    # Constant time over the whole value, whatever the sender put in it.
    if not hmac.compare_digest(expected.encode(), sent.encode("utf-8", "surrogateescape")):
        return "The URL signature is not valid."
    if int(expires) <= now:
        return "The signed URL has expired."
    return None
