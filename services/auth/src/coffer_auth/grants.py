"""Signed URLs die with their authority (docs/security.md, "Signed URLs").

A signed URL is made under ``key:<id>`` or ``user:<id>``. Whatever ends such an authority in
an organization (a key deleted, a member removed) queues it here, in the same transaction, so
that no revocation is lost between auth's commit and blob's store: edge relays the queue to
blob (``GET /internal/v1/grant-revocations``), then acknowledges what blob stored
(``POST .../relayed``), and the acknowledged rows go. A rotation ends no authority, nor does a
sign-out: they queue nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Column, DateTime, Integer, String, delete
from sqlmodel import Field, Session, SQLModel, col, select

from coffer_auth.models import ApiKey, KeyKind, Membership
from coffer_kit.contract.timeutil import as_utc, utcnow
from coffer_kit.contract.wire import GrantRevocation


class RevokedGrant(SQLModel, table=True):
    """An authority that stopped acting in an organization, until blob has stored it."""

    __tablename__ = "grant_revocations"
    # AUTOINCREMENT on SQLite: a seq acknowledged late by a second edge must never name a row
    # queued since (SQLite's plain rowid hands out the largest one again once it is deleted).
    __table_args__ = {"sqlite_autoincrement": True}

    seq: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True))
    # No foreign key: an organization's row is gone before or after, it matters not.
    organization_id: str = Field(sa_column=Column(String(40), nullable=False))
    authority: str = Field(sa_column=Column(String(80), nullable=False))
    revoked_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))


TABLES = [RevokedGrant.__table__]  # type: ignore[attr-defined]


def keys_deleted(session: Session, keys: Sequence[ApiKey]) -> None:
    """Queue the keys about to be deleted, each with the keys it replaced (their URLs passed
    to it), in every organization it acts in."""
    entries: list[tuple[str, str]] = []
    for key in keys:
        lineage = _lineage(key)
        entries += [(org_id, authority) for org_id in _acts_in(session, key) for authority in lineage]
    _queue(session, entries)


def member_removed(session: Session, *, org_id: str, user_id: str) -> None:
    """Queue a member removed from an organization: their dashboard's URLs there, and their
    personal keys' (which act in every organization of their user, this one no longer)."""
    personal = list(
        session.exec(select(ApiKey).where(ApiKey.user_id == user_id, ApiKey.kind == KeyKind.user))
    )
    authorities = [f"user:{user_id}", *(a for key in personal for a in _lineage(key))]
    _queue(session, ((org_id, a) for a in authorities))


def pending(session: Session, *, limit: int) -> list[GrantRevocation]:
    """The oldest ``limit`` queued revocations (seq order), as edge relays them."""
    rows = session.exec(select(RevokedGrant).order_by(col(RevokedGrant.seq)).limit(limit))
    return [
        GrantRevocation(
            seq=row.seq or 0,
            organization_id=row.organization_id,
            authority=row.authority,
            # Floored: blob refuses URLs issued at or before it, so the second it began counts.
            revoked_at=int(as_utc(row.revoked_at).timestamp()),
        )
        for row in rows
    ]


def relayed(session: Session, seqs: Sequence[int]) -> int:
    """Delete the revocations blob has stored; unknown seqs are ignored (an acknowledgement
    repeated, or two edges relaying the same batch). Answers the rows deleted."""
    if not seqs:
        return 0
    result = session.exec(delete(RevokedGrant).where(col(RevokedGrant.seq).in_(set(seqs))))
    return int(result.rowcount)


def _queue(session: Session, entries: Iterable[tuple[str, str]]) -> None:
    now = utcnow()
    for org_id, authority in dict.fromkeys(entries):  # each once, in order
        session.add(RevokedGrant(organization_id=org_id, authority=authority, revoked_at=now))
    session.flush()


def _acts_in(session: Session, key: ApiKey) -> list[str]:
    """The organizations a key makes URLs in: its own for an organization key; every
    organization of its user, now, for a personal key (``upload_tokens._minter``)."""
    if key.kind == KeyKind.organization:
        return [key.organization_id]
    return list(session.exec(select(Membership.organization_id).where(Membership.user_id == key.user_id)))


def _lineage(key: ApiKey) -> list[str]:
    """``key:<id>`` of the key and of each key it replaced, newest first: a rotation hands the
    old key's URLs on to the new one (the ids are kept on the key, its predecessors' rows may
    be gone)."""
    return [f"key:{key_id}" for key_id in key.lineage()]
