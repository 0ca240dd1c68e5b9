"""Webhook signing secrets: made, kept encrypted at rest, and used to sign (Standard Webhooks).

A secret must sign every delivery (HMAC), so it is stored recoverable, not hashed: encrypted
with AES-GCM under a key derived from COFFER_METADATA_WEBHOOK_SECRET_KEY, so a copy of the
database alone (a backup, a replica) reveals none.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on first use: see SecretBox._cipher
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "whsec_"
# 32 random bytes: the HMAC-SHA256 key (Standard Webhooks allows 24 to 64).
SECRET_BYTES = 32
# The stored form's version, so the scheme can change without guessing.
_SEALED = "v1:"
_NONCE_BYTES = 12
# Binds a ciphertext to its purpose: a sealed secret cannot stand for another kind of value.
_AAD = b"coffer-webhook-secret"


def new_secret() -> str:
    """A fresh signing secret as the caller sees it: ``whsec_`` and base64 of random bytes."""
    return PREFIX + base64.b64encode(os.urandom(SECRET_BYTES)).decode()


class SecretBox:
    """Seals and opens secrets with the operator's key."""

    def __init__(self, key: str) -> None:
        # The setting is any string of at least 32 characters; AES-256 needs 32 bytes.
        self._key = hashlib.sha256(key.encode()).digest()
        self._aead: AESGCM | None = None

    def _cipher(self) -> AESGCM:
        # cryptography is imported on the first seal or open, not at start: idle RSS (its Rust
        # extension mostly; bench/results/journal.md, "Figures moved out of code comments") that
        # metadata's API needs only to create or rotate an endpoint, and the dispatcher only once
        # a delivery is due.
        if self._aead is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(self._key)
        return self._aead

    def seal(self, secret: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = nonce + self._cipher().encrypt(nonce, secret.encode(), _AAD)
        return _SEALED + base64.b64encode(sealed).decode()

    def open(self, sealed: str) -> str:
        if not sealed.startswith(_SEALED):
            raise ValueError("unknown sealed secret format")
        raw = base64.b64decode(sealed.removeprefix(_SEALED))
        return self._cipher().decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _AAD).decode()


def signature(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` entry of one secret: ``v1,`` and base64 HMAC-SHA256 of
    ``id.timestamp.body`` keyed with the secret's bytes (Standard Webhooks, symmetric)."""
    key = base64.b64decode(secret.removeprefix(PREFIX))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def signatures(secrets: list[str], *, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: one entry per secret that signs now, space-separated
    (during a rotation both the new and the previous secret sign)."""
    return " ".join(signature(s, msg_id=msg_id, timestamp=timestamp, body=body) for s in secrets)
