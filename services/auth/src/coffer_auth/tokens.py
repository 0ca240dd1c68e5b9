"""Session, invitation and reset tokens: 256 random bits, recognisable prefixes, SHA-256 at rest."""

from __future__ import annotations

import secrets

from coffer_auth.keys import hash_key

# Row ids of the dashboard's tables (the contract's own prefixes are in coffer_kit.contract.ids).
SESSION_ID = "ses"
INVITATION_ID = "inv"
RESET_ID = "rst"

# Secrets: recognisable, so that a leak is easy to find (and the e2e log checks look for them).
SESSION_PREFIX = "cof_ses_"
INVITATION_PREFIX = "cof_inv_"
RESET_PREFIX = "cof_rst_"


def new_token(prefix: str) -> tuple[str, str]:
    """A fresh token and its SHA-256 hex (what is stored and what edge sends back)."""
    token = prefix + secrets.token_urlsafe(32)
    return token, hash_key(token)


def new_csrf_token() -> str:
    """The per-session synchronizer token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)
