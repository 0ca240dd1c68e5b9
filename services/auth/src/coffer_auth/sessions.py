"""Dashboard sessions: creation at sign-in, resolution, lifetimes, re-authentication, revocation,
and the sign-in throttle (per email and client network, per account for browsers it does not
know)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, update
from sqlmodel import Session, col, select

from coffer_auth import errors
from coffer_auth.config import Settings
from coffer_auth.models import DashboardSession, LoginThrottle, User
from coffer_auth.schemas import SessionOut
from coffer_auth.tokens import SESSION_ID, SESSION_PREFIX, new_csrf_token, new_token
from coffer_kit.contract import scopes
from coffer_kit.contract.errors import unauthorized
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.timeutil import as_utc, utcnow

# Like a key's last_used_at: writing last_seen_at on every page would make each read a write.
SEEN_RESOLUTION = timedelta(seconds=60)

# Sign-in throttle (ASVS 6.3.1 without a malicious lockout), per email and client: after
# THROTTLE_AFTER failures within THROTTLE_WINDOW, that client is refused for FIRST_BLOCK,
# doubling with each further failure up to MAX_BLOCK; a success resets it. Another client,
# the account's owner at home, is never refused for someone else's guesses.
THROTTLE_AFTER = 5
THROTTLE_WINDOW = timedelta(minutes=15)
FIRST_BLOCK = timedelta(seconds=30)
MAX_BLOCK = timedelta(minutes=15)
# A guesser spread over many networks: failures from browsers the account does not know
# (``coffer_auth.devices``) also count for the account as a whole (``ANY_CLIENT``), and past
# this many within THROTTLE_WINDOW every such browser waits, on the same doubling blocks. The
# account's known browsers count only their own: none is refused for another's guesses.
ACCOUNT_AFTER = 20
ANY_CLIENT = "*"


@dataclass(frozen=True, slots=True)
class Lifetimes:
    idle: timedelta
    max_age: timedelta
    reauth: timedelta

    @classmethod
    def of(cls, settings: Settings) -> Lifetimes:
        return cls(
            idle=timedelta(seconds=settings.dashboard_session_idle_seconds),
            max_age=timedelta(seconds=settings.dashboard_session_max_age_seconds),
            reauth=timedelta(seconds=settings.dashboard_reauth_seconds),
        )


# An email address's bound, normalised (the columns that hold one are this wide).
MAX_EMAIL_CHARS = 320


def normalize_email(email: str) -> str:
    return email.strip().lower()


def user_by_email(session: Session, email: str) -> User | None:
    return session.exec(select(User).where(User.email == normalize_email(email))).first()


# --- throttling --------------------------------------------------------------------------


def client_of(ip: str | None) -> str:
    """The client a throttle counts against: the address edge saw (through trusted proxies),
    an IPv6 one as its /64 (``scopes.client_network``)."""
    return scopes.client_network(ip)[:64]


def counters(client: str, device: str | None) -> list[tuple[str, int]]:
    """What a sign-in's failures count against, each with the failures before it blocks: a
    known browser (``device``) its own count; any other its network's and the account's."""
    if device is not None:
        return [(device, THROTTLE_AFTER)]
    return [(client, THROTTLE_AFTER), (ANY_CLIENT, ACCOUNT_AFTER)]


def attempt(
    session: Session, *, email: str, counters: Sequence[tuple[str, int]], now: datetime
) -> int | None:
    """Count a sign-in attempt before its password is checked (a success clears it again), each
    count's row locked, so attempts made at once are all counted; answers the seconds to wait
    instead while any of the counts is blocked (and counts nothing)."""
    email = normalize_email(email)
    rows = [_locked(session, email, client, now) for client, _ in counters]
    waits = [
        (as_utc(row.blocked_until) - now).total_seconds() for row in rows if row.blocked_until is not None
    ]
    if (left := max(waits, default=0)) > 0:
        return math.ceil(left)
    for row, (_, after) in zip(rows, counters, strict=True):
        _count(row, after, now)
        session.add(row)
    session.flush()
    return None


def record_failure(session: Session, *, email: str, client: str, after: int = THROTTLE_AFTER) -> int | None:
    """Count a wrong password (known email or not) against ``client``, which blocks from the
    ``after``-th; answers the block it starts, in seconds."""
    now = utcnow()
    row = _locked(session, normalize_email(email), client, now)
    block = _count(row, after, now)
    session.add(row)
    session.flush()
    return math.ceil(block.total_seconds()) if block else None


def _locked(session: Session, email: str, client: str, now: datetime) -> LoginThrottle:
    """The count of ``email`` at ``client``, locked for the transaction (made if there is none:
    an insert that lets a concurrent one win, then the row whoever made it)."""
    row = session.get(LoginThrottle, (email, client), with_for_update=True)
    if row is not None:
        return row
    # Rows long past their last block go when a new count starts; none outlives it by much.
    old = delete(LoginThrottle).where(col(LoginThrottle.last_failed_at) < now - THROTTLE_WINDOW - MAX_BLOCK)
    # (Not matched against the rows this session holds: SQLite's times come back naive.)
    session.exec(old.execution_options(synchronize_session=False))
    values = {"email": email, "client": client, "failures": 0, "last_failed_at": now}
    # (Imported here: auth loads no PostgreSQL dialect before it talks to PostgreSQL.)
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        session.execute(postgresql.insert(LoginThrottle).values(**values).on_conflict_do_nothing())
    else:
        from sqlalchemy.dialects import sqlite

        session.execute(sqlite.insert(LoginThrottle).values(**values).on_conflict_do_nothing())
    found = session.get(LoginThrottle, (email, client), with_for_update=True, populate_existing=True)
    assert found is not None
    return found


def _count(row: LoginThrottle, after: int, now: datetime) -> timedelta | None:
    """One more failure on ``row``; the block it starts, if any. The count starts again only
    after THROTTLE_WINDOW without a failure or a block: a guesser who sits out the longest
    block finds the count where it was, and waits that long after each further guess."""
    quiet_since = as_utc(row.last_failed_at)
    if row.blocked_until is not None:
        quiet_since = max(quiet_since, as_utc(row.blocked_until))
    if now - quiet_since > THROTTLE_WINDOW:
        row.failures = 0
    row.failures += 1
    row.last_failed_at = now
    if row.failures < after:
        return None
    # (The exponent is bounded first: 2 ** failures overflows a timedelta past about 60.)
    block: timedelta = min(FIRST_BLOCK * 2 ** min(row.failures - after, 16), MAX_BLOCK)
    row.blocked_until = now + block
    return block


def clear_failures(session: Session, *, email: str, clients: Sequence[str] | None = None) -> None:
    """A success clears what it counted against; a new password (``clients`` None) clears
    every count of the email."""
    query = delete(LoginThrottle).where(col(LoginThrottle.email) == normalize_email(email))
    if clients is not None:
        query = query.where(col(LoginThrottle.client).in_(clients))
    session.exec(query)


# --- sessions ----------------------------------------------------------------------------


def create(
    session: Session,
    *,
    user_id: str,
    lifetimes: Lifetimes,
    ip: str | None,
    user_agent: str | None,
    last_org_id: str | None = None,
) -> tuple[DashboardSession, str]:
    """A new session (and its token, returned once) for a user who just entered their password."""
    now = utcnow()
    token, token_hash = new_token(SESSION_PREFIX)
    if last_org_id is None:
        # Carry the organization last worked in over from the user's previous session.
        previous = session.exec(
            select(DashboardSession)
            .where(DashboardSession.user_id == user_id, col(DashboardSession.last_org_id).is_not(None))
            .order_by(col(DashboardSession.last_seen_at).desc())
        ).first()
        last_org_id = previous.last_org_id if previous else None
    row = DashboardSession(
        id=new_id(SESSION_ID),
        token_hash=token_hash,
        user_id=user_id,
        csrf_token=new_csrf_token(),
        created_at=now,
        last_seen_at=now,
        authenticated_at=now,
        expires_at=now + lifetimes.max_age,
        ip=(ip or None) and ip[:64],
        user_agent=(user_agent or None) and user_agent[:255],
        last_org_id=last_org_id,
    )
    session.add(row)
    session.flush()
    return row, token


def _live(row: DashboardSession, lifetimes: Lifetimes, now: datetime) -> bool:
    return as_utc(row.expires_at) > now and as_utc(row.last_seen_at) + lifetimes.idle > now


def resolve(session: Session, *, token_hash: str, lifetimes: Lifetimes) -> tuple[DashboardSession, User]:
    """The live session with this token hash and its user, or 401."""
    found = session.exec(
        select(DashboardSession, User)
        .join(User, col(User.id) == DashboardSession.user_id)
        .where(DashboardSession.token_hash == token_hash.lower())
    ).first()
    if found is None:
        raise unauthorized("The session is unknown or has ended. Sign in again.")
    row, user = found
    if not _live(row, lifetimes, utcnow()):
        raise unauthorized("The session has expired. Sign in again.")
    return row, user


def touch(session: Session, *, row: DashboardSession, last_org_id: str | None = None) -> bool:
    """Record activity (at most once per SEEN_RESOLUTION) and the organization being viewed."""
    now = utcnow()
    values: dict[str, object] = {}
    if now - as_utc(row.last_seen_at) >= SEEN_RESOLUTION:
        values["last_seen_at"] = now
    if last_org_id is not None and last_org_id != row.last_org_id:
        values["last_org_id"] = last_org_id
    if not values:
        return False
    session.execute(update(DashboardSession).where(col(DashboardSession.id) == row.id).values(**values))
    return True


def require_sudo(row: DashboardSession, lifetimes: Lifetimes) -> None:
    """Refuse unless the password was entered in this session within the re-auth window."""
    if as_utc(row.authenticated_at) + lifetimes.reauth <= utcnow():
        raise errors.reauth_required()


def view(row: DashboardSession, lifetimes: Lifetimes, *, current_id: str | None) -> SessionOut:
    last_seen = as_utc(row.last_seen_at)
    return SessionOut(
        id=row.id,
        created_at=row.created_at,
        last_seen_at=last_seen,
        authenticated_at=row.authenticated_at,
        expires_at=row.expires_at,
        idle_expires_at=min(last_seen + lifetimes.idle, as_utc(row.expires_at)),
        reauth_until=as_utc(row.authenticated_at) + lifetimes.reauth,
        ip=row.ip,
        user_agent=row.user_agent,
        last_org_id=row.last_org_id,
        current=row.id == current_id,
    )


def list_live(session: Session, *, user_id: str, lifetimes: Lifetimes) -> list[DashboardSession]:
    now = utcnow()
    rows = session.exec(
        select(DashboardSession)
        .where(DashboardSession.user_id == user_id)
        .order_by(col(DashboardSession.created_at).desc())
    )
    return [r for r in rows if _live(r, lifetimes, now)]


def revoke(session: Session, *, user_id: str, session_id: str) -> bool:
    """End one of the user's sessions; False if there is no such session of theirs."""
    result = session.execute(
        delete(DashboardSession).where(
            col(DashboardSession.id) == session_id, col(DashboardSession.user_id) == user_id
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def revoke_all(session: Session, *, user_id: str, keep: str | None = None) -> int:
    """End every session of a user (but ``keep``); answers how many ended."""
    query = delete(DashboardSession).where(col(DashboardSession.user_id) == user_id)
    if keep is not None:
        query = query.where(col(DashboardSession.id) != keep)
    return int(session.execute(query).rowcount or 0)  # type: ignore[attr-defined]


def sweep(session: Session, *, lifetimes: Lifetimes) -> int:
    """Delete sessions past their absolute end or idle for longer than allowed."""
    now = utcnow()
    result = session.execute(
        delete(DashboardSession).where(
            or_(
                col(DashboardSession.expires_at) <= now,
                col(DashboardSession.last_seen_at) <= now - lifetimes.idle,
            )
        )
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
