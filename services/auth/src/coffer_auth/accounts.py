"""Accounts: registration, sign-in, re-authentication, password change and reset.

Each of these hashes or verifies a password (about 140 ms): they read, hash in a worker
thread (at most ``HASH_CONCURRENCY`` at once), then write, never holding a transaction
across the hash. A sign-in costs exactly one verification, unknown emails included.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from anyio import CapacityLimiter
from sqlalchemy import delete, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from coffer_auth import audit, devices, errors, invitations, passwords, sessions, tx, upload_tokens
from coffer_auth.audit import Actor
from coffer_auth.config import Settings
from coffer_auth.models import DashboardSession, Membership, Organization, PasswordReset, User
from coffer_auth.schemas import (
    LoginIn,
    LoginOut,
    PasswordChangedOut,
    PasswordChangeIn,
    RegisterIn,
    ResetDoneOut,
    ResetPreviewOut,
    UserOut,
)
from coffer_auth.sessions import Lifetimes
from coffer_auth.tokens import RESET_ID, RESET_PREFIX, new_token
from coffer_kit.contract.errors import not_found, unauthorized
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.timeutil import as_utc, utcnow

log = logging.getLogger("coffer.auth")


@dataclass(frozen=True, slots=True)
class Accounts:
    """What the account operations need from the app."""

    engine: Engine
    settings: Settings
    limiter: CapacityLimiter

    @property
    def lifetimes(self) -> Lifetimes:
        return Lifetimes.of(self.settings)


def user_view(user: User) -> UserOut:
    return UserOut(
        id=user.id,
        email=user.email,
        created_at=user.created_at,
        email_verified_at=user.email_verified_at,
        password_changed_at=user.password_changed_at,
    )


def _login_out(
    row: DashboardSession, token: str, user: User, lifetimes: Lifetimes, *, device_token: str | None = None
) -> LoginOut:
    return LoginOut(
        token=token,
        csrf_token=row.csrf_token,
        session=sessions.view(row, lifetimes, current_id=row.id),
        user=user_view(user),
        device_token=device_token,
    )


def _org_names(session: Session, user_id: str) -> list[str]:
    return list(
        session.exec(
            select(Organization.name)
            .join(Membership, Membership.organization_id == Organization.id)  # type: ignore[arg-type]
            .where(Membership.user_id == user_id)
        )
    )


# Re-entering a password in a session (re-authentication, a password change) counts against
# the session's network alone: it takes a session, which no guesser spread over networks has.
def _network(client: str) -> list[tuple[str, int]]:
    return [(client, sessions.THROTTLE_AFTER)]


async def _attempt(accounts: Accounts, *, email: str, counters: list[tuple[str, int]]) -> None:
    """Count an attempt at this email's password (known email or not: no enumeration) before
    it is checked, so attempts made at once are all counted; 429 while any count is blocked.
    The success clears what it counted (``sessions.clear_failures``)."""
    wait = await tx.write(
        accounts.engine, lambda s: sessions.attempt(s, email=email, counters=counters, now=utcnow())
    )
    if wait is not None:
        log.info("login refused", extra={"event": "login", "outcome": "throttled", "client": counters[0][0]})
        raise errors.throttled(wait)


async def register(accounts: Accounts, body: RegisterIn, actor: Actor) -> LoginOut:
    """Create an account and its first session (sign-up mode permitting)."""
    mode = accounts.settings.signup
    if mode == "closed":
        raise errors.signup_closed()
    if mode == "invite" and not body.invitation_token_hash:
        raise errors.signup_closed("Sign-up is by invitation only: open the link an owner gave you.")
    email = invitations.valid_email(body.email)
    token_hash = body.invitation_token_hash

    def check(session: Session) -> str | None:
        if sessions.user_by_email(session, email) is not None:
            raise errors.conflict("email_taken", "An account with this email exists. Sign in instead.")
        if token_hash is None:
            return None
        inv, org = invitations.pending_by_hash(session, token_hash=token_hash)
        invitations.check_for(inv, email)
        return org.name

    org_name = await tx.read(accounts.engine, check)
    passwords.check_strength(body.password, context=[email, "coffer", org_name or ""])
    password_hash = await passwords.run_hash(accounts.limiter, body.password)

    def create(session: Session) -> LoginOut:
        user = User.new(email=email, password_hash=password_hash)
        session.add(user)
        try:
            session.flush()
        except IntegrityError:
            raise errors.conflict(
                "email_taken", "An account with this email exists. Sign in instead."
            ) from None
        audit.record_user(session, actor.named(id=user.id, label=user.email), "user.registered", user)
        row, token = sessions.create(
            session, user_id=user.id, lifetimes=accounts.lifetimes, ip=body.ip, user_agent=body.user_agent
        )
        known = devices.remember(session, user_id=user.id, token=None)
        return _login_out(row, token, user, accounts.lifetimes, device_token=known)

    out = await tx.write(accounts.engine, create)
    log.info("registered", extra={"event": "register", "user_id": out.user.id})
    return out


async def login(accounts: Accounts, body: LoginIn, *, replaces: str | None) -> LoginOut:
    """Check a password and open a new session; ``replaces`` (a session hash) is ended."""
    client = sessions.client_of(body.ip)
    if len(sessions.normalize_email(body.email)) > sessions.MAX_EMAIL_CHARS:
        # No account has such an address (registration bounds it after lower-casing, which
        # can lengthen it: "İ" is two characters then), and the throttle's column holds 320.
        raise errors.wrong_credentials()
    device = await tx.read(
        accounts.engine, lambda s: devices.recognized(s, body.device_token, email=body.email)
    )
    counters = sessions.counters(client, device)
    await _attempt(accounts, email=body.email, counters=counters)
    user = await tx.read(accounts.engine, lambda s: sessions.user_by_email(s, body.email))
    ok, rehash = await passwords.run_verify(
        accounts.limiter, user.password_hash if user else None, body.password
    )
    if user is None or not ok:
        log.info(
            "login failed",
            extra={"event": "login", "outcome": "failed", "user_id": user.id if user else None},
        )
        raise errors.wrong_credentials()
    user_id, checked = user.id, user.password_hash

    def open_session(session: Session) -> LoginOut:
        current = _still_checked(session, user_id, checked)
        if current is None:  # deleted, or its password changed or reset, since the check
            raise errors.wrong_credentials()
        sessions.clear_failures(session, email=current.email, clients=[c for c, _ in counters])
        if rehash is not None:
            current.password_hash = rehash
            session.add(current)
        if replaces:
            # A new session at every sign-in (no fixation): the browser's previous one ends.
            session.execute(
                delete(DashboardSession).where(col(DashboardSession.token_hash) == replaces.lower())
            )
        row, token = sessions.create(
            session, user_id=user_id, lifetimes=accounts.lifetimes, ip=body.ip, user_agent=body.user_agent
        )
        known = devices.remember(session, user_id=user_id, token=body.device_token if device else None)
        return _login_out(row, token, current, accounts.lifetimes, device_token=known)

    out = await tx.write(accounts.engine, open_session)
    log.info("login", extra={"event": "login", "outcome": "ok", "user_id": user_id})
    return out


async def reauth(accounts: Accounts, *, token_hash: str, password: str, actor: Actor) -> LoginOut:
    """Re-enter the password: a new session (new token and CSRF token) replaces this one."""
    lifetimes = accounts.lifetimes
    row, user = await tx.read(
        accounts.engine, lambda s: sessions.resolve(s, token_hash=token_hash, lifetimes=lifetimes)
    )
    counters = _network(sessions.client_of(actor.ip))
    await _attempt(accounts, email=user.email, counters=counters)
    ok, rehash = await passwords.run_verify(accounts.limiter, user.password_hash, password)
    if not ok:
        raise errors.wrong_password()

    def renew(session: Session) -> LoginOut:
        current = _still_checked(session, user.id, user.password_hash)
        old = session.get(DashboardSession, row.id)
        if old is None:
            raise unauthorized("The session has ended. Sign in again.")
        if current is None:  # changed since the check: not the account's password now
            raise errors.wrong_password()
        sessions.clear_failures(session, email=current.email, clients=[c for c, _ in counters])
        if rehash is not None:
            current.password_hash = rehash
            session.add(current)
        return _replaced(session, old, current, actor, lifetimes)

    return await tx.write(accounts.engine, renew)


def _still_checked(session: Session, user_id: str, checked: str) -> User | None:
    """The user, locked until the transaction ends, if the password hash is still the one a
    password was just checked against (outside it: hashing takes its time); else None. A
    sign-in checked before a reset or change, its session opened after it, would outlive the
    reset that ends every session, and its rehash write the old password back."""
    current = session.get(User, user_id, with_for_update=True)
    return current if current is not None and current.password_hash == checked else None


def _replaced(
    session: Session, old: DashboardSession, user: User, actor: Actor, lifetimes: Lifetimes
) -> LoginOut:
    """A new session (new token and CSRF token) in place of ``old``, whose user has just
    entered their password (a re-authentication, a password change). It is the same browser:
    the upload tokens minted in ``old`` move to the new session, and its resumable uploads go
    on (they end with the session they name: ``upload_tokens._session_lives``)."""
    session.delete(old)
    session.flush()
    new, token = sessions.create(
        session,
        user_id=user.id,
        lifetimes=lifetimes,
        ip=actor.ip or old.ip,
        user_agent=actor.user_agent or old.user_agent,
        last_org_id=old.last_org_id,
    )
    upload_tokens.move_session(session, old_id=old.id, new_id=new.id)
    return _login_out(new, token, user, lifetimes)


async def change_password(
    accounts: Accounts, *, token_hash: str, body: PasswordChangeIn, actor: Actor
) -> PasswordChangedOut:
    """Change the password (the current one is required); other sessions end unless kept. It
    re-authenticates: a new session (new token and CSRF token) replaces this one."""
    lifetimes = accounts.lifetimes

    def who(session: Session) -> tuple[DashboardSession, User, list[str]]:
        row, user = sessions.resolve(session, token_hash=token_hash, lifetimes=lifetimes)
        return row, user, _org_names(session, user.id)

    row, user, org_names = await tx.read(accounts.engine, who)
    counters = _network(sessions.client_of(actor.ip))
    await _attempt(accounts, email=user.email, counters=counters)
    ok, _ = await passwords.run_verify(accounts.limiter, user.password_hash, body.current)
    if not ok:
        raise errors.wrong_password()
    clients = [client for client, _ in counters]  # the right password: a weak new one is no guess
    await tx.write(accounts.engine, lambda s: sessions.clear_failures(s, email=user.email, clients=clients))
    passwords.check_strength(body.new, context=[user.email, "coffer", *org_names])
    new_hash = await passwords.run_hash(accounts.limiter, body.new)

    def apply(session: Session) -> PasswordChangedOut:
        current = session.get(User, user.id)
        old = session.get(DashboardSession, row.id)
        if current is None or old is None:
            raise unauthorized("The session has ended. Sign in again.")
        current.password_hash = new_hash
        current.password_changed_at = utcnow()
        sessions.clear_failures(session, email=current.email)
        session.add(current)
        _end_resets(session, user_id=current.id, now=current.password_changed_at)
        revoked = sessions.revoke_all(session, user_id=current.id, keep=old.id) if body.revoke_others else 0
        login = _replaced(session, old, current, actor, lifetimes)
        # Whoever knew the old password signed in somewhere: no browser stays known but this one.
        devices.forget(session, user_id=current.id)
        login.device_token = devices.remember(session, user_id=current.id, token=None)
        audit.record_user(
            session, actor, "user.password_changed", current, details={"sessionsRevoked": revoked}
        )
        return PasswordChangedOut(revoked=revoked, **dict(login))

    return await tx.write(accounts.engine, apply)


# --- password reset (operator CLI now; self-service once there is a mailer) ---------------


def _end_resets(session: Session, *, user_id: str, now: datetime) -> None:
    """Mark every unused reset link of the user used: a new password, or a newer link, ends the
    links issued before it (a forwarded or leaked mail would set the password again)."""
    session.exec(
        update(PasswordReset)
        .where(col(PasswordReset.user_id) == user_id, col(PasswordReset.used_at).is_(None))
        .values(used_at=now)
    )


def create_reset(
    session: Session, *, user: User, ttl: timedelta, created_by: str
) -> tuple[PasswordReset, str]:
    """A single-use reset token for ``user`` (returned once; stored as its SHA-256); the
    user's earlier links end."""
    now = utcnow()
    _end_resets(session, user_id=user.id, now=now)
    token, token_hash = new_token(RESET_PREFIX)
    reset = PasswordReset(
        id=new_id(RESET_ID),
        user_id=user.id,
        token_hash=token_hash,
        created_at=now,
        expires_at=now + ttl,
        created_by=created_by,
    )
    session.add(reset)
    session.flush()
    return reset, token


def _usable_reset(session: Session, token_hash: str) -> tuple[PasswordReset, User]:
    found = session.exec(
        select(PasswordReset, User)
        .join(User, User.id == PasswordReset.user_id)  # type: ignore[arg-type]
        .where(PasswordReset.token_hash == token_hash.lower())
    ).first()
    if found is None:
        raise not_found("This reset link is not valid.")
    reset, user = found
    if reset.used_at is not None:
        raise errors.gone(
            "reset_gone", "This reset link was used already. Ask your operator for a new one.", "used"
        )
    if as_utc(reset.expires_at) <= utcnow():
        raise errors.gone(
            "reset_gone", "This reset link has expired. Ask your operator for a new one.", "expired"
        )
    return reset, user


async def preview_reset(accounts: Accounts, *, token_hash: str) -> ResetPreviewOut:
    def look(session: Session) -> ResetPreviewOut:
        reset, user = _usable_reset(session, token_hash)
        return ResetPreviewOut(email=user.email, expires_at=reset.expires_at)

    return await tx.read(accounts.engine, look)


async def consume_reset(accounts: Accounts, *, token_hash: str, password: str, actor: Actor) -> ResetDoneOut:
    """Set a new password through a reset link: single use, and every session ends."""

    def look(session: Session) -> tuple[User, list[str]]:
        _, user = _usable_reset(session, token_hash)
        return user, _org_names(session, user.id)

    user, org_names = await tx.read(accounts.engine, look)
    passwords.check_strength(password, context=[user.email, "coffer", *org_names])
    new_hash = await passwords.run_hash(accounts.limiter, password)

    def apply(session: Session) -> ResetDoneOut:
        # Lock the token row: of two concurrent uses, the second sees used_at and gets 410.
        session.exec(
            select(PasswordReset).where(PasswordReset.token_hash == token_hash.lower()).with_for_update()
        ).first()
        _, current = _usable_reset(session, token_hash)
        now = utcnow()
        _end_resets(session, user_id=current.id, now=now)  # this one, and any other
        current.password_hash = new_hash
        current.password_changed_at = now
        sessions.clear_failures(session, email=current.email)
        devices.forget(session, user_id=current.id)
        session.add(current)
        session.flush()
        revoked = sessions.revoke_all(session, user_id=current.id)
        audit.record_user(
            session,
            actor.named(id=current.id, label=current.email),
            "user.password_changed",
            current,
            details={"via": "reset", "sessionsRevoked": revoked},
        )
        return ResetDoneOut(user_id=current.id, email=current.email, revoked_sessions=revoked)

    return await tx.write(accounts.engine, apply)
