"""Metadata tables: folders, assets, per-organization usage, upload intents, delete tombstones, and
the outbox of changes (events)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

# An asset's own metadata and tags (issue 50): jsonb on PostgreSQL (GIN-indexed), JSON text on
# SQLite.
JSON_DOCUMENT = JSON().with_variant(JSONB(), "postgresql")


def _ts(nullable: bool = False) -> Column:  # type: ignore[type-arg]
    return Column(DateTime(timezone=True), nullable=nullable)


class Folder(SQLModel, table=True):
    __tablename__ = "folders"
    __table_args__ = (
        # Sibling names are unique. NULL parents never compare equal in a UNIQUE constraint,
        # so root folders get their own partial index (both SQLite and PostgreSQL have them).
        Index(
            "uq_folders_sibling_name",
            "organization_id",
            "parent_id",
            "name",
            unique=True,
            sqlite_where=text("parent_id IS NOT NULL"),
            postgresql_where=text("parent_id IS NOT NULL"),
        ),
        Index(
            "uq_folders_root_name",
            "organization_id",
            "name",
            unique=True,
            sqlite_where=text("parent_id IS NULL"),
            postgresql_where=text("parent_id IS NULL"),
        ),
        # The parent foreign key's lookup on delete (migration 0012_cursors).
        Index("ix_folders_parent", "parent_id"),
    )

    id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(max_length=40)
    parent_id: str | None = Field(
        default=None,
        sa_column=Column(String(40), ForeignKey("folders.id", ondelete="CASCADE"), nullable=True),
    )
    name: str = Field(max_length=1024)
    created_at: datetime = Field(sa_column=_ts())
    # Changes on rename and move (CONTRACT §8).
    updated_at: datetime = Field(sa_column=_ts())
    # The default expiry, in days, of the assets uploaded into it (issue 47; None = none).
    expiry_days: int | None = Field(default=None, nullable=True)


# The scan states whose hold follows the organization's scan mode (coffer_edge.scans.scan_held).
SCAN_HOLD_WHERE = "scan_status IN ('pending', 'unscanned')"


class Asset(SQLModel, table=True):
    __tablename__ = "assets"
    __table_args__ = (
        # Serve the list orderings: all assets, and assets of one folder (root = NULL), newest first.
        Index("ix_assets_org_created", "organization_id", "created_at", "id"),
        Index("ix_assets_org_folder_created", "organization_id", "folder_id", "created_at", "id"),
        # GET /api/assets?visibility= (CONTRACT §12): the page and its count, newest first,
        # from the index alone (migration 0004_asset_visibility; docs/api.md has the figures).
        Index("ix_assets_org_visibility_created", "organization_id", "visibility", "created_at", "id"),
        # Name search (CONTRACT §8: case-insensitive substring). On SQLite, counting the matches
        # of an organization reads this index alone instead of every row: 14 ms instead of 35 ms
        # at 100,000 assets (docs/api.md).
        Index("ix_assets_org_name_key", "organization_id", "name_key"),
        # Cursor pages by name and by size (issue 49, migration 0012_cursors).
        Index("ix_assets_org_name", "organization_id", "name", "id"),
        Index("ix_assets_org_size", "organization_id", "size", "id"),
        # The folder foreign key's lookup on delete (migration 0012_cursors).
        Index("ix_assets_folder", "folder_id"),
        # On PostgreSQL, a trigram index answers `name_key LIKE '%…%'` without reading every
        # name, led by the organization (GIN through btree_gin), so that a search reads only the
        # organization's own trigrams (migration 0017). PostgreSQL only (pg_trgm, btree_gin).
        # The scan queue (issue 48): pending assets by when their scan is due, alone
        # (migration 0010_safe_ingest).
        Index(
            "ix_assets_scan_due",
            "scan_due_at",
            postgresql_where=text("scan_due_at IS NOT NULL"),
            sqlite_where=text("scan_due_at IS NOT NULL"),
        ),
        # A scan mode's change (issue 48): an organization's assets whose hold depends on the
        # mode (pending, unscanned), alone (migration 0018_scan_holds).
        Index(
            "ix_assets_scan_hold",
            "organization_id",
            "id",
            postgresql_where=text(SCAN_HOLD_WHERE),
            sqlite_where=text(SCAN_HOLD_WHERE),
        ),
        # Issue 47: assets with an expiry, by when it falls (the expiry sweeper, expiresBefore).
        Index(
            "ix_assets_expires",
            "expires_at",
            postgresql_where=text("expires_at IS NOT NULL"),
            sqlite_where=text("expires_at IS NOT NULL"),
        ),
        Index(
            "ix_assets_org_name_key_trgm",
            "organization_id",
            "name_key",
            postgresql_using="gin",
            postgresql_ops={"name_key": "gin_trgm_ops"},
        ),
        # Issue 50: `metadata @> {...}` and `tags @> [...]` on PostgreSQL (migration
        # 0014_asset_metadata); SQLite keeps tags in its side table ``asset_tags`` instead.
        Index(
            "ix_assets_metadata_gin",
            "custom_metadata",
            postgresql_using="gin",
            postgresql_ops={"custom_metadata": "jsonb_path_ops"},
        ),
        Index(
            "ix_assets_tags_gin", "tags", postgresql_using="gin", postgresql_ops={"tags": "jsonb_path_ops"}
        ),
        # The image facts queue: assets whose facts are due, alone.
        Index(
            "ix_assets_facts_due",
            "facts_due_at",
            postgresql_where=text("facts_due_at IS NOT NULL"),
            sqlite_where=text("facts_due_at IS NOT NULL"),
        ),
    )

    id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(max_length=40)
    folder_id: str | None = Field(
        default=None,
        sa_column=Column(String(40), ForeignKey("folders.id", ondelete="SET NULL"), nullable=True),
    )
    key: str = Field(sa_column=Column(String(2048), nullable=False, unique=True))
    name: str = Field(max_length=1024)
    mime_type: str = Field(max_length=255)
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    sha256: str = Field(max_length=64)
    created_at: datetime = Field(sa_column=_ts())
    # Changes on rename and move (CONTRACT §8).
    updated_at: datetime = Field(sa_column=_ts())
    # The name case-folded (names.search_key): what the name search compares, alike on both
    # databases (SQLite's own lower() folds ASCII only).
    name_key: str = Field(sa_column=Column(Text, nullable=False))
    # CONTRACT §12: 'public' or 'private' (the store holds it too; see docs/architecture.md).
    visibility: str = Field(
        default="public", sa_column=Column(String(16), nullable=False, server_default="public")
    )
    # Issue 48: the media type read from the file's first bytes (None before detection).
    detected_type: str | None = Field(default=None, sa_column=Column(String(255), nullable=True))
    # The malware scan: None (the organization scanned nothing), pending, clean, infected,
    # unscanned; the signature an infected file matched.
    scan_status: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    scan_signature: str | None = Field(default=None, sa_column=Column(String(255), nullable=True))
    # The scan queue: a pending asset's next attempt is due at ``scan_due_at`` (a claim moves
    # it past the scan's timeout, so a scanner that died gives it back); attempts so far.
    scan_attempts: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    scan_due_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    # Issue 47: when the asset goes to the trash (or is deleted, without one) by itself.
    expires_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    # Issue 50: the application's own metadata (the public ``metadata``; ``metadata`` itself is
    # SQLModel's) and tags, an array kept in code-point order.
    custom_metadata: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        sa_column=Column("custom_metadata", JSON_DOCUMENT, nullable=False, server_default=text("'{}'")),
    )
    tags: list[str] = Field(
        default_factory=list, sa_column=Column(JSON_DOCUMENT, nullable=False, server_default=text("'[]'"))
    )
    # Image facts, computed after upload: {width, height, orientation} and a BlurHash; the
    # queue: an image's facts are due at ``facts_due_at`` (None once done, or for a non-image).
    image: dict[str, int] | None = Field(default=None, sa_column=Column(JSON_DOCUMENT, nullable=True))
    placeholder: str | None = Field(default=None, sa_column=Column(String(128), nullable=True))
    facts_due_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))


class TrashedAsset(SQLModel, table=True):
    """A deleted asset in its organization's trash (issue 47): the asset's row as it was, moved
    here whole (so no query of ``assets`` ever sees it), with who trashed it and when it goes.
    Its object stays in the store, held back from every download; a restore moves the row back."""

    __tablename__ = "trashed_assets"
    __table_args__ = (
        Index("ix_trashed_assets_org_trashed", "organization_id", "trashed_at", "id"),
        Index("ix_trashed_assets_purge", "purge_at"),
    )

    id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(max_length=40)
    # The folder it was in (no foreign key: the folder may be deleted meanwhile; a restore
    # then puts the asset at the root).
    folder_id: str | None = Field(default=None, max_length=40)
    key: str = Field(sa_column=Column(String(2048), nullable=False, unique=True))
    name: str = Field(max_length=1024)
    mime_type: str = Field(max_length=255)
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    sha256: str = Field(max_length=64)
    created_at: datetime = Field(sa_column=_ts())
    updated_at: datetime = Field(sa_column=_ts())
    name_key: str = Field(sa_column=Column(Text, nullable=False))
    visibility: str = Field(max_length=16)
    detected_type: str | None = Field(default=None, sa_column=Column(String(255), nullable=True))
    scan_status: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    scan_signature: str | None = Field(default=None, sa_column=Column(String(255), nullable=True))
    scan_attempts: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    scan_due_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    expires_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    trashed_at: datetime = Field(sa_column=_ts())
    purge_at: datetime = Field(sa_column=_ts())
    # Who trashed it (events.Actor, JSON) and, for a personal key or dashboard user, the user:
    # a member may restore or purge only what they trashed.
    trashed_by: str = Field(sa_column=Column(Text, nullable=False))
    trashed_by_user: str | None = Field(default=None, max_length=64)
    # Issue 50's columns, as on ``Asset`` (a restore gives them back).
    custom_metadata: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        sa_column=Column("custom_metadata", JSON_DOCUMENT, nullable=False, server_default=text("'{}'")),
    )
    tags: list[str] = Field(
        default_factory=list, sa_column=Column(JSON_DOCUMENT, nullable=False, server_default=text("'[]'"))
    )
    image: dict[str, int] | None = Field(default=None, sa_column=Column(JSON_DOCUMENT, nullable=True))
    placeholder: str | None = Field(default=None, sa_column=Column(String(128), nullable=True))
    facts_due_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    # deleted | expired
    reason: str = Field(max_length=16)


class Usage(SQLModel, table=True):
    """Bytes and count stored per organization; the row the quota update is conditional on."""

    __tablename__ = "usage"

    organization_id: str = Field(primary_key=True, max_length=40)
    used_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    asset_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    # Issue 47: what the organization's trash holds (not counted in used_bytes).
    trashed_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    trashed_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))


class UploadIntent(SQLModel, table=True):
    """An upload in flight: its bytes may exist without a row; the sweeper deletes stale ones."""

    __tablename__ = "upload_intents"
    # An organization's uploads in flight, counted and summed at each new intent.
    __table_args__ = (Index("ix_upload_intents_org", "organization_id"),)

    asset_id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(max_length=40)
    key: str = Field(max_length=2048)
    created_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False, index=True))
    # Set by the sweeper before it deletes the bytes; an upload whose intent is swept cannot commit.
    swept: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    # The most the upload can store (its Content-Length, or the upload bound): held against the
    # quota while the bytes stream, so uploads in flight can never overrun it together.
    reserved_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    # A resumable upload's intent (tus, CONTRACT §9) is stale once the upload expires, 24 h
    # after its last write, however old it is; other intents are stale by age.
    expires_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))


class TusUpload(SQLModel, table=True):
    """A resumable upload (tus, CONTRACT §9): where its file goes, how far it is, and the state
    to resume from. Its bytes are in the store under the asset's prefix; its intent (same
    asset id) holds the length against the quota until the last byte turns it into an asset.
    A completed upload stays until it expires, so HEAD can answer the asset's id."""

    __tablename__ = "tus_uploads"
    __table_args__ = (
        Index("ix_tus_uploads_expires", "expires_at"),
        Index("ix_tus_uploads_org", "organization_id", "created_at"),
        Index("ix_tus_uploads_org_page", "organization_id", "created_at", "id"),
    )

    id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(max_length=40)
    asset_id: str = Field(sa_column=Column(String(40), nullable=False, unique=True))
    key: str = Field(max_length=2048)
    name: str = Field(max_length=1024)
    folder_id: str | None = Field(default=None, max_length=40)
    mime_type: str = Field(max_length=255)
    visibility: str = Field(max_length=16)
    # Upload-Metadata as the client sent it (HEAD answers it).
    upload_metadata: str = Field(sa_column=Column(Text, nullable=False))
    length: int = Field(sa_column=Column(BigInteger, nullable=False))
    # Bytes durable in the store; only a write that finished moves it.
    offset: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    # What blob answered at the last checkpoint: the SHA-256 state and the store's (JSON).
    resume: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # SHA-256 of the capability in the Location of an upload created with an upload token.
    capability_hash: str | None = Field(default=None, max_length=64)
    # ... and that upload token's id (the actor of its changes).
    token_id: str | None = Field(default=None, max_length=40)
    # ... and the API key (or dashboard user) that minted the token: the capability dies with
    # it (issue 44).
    minter_key_id: str | None = Field(default=None, max_length=40)
    minter_user_id: str | None = Field(default=None, max_length=40)
    created_at: datetime = Field(sa_column=_ts())
    expires_at: datetime = Field(sa_column=_ts())
    # One writer at a time: a lease, taken by a conditional update and renewed while it writes.
    lock_token: str | None = Field(default=None, max_length=64)
    locked_until: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    # The lease is kept between two chunks of one writer (no request writing right now).
    lease_kept: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    completed: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))


class Tombstone(SQLModel, table=True):
    """A deleted asset whose bytes may still exist; dropped once blob has deleted them."""

    __tablename__ = "tombstones"

    asset_id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(max_length=40)
    key: str = Field(max_length=2048)
    created_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False, index=True))


class Event(SQLModel, table=True):
    """A change to a folder or an asset, written in the transaction that makes it (the outbox):
    a rolled-back change has no event, a committed one always has. It feeds the organization's
    audit log (edge relays it to auth) and, later, its webhooks (issue 25)."""

    __tablename__ = "events"
    __table_args__ = (
        # The relay reads the oldest events auth has not yet recorded.
        Index("ix_events_audit_pending", "audited", "created_at"),
        Index("ix_events_org_created", "organization_id", "created_at"),
        # The webhook dispatcher reads the events it has not fanned out to endpoints yet.
        Index("ix_events_dispatch_pending", "dispatched", "created_at"),
    )

    id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(max_length=40)
    # asset.created | asset.updated | asset.deleted | folder.created | folder.updated | folder.deleted
    type: str = Field(max_length=32)
    created_at: datetime = Field(sa_column=_ts())
    # The resource as the public API writes it, after the change (before it, for a delete).
    data: str = Field(sa_column=Column(Text, nullable=False))
    # For an update: what changed, with the value before (JSON: {"name": "old.txt"}).
    changes: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # Who made the change, as edge told it (events.Actor), JSON.
    actor: str = Field(sa_column=Column(Text, nullable=False))
    # Set once auth's audit log holds the event.
    audited: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    # Set once the webhook dispatcher has made its deliveries (one per matching endpoint).
    dispatched: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=false()))
    # The W3C traceparent of the request that made the change (when traced): a delivery's span
    # links to it.
    trace: str | None = Field(default=None, max_length=255)


class WebhookEndpoint(SQLModel, table=True):
    """A URL an organization subscribed to some of its events (CONTRACT §11)."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (Index("ix_webhook_endpoints_org", "organization_id", "created_at"),)

    id: str = Field(primary_key=True, max_length=40)
    organization_id: str = Field(max_length=40)
    url: str = Field(max_length=2048)
    # JSON list of event types.
    events: str = Field(sa_column=Column(Text, nullable=False))
    # Only events inside this folder's subtree.
    folder_id: str | None = Field(default=None, max_length=40)
    # One more each time folder_id changes or that folder moves; each delivery keeps the scope
    # it was fanned out under, and a subtree key sees only the current scope's.
    scope: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    description: str | None = Field(default=None, max_length=500)
    enabled: bool
    # paused | gone | failing
    disabled_reason: str | None = Field(default=None, max_length=32)
    # The signing secret, encrypted with COFFER_METADATA_WEBHOOK_SECRET_KEY (webhooks.secrets).
    secret: str = Field(sa_column=Column(Text, nullable=False))
    # After a rotation: the previous secret (encrypted), signing too until it expires.
    previous_secret: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    previous_secret_expires_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    # Since when every attempt failed (None after a success); 5 days of it disable the endpoint.
    failing_since: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    created_at: datetime = Field(sa_column=_ts())
    updated_at: datetime = Field(sa_column=_ts())


class WebhookDelivery(SQLModel, table=True):
    """One event to one endpoint: sent until a 2xx, retried on a schedule until ``retry_until``."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("endpoint_id", "event_id", name="uq_webhook_deliveries_event"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_lease", "endpoint_id", "lease_until"),
        # Retention deletes the oldest finished deliveries (coffer_metadata.retention).
        Index("ix_webhook_deliveries_created", "created_at"),
    )

    id: str = Field(primary_key=True, max_length=40)
    endpoint_id: str = Field(max_length=40)
    organization_id: str = Field(max_length=40)
    event_id: str = Field(max_length=40)
    event_type: str = Field(max_length=32)
    # The request body, fixed at fan-out: every attempt sends the same bytes.
    body: str = Field(sa_column=Column(Text, nullable=False))
    trace: str | None = Field(default=None, max_length=255)
    # The endpoint's scope when the delivery was planned (WebhookEndpoint.scope).
    scope: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    # pending | succeeded | failed
    status: str = Field(max_length=16)
    attempts: int
    next_attempt_at: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    retry_until: datetime = Field(sa_column=_ts())
    # A dispatcher sending it holds the lease: no other sends it until the lease ends.
    lease_token: str | None = Field(default=None, max_length=64)
    lease_until: datetime | None = Field(default=None, sa_column=_ts(nullable=True))
    created_at: datetime = Field(sa_column=_ts())


class WebhookAttempt(SQLModel, table=True):
    """One attempt of a delivery: the delivery log."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (
        Index("ix_webhook_attempts_endpoint", "endpoint_id", "created_at"),
        Index("ix_webhook_attempts_endpoint_page", "endpoint_id", "created_at", "id"),
        Index("ix_webhook_attempts_delivery", "delivery_id"),
        # Retention deletes the oldest attempts (coffer_metadata.retention).
        Index("ix_webhook_attempts_created", "created_at"),
    )

    id: str = Field(primary_key=True, max_length=40)
    delivery_id: str = Field(max_length=40)
    endpoint_id: str = Field(max_length=40)
    attempt: int
    # succeeded | failed
    result: str = Field(max_length=16)
    response_status: int | None = None
    error: str | None = Field(default=None, max_length=512)
    latency_ms: int
    response: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = Field(sa_column=_ts())


# Indexes the migrations create on PostgreSQL only.
POSTGRESQL_ONLY_INDEXES = {"ix_assets_org_name_key_trgm", "ix_assets_metadata_gin", "ix_assets_tags_gin"}
# On SQLite, each asset's tags in a side table kept by triggers (migration 0014_asset_metadata),
# indexed by (organization, tag): outside the models, like the search table.
SQLITE_TAGS_TABLE = "asset_tags"
# And each asset's metadata keys (migration 0016_sqlite_asset_meta), indexed by (organization, key, value).
SQLITE_META_TABLE = "asset_meta"
# On SQLite, the FTS5 trigram index of asset names (migration 0003): a virtual table, its
# shadow tables (``assets_name_search_*``) and triggers, none of which SQLModel describes.
SQLITE_SEARCH_TABLE = "assets_name_search"

# SQLModel adds __table__ to table models at class creation; its stubs do not declare it.
TABLES = [
    t.__table__  # type: ignore[union-attr]
    for t in (
        Folder,
        Asset,
        TrashedAsset,
        Usage,
        UploadIntent,
        TusUpload,
        Tombstone,
        Event,
        WebhookEndpoint,
        WebhookDelivery,
        WebhookAttempt,
    )
]
