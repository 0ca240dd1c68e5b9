"""Known browsers: how the sign-in throttle bounds a guesser spread over many networks
without letting anyone lock the owner out (OWASP's "device cookies").

Failed sign-ins are counted per email and client network (``sessions``): one guesser waits
after five, the owner elsewhere does not. A guesser spread over many networks never would.
So a sign-in from a browser the account has not signed in from also counts for the account
as a whole, and past ``sessions.ACCOUNT_AFTER`` such failures every such browser waits. A
browser that has signed in holds a device token (a cookie edge keeps, only its hash stored
here) and counts only its own failures: the owner's browsers are never refused for someone
else's guesses.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from sqlalchemy import Column, DateTime, ForeignKey, String, delete
from sqlmodel import Field, Session, SQLModel, col, select

from coffer_auth.models import User
from coffer_kit.contract.timeutil import as_utc, utcnow

PREFIX = "cof_dev_"
# A token is its prefix and 256 random bits; anything longer is not one.
MAX_TOKEN_CHARS = 64
# The browsers one user keeps known: the most recently used.
MAX_PER_USER = 20
# Unused this long, a browser is unknown again.
LIFETIME = timedelta(days=365)
# A known browser's last use is written at most this often (a sign-in is rare; still a write).
TOUCH_EVERY = timedelta(hours=1)
# What the throttle counts a known browser's failures under (``LoginThrottle.client``).
THROTTLE_PREFIX = "dev:"


class KnownDevice(SQLModel, table=True):
    """A browser a user signed in from: the SHA-256 of the token in its cookie."""

    __tablename__ = "known_devices"

    token_hash: str = Field(sa_column=Column(String(64), primary_key=True))
    user_id: str = Field(
        sa_column=Column(String(40), ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True)
    )
    last_used_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))


TABLES = [KnownDevice.__table__]  # type: ignore[attr-defined]


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def recognized(session: Session, token: str | None, *, email: str) -> str | None:
    """The throttle's name for this browser when it holds a live device token of the account
    with ``email``; None for any other (no token, another account's, forged, expired)."""
    if not token or not token.startswith(PREFIX) or len(token) > MAX_TOKEN_CHARS:
        return None
    row = session.get(KnownDevice, _hash(token))
    if row is None or utcnow() - as_utc(row.last_used_at) > LIFETIME:
        return None
    user = session.get(User, row.user_id)
    if user is None or user.email != email.strip().lower():
        return None
    return THROTTLE_PREFIX + row.token_hash[:32]


def forget(session: Session, *, user_id: str) -> None:
    """No browser of the user stays known (a new password: whoever knew the old one may have
    signed in somewhere)."""
    session.exec(delete(KnownDevice).where(col(KnownDevice.user_id) == user_id))


def remember(session: Session, *, user_id: str, token: str | None) -> str | None:
    """After a sign-in with the right password: a browser already known by ``token`` is
    touched (None answered: its cookie stays); any other is given a new token, answered once.
    A user keeps the MAX_PER_USER most recently used."""
    now = utcnow()
    if token is not None and len(token) <= MAX_TOKEN_CHARS:
        row = session.get(KnownDevice, _hash(token))
        if row is not None and row.user_id == user_id:
            if now - as_utc(row.last_used_at) > TOUCH_EVERY:
                row.last_used_at = now
                session.add(row)
            return None
    new = PREFIX + secrets.token_urlsafe(32)
    session.add(KnownDevice(token_hash=_hash(new), user_id=user_id, last_used_at=now))
    session.flush()
    older = (
        select(KnownDevice.token_hash)
        .where(KnownDevice.user_id == user_id)
        .order_by(col(KnownDevice.last_used_at).desc(), col(KnownDevice.token_hash))
        .offset(MAX_PER_USER)
    )
    if dropped := list(session.exec(older)):
        session.exec(delete(KnownDevice).where(col(KnownDevice.token_hash).in_(dropped)))
    return new
