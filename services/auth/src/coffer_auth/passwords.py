"""Passwords: argon2id hashing with bounded concurrency, and the strength rules."""

from __future__ import annotations

import re
import threading
from typing import Any

import anyio.to_thread
from anyio import CapacityLimiter
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from coffer_auth.errors import weak_password
from coffer_kit.contract.errors import invalid
from coffer_kit.contract.limits import PASSWORD_MAX_CHARS

# argon2-cffi's defaults (argon2id, m = 64 MiB, t = 3, p = 4): one hash takes about 140 ms and
# 64 MiB here, so at most HASH_CONCURRENCY run at once per process (256 MiB, two cores busy).
HASHER = PasswordHasher()
HASH_CONCURRENCY = 4
MIN_LENGTH = 8
MAX_LENGTH = PASSWORD_MAX_CHARS
# zxcvbn refuses longer input (and its matching grows with the length); the first 72
# characters decide the score.
_ZXCVBN_MAX = 72
MIN_SCORE = 2

_dummy_lock = threading.Lock()
_dummy_hash: str | None = None


def new_limiter() -> CapacityLimiter:
    """The worker threads password hashing may use at once (one per app, made in its lifespan)."""
    return CapacityLimiter(HASH_CONCURRENCY)


def check_strength(password: str, *, context: list[str]) -> None:
    """Refuse passwords outside 8..1024 characters, common ones and zxcvbn scores below 2."""
    if len(password) < MIN_LENGTH:
        raise invalid(f"The password must be at least {MIN_LENGTH} characters.", field="password")
    if len(password) > MAX_LENGTH:
        raise invalid(f"The password must be at most {MAX_LENGTH} characters.", field="password")
    # Imported on first use: its dictionaries hold RSS that an auth process which only checks
    # keys (the hot path) never needs (bench/results/journal.md, "Issue 16, round 3: idle RSS
    # and CPU per request").
    from zxcvbn import zxcvbn  # type: ignore[import-untyped]

    result = zxcvbn(password[:_ZXCVBN_MAX], user_inputs=_words(context))
    score = int(result["score"])
    if score < MIN_SCORE:
        feedback: dict[str, Any] = result["feedback"]
        warning = str(feedback.get("warning") or "")
        suggestions = [str(s) for s in feedback.get("suggestions") or []]
        message = warning or "This password is too easy to guess."
        raise weak_password(message, {"score": score, "warning": warning, "suggestions": suggestions})


def _words(context: list[str]) -> list[str]:
    """The context and its parts: "ada.l@acme.io" also gives "ada", "acme" (zxcvbn matches
    whole inputs only)."""
    words: set[str] = set()
    for phrase in context:
        phrase = phrase.strip().lower()
        if phrase:
            words.add(phrase)
            words.update(p for p in re.split(r"[^a-z0-9]+", phrase) if len(p) >= 3)
    return sorted(words)


def hash_password(password: str) -> str:
    """argon2id hash (blocking: call through :func:`run` from async code)."""
    return HASHER.hash(password)


def dummy_hash() -> str:
    """A hash of nothing anyone knows, to verify against when the email is unknown."""
    global _dummy_hash
    with _dummy_lock:
        if _dummy_hash is None:
            import secrets

            _dummy_hash = HASHER.hash(secrets.token_urlsafe(32))
        return _dummy_hash


def verify(password_hash: str | None, password: str) -> tuple[bool, str | None]:
    """Whether ``password`` matches, and a new hash when the stored one's parameters are old.

    An unknown user (``password_hash`` None) costs the same verification, against a dummy
    hash, so the time taken does not tell whether an email is registered.
    """
    try:
        ok = HASHER.verify(password_hash or dummy_hash(), password)
    except (VerificationError, InvalidHashError):
        return False, None
    if password_hash is None:
        return False, None
    rehash = hash_password(password) if HASHER.check_needs_rehash(password_hash) else None
    return ok, rehash


async def run_verify(
    limiter: CapacityLimiter, password_hash: str | None, password: str
) -> tuple[bool, str | None]:
    """:func:`verify` in a worker thread, at most ``limiter`` at once."""
    return await anyio.to_thread.run_sync(verify, password_hash, password, limiter=limiter)


async def run_hash(limiter: CapacityLimiter, password: str) -> str:
    """:func:`hash_password` in a worker thread, at most ``limiter`` at once."""
    return await anyio.to_thread.run_sync(hash_password, password, limiter=limiter)
