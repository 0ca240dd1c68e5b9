"""API key material: generation, display prefix, hashing."""

from __future__ import annotations

import hashlib
import secrets
import string

_BASE62 = string.digits + string.ascii_letters
# 32 base62 characters carry ~190 bits of randomness (the contract asks for at least 128).
_SECRET_LENGTH = 32
PREFIXES = {"organization": "cof_org_", "user": "cof_usr_"}


def generate_key(kind: str) -> str:
    """A new key: a recognisable per-kind prefix, then base62 randomness."""
    return PREFIXES[kind] + "".join(secrets.choice(_BASE62) for _ in range(_SECRET_LENGTH))


def hash_key(key: str) -> str:
    """SHA-256 hex of a key, as stored and as edge sends it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def display_prefix(key: str) -> str:
    """Enough of the key to recognise it in a list, never enough to use it."""
    return key[: len(PREFIXES["organization"]) + 4]
