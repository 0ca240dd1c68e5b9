"""Auth tables: users, organizations, memberships, API keys; dashboard sessions, invitations,
password resets and the audit log."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlmodel import Field, SQLModel, col

from coffer_kit.contract.ids import USER, new_id
from coffer_kit.contract.media import IngestMode, ScanMode
from coffer_kit.contract.timeutil import utcnow
from coffer_kit.contract.wire import Ingest

# Rotations followed along ``ApiKey.rotated_from_key_id``, from a token's key to the key acting
# now (upload_tokens).
MAX_ROTATIONS_FOLLOWED = 32
# The replaced keys a key remembers (``ApiKey.replaced_key_ids``): a hundred rotations within
# the week a signed URL lives.
MAX_LINEAGE = 100


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
    email_verified_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    password_changed_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))

    @classmethod
    def new(cls, *, email: str, password_hash: str) -> User:
        """A new account: its password set now."""
        now = utcnow()
        return cls(
            id=new_id(USER), email=email, password_hash=password_hash, created_at=now, password_changed_at=now
        )


class Organization(SQLModel, table=True):
    __tablename__ = "organizations"

    id: str = Field(primary_key=True, max_length=40)
    name: str = Field(max_length=255)
    quota_bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = Field(sa_column=_ts())
    # CONTRACT §12: 'public' or 'private', for uploads that do not say (owners and the
    # operator change it).
    default_visibility: str = Field(
        default="public", sa_column=Column(String(16), nullable=False, server_default="public")
    )
    # Safe ingest (issue 48): 'record' or 'enforce'; the allowed media ranges (comma-separated,
    # None: any); malware scanning 'off', 'async' or 'block'. The operator and owners change them.
    ingest_mode: str = Field(
        default="record", sa_column=Column(String(16), nullable=False, server_default="record")
    )
    allowed_types: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    scan_mode: str = Field(default="off", sa_column=Column(String(16), nullable=False, server_default="off"))
    # A change of ``scan_mode`` holds or releases the files stored before it (edge's scan
    # relay, coffer_edge.scans): due from the change on (a claim moves it past a lease); each
    # change, and each sync that ended on an older one, counts a generation, and only a sync of
    # the current generation ends the job. Indexed: the claim reads the few that are due.
    scan_sync_due_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True, index=True))
    scan_sync_generation: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default="0")
    )
    # Issue 47: days a deleted asset stays in the trash (0-90; 0: no trash, deletes are final).
    trash_retention_days: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default="0")
    )

    def ingest(self) -> Ingest:
        allowed = self.allowed_types.split(",") if self.allowed_types is not None else None
        return Ingest(
            mode=cast(IngestMode, self.ingest_mode),
            allowed_types=allowed,
            scan=cast(ScanMode, self.scan_mode),
        )


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
    # Who made it in the dashboard (null: the operator's CLI, or a user since deleted).
    created_by_user_id: str | None = Field(
        default=None,
        sa_column=Column(String(40), ForeignKey("users.id", ondelete="SET NULL"), nullable=True),
    )
    # Issue 46, fixed at creation and kept by a rotation: the actions and bundles
    # (coffer_kit.contract.scopes) space-separated, the folder subtree it is confined to, and the
    # client networks (CIDRs, space-separated) it may be used from.
    scopes: str = Field(default="full", sa_column=Column(String(512), nullable=False, server_default="full"))
    folder_id: str | None = Field(default=None, sa_column=Column(String(40), nullable=True))
    networks: str = Field(default="", sa_column=Column(String(1200), nullable=False, server_default=""))
    # The key that made it through the key API (null: a dashboard user or the operator): it is
    # deleted with that key (apikeys.delete), and follows it through a rotation.
    parent_key_id: str | None = Field(
        default=None,
        sa_column=Column(
            String(40), ForeignKey("api_keys.id", ondelete="CASCADE"), nullable=True, index=True
        ),
    )
    # The key a rotation replaced with this one (no foreign key: that key is deleted at once or
    # after its grace). The upload tokens and uploads it minted follow it here.
    rotated_from_key_id: str | None = Field(
        default=None, sa_column=Column(String(40), nullable=True, index=True)
    )
    # Every key it replaced through rotations, newest first, space-separated (at most
    # MAX_LINEAGE): kept here because a rotation without grace deletes the old key's row, and
    # the signed URLs they made die with this key (coffer_auth.grants).
    replaced_key_ids: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))

    def lineage(self) -> list[str]:
        """This key's id, then those of the keys it replaced, newest first."""
        return [self.id, *self.replaced_key_ids.split()]


class KeyUse(SQLModel, table=True):
    """When a key last acted in an organization: a personal key acts in every organization of
    its user, so each organization's Keys page shows the use made in it (issue 23)."""

    __tablename__ = "key_uses"

    key_id: str = Field(
        sa_column=Column(String(40), ForeignKey("api_keys.id", ondelete="CASCADE"), primary_key=True)
    )
    organization_id: str = Field(
        sa_column=Column(String(40), ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    )
    last_used_at: datetime = Field(sa_column=_ts())


class LoginThrottle(SQLModel, table=True):
    """Wrong passwords for one email from one client (issue 23): keyed by both, so a guesser
    is slowed without locking the account's owner out, and an unknown email is throttled
    exactly like a known one (no account enumeration). Works across replicas without Redis.
    ``client`` is a network, ``*`` (every browser the account does not know) or a known
    browser (``coffer_auth.devices``)."""

    __tablename__ = "login_throttles"

    email: str = Field(sa_column=Column(String(320), primary_key=True))
    client: str = Field(sa_column=Column(String(64), primary_key=True))
    failures: int = Field(sa_column=Column(Integer, nullable=False))
    last_failed_at: datetime = Field(sa_column=_ts(index=True))
    blocked_until: datetime | None = Field(default=None, sa_column=_ts(nullable=True))


class DashboardSession(SQLModel, table=True):
    """A signed-in browser. Only the SHA-256 of its cookie value is stored."""

    __tablename__ = "sessions"

    id: str = Field(primary_key=True, max_length=40)
    token_hash: str = Field(sa_column=Column(String(64), unique=True, nullable=False))
    user_id: str = Field(
        sa_column=Column(String(40), ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True)
    )
    csrf_token: str = Field(max_length=64)
    created_at: datetime = Field(sa_column=_ts())
    # Written at most once a minute, like a key's last_used_at.
    last_seen_at: datetime = Field(sa_column=_ts())
    # When the password was last entered in this session (the re-authentication window).
    authenticated_at: datetime = Field(sa_column=_ts())
    expires_at: datetime = Field(sa_column=_ts())
    ip: str | None = Field(default=None, max_length=64)
    user_agent: str | None = Field(default=None, max_length=255)
    last_org_id: str | None = Field(default=None, max_length=40)


class Invitation(SQLModel, table=True):
    __tablename__ = "invitations"

    id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(
        sa_column=Column(
            String(40), ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False, index=True
        )
    )
    email: str = Field(sa_column=Column(String(320), nullable=False))
    role: str = Field(max_length=16)
    token_hash: str = Field(sa_column=Column(String(64), unique=True, nullable=False))
    invited_by: str | None = Field(
        default=None,
        sa_column=Column(String(40), ForeignKey("users.id", ondelete="SET NULL"), nullable=True),
    )
    created_at: datetime = Field(sa_column=_ts())
    expires_at: datetime = Field(sa_column=_ts())
    accepted_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    accepted_by: str | None = Field(
        default=None,
        sa_column=Column(String(40), ForeignKey("users.id", ondelete="SET NULL"), nullable=True),
    )
    revoked_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))


class PasswordReset(SQLModel, table=True):
    __tablename__ = "password_resets"

    id: str = Field(primary_key=True, max_length=40)
    user_id: str = Field(
        sa_column=Column(String(40), ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True)
    )
    token_hash: str = Field(sa_column=Column(String(64), unique=True, nullable=False))
    created_at: datetime = Field(sa_column=_ts())
    expires_at: datetime = Field(sa_column=_ts())
    used_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    created_by: str = Field(max_length=16)  # "cli" | "self"


class AuditEvent(SQLModel, table=True):
    __tablename__ = "audit_events"

    # BigInteger on PostgreSQL; SQLite's rowid alias must be declared INTEGER to autoincrement.
    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    )
    # Null for events about a user rather than an organization (registration, password change).
    organization_id: str | None = Field(default=None, max_length=40)
    actor_type: str = Field(max_length=16)
    actor_id: str | None = Field(default=None, max_length=40)
    actor_label: str | None = Field(default=None, max_length=320)
    action: str = Field(max_length=64)
    target_type: str | None = Field(default=None, max_length=32)
    target_id: str | None = Field(default=None, max_length=128)
    target_label: str | None = Field(default=None, max_length=1024)
    ip: str | None = Field(default=None, max_length=64)
    user_agent: str | None = Field(default=None, max_length=255)
    request_id: str | None = Field(default=None, max_length=128)
    details: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(sa_column=_ts(index=True))
    # The metadata event this one records (a change to a file or folder, relayed by edge):
    # unique, so relaying an event twice records it once.
    source_id: str | None = Field(default=None, sa_column=Column(String(40), nullable=True, unique=True))


# The audit page reads one organization's newest events first.
Index(
    "ix_audit_events_org_created",
    col(AuditEvent.organization_id),
    col(AuditEvent.created_at).desc(),
)

# SQLModel adds __table__ to table models at class creation; its stubs do not declare it.
TABLES = [
    t.__table__  # type: ignore[union-attr]
    for t in (
        User,
        Organization,
        Membership,
        ApiKey,
        KeyUse,
        LoginThrottle,
        DashboardSession,
        Invitation,
        PasswordReset,
        AuditEvent,
    )
]


def all_tables() -> list[Table]:
    """Every auth table, those defined in other modules (upload tokens, revoked grants, known
    browsers) included."""
    from coffer_auth import devices, grants, upload_tokens

    return [*TABLES, *upload_tokens.TABLES, *grants.TABLES, *devices.TABLES]
