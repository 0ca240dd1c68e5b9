"""Auth tables: users, organizations, memberships, API keys."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, Column, DateTime, ForeignKey, String, UniqueConstraint
from sqlmodel import Field, SQLModel


def _ts(nullable: bool = False, index: bool = False) -> Column:  # type: ignore[type-arg]
    return Column(DateTime(timezone=True), nullable=nullable, index=index)


class Role(StrEnum):
    owner = "owner"
    member = "member"


class KeyKind(StrEnum):
    organization = "organization"
    user = "user"


class User(SQLModel, table=True):
    __tablename__ = "users"

    id: str = Field(primary_key=True, max_length=40)
    email: str = Field(sa_column=Column(String(320), unique=True, nullable=False))
    password_hash: str = Field(max_length=255)
    created_at: datetime = Field(sa_column=_ts())


class Organization(SQLModel, table=True):
    __tablename__ = "organizations"

    id: str = Field(primary_key=True, max_length=40)
    name: str = Field(max_length=255)
    quota_bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = Field(sa_column=_ts())


class Membership(SQLModel, table=True):
    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("organization_id", "user_id"),)

    id: int | None = Field(default=None, primary_key=True)
    organization_id: str = Field(
        sa_column=Column(String(40), ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False)
    )
    user_id: str = Field(
        sa_column=Column(String(40), ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True)
    )
    role: str = Field(max_length=16)
    created_at: datetime = Field(sa_column=_ts())


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_keys"

    id: str = Field(primary_key=True, max_length=40)
    # SHA-256 of the full key, hex. The key itself is never stored.
    key_hash: str = Field(sa_column=Column(String(64), unique=True, nullable=False))
    prefix: str = Field(max_length=32)
    kind: str = Field(max_length=16)
    name: str = Field(max_length=255)
    organization_id: str = Field(
        sa_column=Column(
            String(40), ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False, index=True
        )
    )
    user_id: str | None = Field(
        default=None,
        sa_column=Column(String(40), ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
    )
    created_at: datetime = Field(sa_column=_ts())
    expires_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    last_used_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))


TABLES = [t.__table__ for t in (User, Organization, Membership, ApiKey)]  # type: ignore[attr-defined]
