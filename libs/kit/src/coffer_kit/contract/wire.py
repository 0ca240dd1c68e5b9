"""The internal APIs' bodies: one definition, used by the service that answers and the
client that asks, so both sides are typed and cannot drift apart.

Fields are snake_case in Python and camelCase on the wire, like the public API. The two hot
reads (an asset, a page of assets) are not here: metadata writes them as the public models
in :mod:`coffer_kit.contract.resources` and edge passes the bytes through unparsed
(services/edge/tests/test_passthrough.py holds metadata to that).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from pydantic.alias_generators import to_camel

from coffer_kit.contract.ids import ASSET_ID_PATTERN, ORG_ID_PATTERN, TUS_UPLOAD_ID_PATTERN
from coffer_kit.contract.limits import (
    EXPIRES_IN_MAX,
    EXPIRES_IN_MIN,
    MAX_FILE_BYTES,
    TRASH_RETENTION_DAYS_MAX,
)
from coffer_kit.contract.media import IngestMode, ScanMode
from coffer_kit.contract.resources import ScanStatus, Visibility
from coffer_kit.contract.scopes import (
    ACTIONS,
    DEFAULT_SCOPES,
    MAX_NETWORK_CHARS,
    MAX_NETWORKS,
    MAX_SCOPE_CHARS,
    MAX_SCOPES,
)


class WireModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def wire(self) -> bytes:
        """The JSON body, with the wire's (camelCase) names."""
        return self.model_dump_json(by_alias=True).encode()


# auth: GET /internal/v1/principal


class Ingest(WireModel):
    """An organization's ingest rules (docs/api.md, "Safe ingest"), carried with its principal
    and its upload tokens' grants so edge applies them with no call of its own."""

    mode: IngestMode = "record"
    # Media ranges every upload's detected type must match under ``enforce``; None: any.
    allowed_types: list[str] | None = None
    scan: ScanMode = "off"

    def allow_lists(self, token_types: list[str] | tuple[str, ...] | None) -> list[str]:
        """blob's ``allow`` query values: the lists the detected type must match (none in
        ``record`` mode)."""
        if self.mode != "enforce":
            return []
        lists = [self.allowed_types, token_types]
        return [",".join(ranges) for ranges in lists if ranges is not None]

    def first_scan_status(self) -> ScanStatus | None:
        """A new asset's scan status: queued when the organization scans."""
        return None if self.scan == "off" else "pending"


class Principal(WireModel):
    """Who a key is, and which organization it acts for."""

    organization_id: str
    key_id: str
    key_kind: str
    user_id: str | None
    quota_bytes: int
    # ISO 8601; None for a key without expiry.
    key_expires_at: str | None
    # CONTRACT §12: what an upload that does not say becomes.
    default_visibility: Visibility = "public"
    # A user key's role in the organization (``owner``, ``member``); None for an organization key.
    role: str | None = None
    ingest: Ingest = Field(default_factory=lambda: Ingest())
    # Issue 46: the key's scopes as given, the actions they allow, the folder subtree it is
    # confined to, and the client networks (CIDRs) it may be used from. The defaults are a
    # key without limits, as an auth from before scopes answers.
    scopes: list[str] = Field(default_factory=lambda: list(DEFAULT_SCOPES))
    actions: list[str] = Field(default_factory=lambda: [str(a) for a in ACTIONS])
    folder_id: str | None = None
    # The folders of the keys that made this one, nearest first (a key made by a subtree key):
    # ``folder_id`` must still lie in each, or the key reaches nothing (empty from an older auth).
    folder_within: list[str] = Field(default_factory=list)
    networks: list[str] = Field(default_factory=list)
    # Issue 47: days a deleted asset stays in the trash; 0 (an auth from before) = no trash.
    trash_retention_days: int = Field(default=0, ge=0, le=TRASH_RETENTION_DAYS_MAX)


class TrashRetentionIn(WireModel):
    """An organization's trash retention (issue 47), as edge asks auth to set it."""

    trash_retention_days: int = Field(ge=0, le=TRASH_RETENTION_DAYS_MAX)
    actor: Actor | None = None


class TrashRetentions(WireModel):
    """Organizations' trash retentions (issue 47): asked with ``organization_ids``, answered
    in ``retentions`` (an unknown organization is 0)."""

    organization_ids: list[str] = Field(default_factory=list, max_length=1000)
    retentions: dict[str, int] = Field(default_factory=dict)
    # ... and their quotas (the trash's bound).
    quotas: dict[str, int] = Field(default_factory=dict)


# auth: the key API (issue 46), asked by edge for the calling key (``x-caller-key-id``)


class KeyCreate(WireModel):
    """A key to make, as ``POST /api/keys`` takes it (the caller's limits are auth's to apply)."""

    kind: Literal["organization", "user"] | None = None
    name: str = Field(default="", max_length=255)
    scopes: list[Annotated[str, Field(max_length=MAX_SCOPE_CHARS)]] | None = Field(
        default=None, max_length=MAX_SCOPES
    )
    folder_id: str | None = Field(default=None, max_length=64)
    networks: list[Annotated[str, Field(max_length=MAX_NETWORK_CHARS)]] | None = Field(
        default=None, max_length=MAX_NETWORKS
    )
    expires_in: StrictInt | None = None


class UploadTokenPlace(WireModel):
    """Where an upload token's upload goes (a subtree key revokes only its subtree's tokens),
    and the media ranges it accepts (a resumable upload's are matched against its detected type
    at its last byte under ``enforce``, issue 48)."""

    folder_id: str | None = None
    content_types: list[str] | None = None


class KeyRotate(WireModel):
    # How long the old key keeps working: 0 (at once, the default) to 7 days.
    grace_seconds: StrictInt = Field(default=0, ge=0, le=604800)


# Who makes a change (edge tells metadata with every call that changes something; metadata
# writes it into the change's event, which feeds the audit log and webhooks).

ACTOR_HEADER = "coffer-actor"
# The folder a subtree key is confined to (issue 46): edge sends it with every metadata call
# made for such a key, and metadata answers as if that folder were the organization's root.
SUBTREE_HEADER = "coffer-subtree"


ActorType = Literal["key", "user", "token", "system"]


class Actor(WireModel):
    """The caller behind a change: a key (``id`` the key, ``user_id`` its user if personal), a
    dashboard user (``id`` the user), an upload token (``id`` the token, ``key_id`` its key)."""

    type: ActorType = "system"
    id: str | None = Field(default=None, max_length=64)
    user_id: str | None = Field(default=None, max_length=64)
    key_id: str | None = Field(default=None, max_length=64)
    label: str | None = Field(default=None, max_length=320)
    ip: str | None = Field(default=None, max_length=64)
    user_agent: str | None = Field(default=None, max_length=255)
    request_id: str | None = Field(default=None, max_length=128)


SYSTEM = Actor()


# metadata: upload intents, commits, deletes, the sweeper


class IntentIn(WireModel):
    asset_id: str = Field(pattern=ASSET_ID_PATTERN)
    # The most the upload can store, held against the quota while it streams, and the least it
    # can (refused at once if even that would not fit). quota_bytes None: no check before the
    # commit, as an edge from before the reservation asks.
    reserve_bytes: int = Field(default=0, ge=0)
    least_bytes: int = Field(default=0, ge=0)
    quota_bytes: int | None = Field(default=None, ge=0)


class IntentOut(WireModel):
    """Everything the upload may write lives under this prefix. ``room_bytes``: what the quota
    left beside the organization's stored bytes when the upload was admitted (None: no quota
    asked), the most its file can hold whatever other uploads do meanwhile, and those stored
    bytes (``used_bytes``, for the refusal's details)."""

    prefix: str
    room_bytes: int | None = None
    used_bytes: int | None = None


class UploadCommit(WireModel):
    """What edge asks metadata to record once blob has stored an upload's bytes."""

    id: str = Field(pattern=ASSET_ID_PATTERN)
    key: str = Field(min_length=1, max_length=2048)
    # None: named after the uploaded file.
    name: str | None = None
    filename: str = ""
    folder_id: str | None = None
    mime_type: str = Field(min_length=1, max_length=255)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    quota_bytes: int = Field(ge=0)
    # As blob stored the object (the store is made private before the row exists).
    visibility: Visibility = "public"
    # What blob read in the file's first bytes (None: not known, an older blob).
    detected_type: str | None = Field(default=None, max_length=255)
    # None: the organization scans nothing; "pending": the scan job is queued with the row.
    scan_status: ScanStatus | None = None
    # Issue 47: when the asset expires (checked by edge); None: never.
    expires_at: datetime | None = None
    # Issue 50: the asset's own metadata and tags (None: none); metadata checks their bounds.
    metadata: dict[str, Any] | None = None
    tags: list[str] | None = Field(default=None, max_length=256)


class Hidden(WireModel):
    """An asset hidden behind its tombstone: the key whose bytes are to be deleted."""

    key: str


class StaleIntent(WireModel):
    asset_id: str
    organization_id: str
    prefix: str


class StaleTombstone(WireModel):
    asset_id: str
    organization_id: str
    key: str


class SweepCandidates(WireModel):
    intents: list[StaleIntent]
    tombstones: list[StaleTombstone]


class StoredUsage(WireModel):
    """What an organization stores (CONTRACT §8, GET /api/usage): exact."""

    used_bytes: int
    asset_count: int
    # Issue 47: what the trash holds (not in used_bytes).
    trashed_bytes: int = 0
    trashed_count: int = 0


# metadata: the trash and expiry (issue 47)


class TrashIn(WireModel):
    """Move an asset to the trash (a delete with a retention, or an expiry)."""

    retention_days: int = Field(ge=1, le=TRASH_RETENTION_DAYS_MAX)
    # The trash's bound (the organization's quota): past it the oldest trashed are purged.
    limit_bytes: int = Field(ge=0)


class PurgedRef(WireModel):
    """An asset purged from the trash, or deleted: its object is edge's to delete, then its
    tombstone (``DELETE /internal/v1/tombstones/{asset_id}``)."""

    asset_id: str
    key: str


class Trashed(WireModel):
    key: str
    # Trashed assets purged to keep the trash within its bound.
    purged: list[PurgedRef] = Field(default_factory=list)


class TrashActIn(WireModel):
    """Restore or purge one trashed asset; ``only_user``: the caller is a member, who may act
    only on what that user trashed."""

    only_user: str | None = Field(default=None, max_length=64)
    # A restore's quota.
    quota_bytes: int = Field(default=0, ge=0)


class PurgeBatchOut(WireModel):
    """One batch of ``DELETE /api/trash``: the objects to delete (earlier purges a crash
    interrupted first), how many this batch purged, how many stay."""

    refs: list[PurgedRef]
    purged: int
    remaining: int


class ExpiredRef(WireModel):
    asset_id: str
    organization_id: str


class ExpiredList(WireModel):
    assets: list[ExpiredRef]


class ExpireIn(WireModel):
    """Expire one asset: to the trash with ``retention_days`` > 0, else deleted."""

    retention_days: int = Field(ge=0, le=TRASH_RETENTION_DAYS_MAX)
    limit_bytes: int = Field(ge=0)


class Expired(WireModel):
    key: str
    # True: deleted (no trash): the object goes, then its tombstone. False: in the trash.
    deleted: bool
    purged: list[PurgedRef] = Field(default_factory=list)


class UploadTarget(WireModel):
    """Where an upload token's upload will go: checked (and the name normalised) at minting."""

    folder_id: str | None = None
    name: str | None = None


class Done(WireModel):
    success: bool = True


class SubtreeCounts(WireModel):
    """Folders below a folder, and assets in it and below (what deleting it touches)."""

    folders: int
    assets: int


# blob: uploads, deletes, signing


class UploadFields(WireModel):
    """The upload's form fields besides the file, as sent (None: absent)."""

    name: str | None = None
    folder_id: str | None = None
    visibility: str | None = None
    # Issue 47: the asset's expiry, as sent (edge checks it).
    expires_at: str | None = None
    # Issue 50: a JSON object and comma-separated tags, as sent (edge parses them).
    metadata: str | None = None
    tags: str | None = None


class Stored(WireModel):
    """What blob stored for an upload."""

    key: str
    size: int
    sha256: str
    mime_type: str
    # As sent (NFC), for the asset's default name; "file" when the part named none.
    filename: str
    fields: UploadFields
    visibility: Visibility = "public"
    # What the file's first bytes are (coffer_blob.detect), beside the declared mime_type.
    detected_type: str | None = None


# blob: resumable uploads (tus, CONTRACT §9)


class TusTarget(WireModel):
    """Where a resumable upload's file will be: blob names the key and the media type."""

    asset_id: str = Field(pattern=ASSET_ID_PATTERN)
    filename: str = Field(max_length=1024)
    filetype: str | None = Field(default=None, max_length=255)


class TusKey(WireModel):
    key: str
    mime_type: str


class TusAppended(WireModel):
    """What blob made durable of a chunk: the new offset, and either the state to resume
    from or, once the last byte is in, the published object's SHA-256."""

    offset: int
    state: dict[str, Any] | None = None
    sha256: str | None = None
    # Once the last byte is in: what the published file's first bytes are.
    detected_type: str | None = None


# metadata: resumable uploads' state (tus, CONTRACT §9)


class TusCreate(WireModel):
    """A new resumable upload: its file's place and name, its length (reserved against the
    quota at once), and the SHA-256 of its capability if an upload token created it."""

    id: str = Field(pattern=TUS_UPLOAD_ID_PATTERN)
    asset_id: str = Field(pattern=ASSET_ID_PATTERN)
    key: str = Field(min_length=1, max_length=2048)
    name: str = Field(min_length=1, max_length=1024)
    folder_id: str | None = None
    mime_type: str = Field(min_length=1, max_length=255)
    visibility: Visibility = "public"
    upload_metadata: str = Field(default="", max_length=8192)
    length: int = Field(ge=0, le=MAX_FILE_BYTES)
    quota_bytes: int = Field(ge=0)
    capability_hash: str | None = Field(default=None, max_length=64)
    token_id: str | None = Field(default=None, max_length=40)
    # The API key (or the dashboard user) that minted that upload token: the capability lives
    # only while it can act.
    minter_key_id: str | None = Field(default=None, max_length=40)
    minter_user_id: str | None = Field(default=None, max_length=40)


class TusUpload(WireModel):
    """A resumable upload as metadata keeps it. ``lock_token`` is set only in the answer that
    took the upload's lock."""

    id: str
    organization_id: str
    asset_id: str
    key: str
    name: str
    folder_id: str | None
    mime_type: str
    visibility: Visibility
    upload_metadata: str
    length: int
    offset: int
    resume: dict[str, Any] | None
    capability_hash: str | None
    token_id: str | None
    expires_at: datetime
    completed: bool
    lock_token: str | None = None
    minter_key_id: str | None = None
    minter_user_id: str | None = None
    created_at: datetime | None = None
    # Whether it holds its length against the quota and a place among the uploads in flight
    # (an idle one does not, until its next write).
    active: bool = True


class TusPage(WireModel):
    """A page of an organization's unfinished resumable uploads, newest first."""

    uploads: list[TusUpload]
    # None on a cursor page that did not ask for it (issue 49).
    total: int | None = None
    next_cursor: str | None = None


class TusMinted(WireModel):
    """An unfinished upload created through an upload token, and who minted that token."""

    id: str
    organization_id: str
    token_id: str | None
    minter_key_id: str | None
    minter_user_id: str | None = None


class TusMintedPage(WireModel):
    uploads: list[TusMinted]


class MinterRef(WireModel):
    """auth: the key that minted an upload token (or, for an upload older than that record,
    the token), in the organization it minted for."""

    organization_id: str = Field(max_length=40)
    key_id: str | None = Field(default=None, max_length=40)
    user_id: str | None = Field(default=None, max_length=40)
    token_id: str | None = Field(default=None, max_length=40)


class MintersIn(WireModel):
    minters: list[MinterRef] = Field(max_length=500)


class MintersOut(WireModel):
    """For each minter asked, in order: whether it can still act in its organization, and that
    organization's quota (None for an organization that no longer exists)."""

    acting: list[bool]
    quota_bytes: list[int | None]
    # The folder each minter's key is confined to now (None: none; empty from an older auth).
    confined_to: list[str | None] = Field(default_factory=list)
    # For each, the folders of the keys that made that key (``Principal.folder_within``).
    confined_within: list[list[str]] = Field(default_factory=list)
    # When each minter's key expires (ISO 8601; None: never, or no key): an answer is not
    # reused past it (empty from an older auth).
    acting_until: list[str | None] = Field(default_factory=list)


class TusLock(WireModel):
    """Take an upload to write at ``offset`` (of ``organization_id``'s, if said) for a lease."""

    organization_id: str | None = None
    offset: int = Field(ge=0)
    lease_seconds: float = Field(gt=0, le=600)
    # The organization's quota, for an idle upload that must reserve its length again.
    quota_bytes: int | None = Field(default=None, ge=0)


class TusLease(WireModel):
    lock_token: str = Field(max_length=64)
    lease_seconds: float = Field(default=0, ge=0, le=600)


class TusAdvance(WireModel):
    """Bytes from ``from_offset`` to ``offset`` are durable; resume from ``resume``. With
    ``keep_seconds``, the writer keeps the lease that long for its next chunk."""

    lock_token: str = Field(max_length=64)
    from_offset: int = Field(ge=0)
    offset: int = Field(ge=0)
    resume: dict[str, Any]
    keep_seconds: float = Field(default=0, ge=0, le=60)


class TusComplete(WireModel):
    """Every byte is in and published: the asset is created with this SHA-256."""

    lock_token: str = Field(max_length=64)
    from_offset: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    detected_type: str | None = Field(default=None, max_length=255)
    scan_status: ScanStatus | None = None


class TusEnded(WireModel):
    """A terminated upload: its bytes under ``prefix`` are to be deleted (then its intent)."""

    asset_id: str
    prefix: str


class VisibilityIn(WireModel):
    """blob: make an object private or public (CONTRACT §12)."""

    visibility: Visibility


class VisibilityOut(WireModel):
    key: str
    visibility: Visibility


# Why blob holds an object back from downloads: its malware scan (issue 48) or the trash (47).
HoldReason = Literal["scan", "trash"]


class HeldIn(WireModel):
    """blob: hold an object back from every download, or release it, for its scan (issue 48)
    or the trash (issue 47): two holds of their own; the object is served when neither holds."""

    held: bool
    reason: HoldReason = "scan"


class ScanOutcome(WireModel):
    """blob: what clamd found in an object (it is held if infected, released if clean)."""

    result: Literal["clean", "infected"]
    signature: str | None = None
    size: int
    seconds: float


class ScanJob(WireModel):
    """metadata: a pending scan, leased to the edge that claimed it."""

    asset_id: str
    organization_id: str
    key: str
    attempts: int


class ScanJobs(WireModel):
    jobs: list[ScanJob]
    # Pending scans in all (due or not), for the queue-depth metric.
    pending: int


class ScanClaim(WireModel):
    limit: int = Field(ge=1, le=100)
    # How long a claimed scan is kept from other claims (a scanner that died gives it back then).
    lease_seconds: float = Field(gt=0, le=3600)


class ScanReport(WireModel):
    """edge → metadata: a scan's end (``clean``, ``infected``, ``unscanned``), or ``retry``
    after ``retry_seconds``."""

    status: Literal["clean", "infected", "unscanned", "retry"]
    signature: str | None = Field(default=None, max_length=255)
    retry_seconds: float = Field(default=0, ge=0, le=86_400)


# A scan mode's change (issue 48): auth keeps the job, edge holds or releases the files stored
# before it that metadata lists.


class ScanSyncClaim(WireModel):
    limit: int = Field(default=8, ge=1, le=100)
    # Only changes older than this: edge's cached rules, which uploads still follow, have caught up.
    settle_seconds: float = Field(ge=0, le=3600)
    lease_seconds: float = Field(gt=0, le=3600)


class ScanSync(WireModel):
    organization_id: str
    scan: ScanMode
    generation: int
    # The claim's lease: the sync's own, which its end names.
    leased_until: datetime


class ScanSyncs(WireModel):
    syncs: list[ScanSync]


class ScanSyncDone(WireModel):
    generation: int
    leased_until: datetime | None = None


class ScanSyncEnded(WireModel):
    # False: the mode changed meanwhile (or another sync of an older mode ended), so the job is
    # due again.
    ended: bool


class ScanHoldAsset(WireModel):
    asset_id: str
    key: str
    scan_status: str


class ScanHoldAssets(WireModel):
    """metadata: an organization's live assets whose scan has not passed or failed for good
    (``pending``, ``unscanned``), by id after ``after``."""

    assets: list[ScanHoldAsset]


# Image facts (issue 50): queued with an image's upload, computed by blob, recorded by metadata.


class FactsJob(WireModel):
    asset_id: str
    organization_id: str
    key: str


class FactsJobs(WireModel):
    jobs: list[FactsJob]
    pending: int


class FactsClaim(WireModel):
    limit: int = Field(default=4, ge=1, le=100)
    lease_seconds: float = Field(default=60.0, gt=0, le=3600)


class ImageFactsOut(WireModel):
    """What blob read of an image: its size as shown, EXIF orientation, a BlurHash; all None
    for a file it cannot read as an image (no error)."""

    width: int | None = None
    height: int | None = None
    orientation: int | None = None
    placeholder: str | None = Field(default=None, max_length=128)


class Deleted(WireModel):
    deleted: bool = True


class TransformFields(WireModel):
    """An image transform's free parameters (CONTRACT §10), as JSON; None leaves one unset.

    Ranges and choices are checked by :func:`coffer_kit.contract.transforms.preset_from_fields` or
    :func:`coffer_kit.contract.transforms.parse_free`, whose 400 is ``invalid_transform``."""

    w: StrictInt | None = None
    h: StrictInt | None = None
    fit: StrictStr | None = Field(default=None, max_length=16)
    fmt: StrictStr | None = Field(default=None, max_length=16)
    q: StrictInt | None = None


# Signed URLs die with their authority (docs/security.md): auth queues, in the transaction that
# ends it, each authority that stops acting in an organization (a key deleted, with the keys it
# replaced; a member removed, with their personal keys); edge relays the queue to blob, which
# refuses the signed URLs made under it before that moment.
AUTHORITY_PATTERN = r"^(key:key|user:usr)_[0-9A-Z]{26}$"
MAX_REVOCATIONS = 1000


class GrantRevocation(WireModel):
    seq: StrictInt = Field(ge=0)  # auth's queue position; blob ignores it
    organization_id: StrictStr = Field(pattern=ORG_ID_PATTERN)
    authority: StrictStr = Field(pattern=AUTHORITY_PATTERN)
    revoked_at: StrictInt = Field(ge=0)  # unix seconds: URLs issued at or before it are refused


class GrantRevocations(WireModel):
    """auth's queue, oldest first (``GET /internal/v1/grant-revocations``); blob's input
    (``POST /internal/v1/grant-revocations``)."""

    revocations: list[GrantRevocation] = Field(max_length=MAX_REVOCATIONS)


class RelayedRevocations(WireModel):
    """The queue entries blob has stored, which auth then deletes."""

    seqs: list[StrictInt] = Field(max_length=MAX_REVOCATIONS)


class RevocationsStored(WireModel):
    stored: StrictInt


class SignIn(WireModel):
    key: StrictStr = Field(max_length=2048)
    expires_in: StrictInt = Field(ge=EXPIRES_IN_MIN, le=EXPIRES_IN_MAX)
    # A transformed URL (CONTRACT §10): a preset's name, or free parameters; never both.
    preset: StrictStr | None = Field(default=None, max_length=64)
    transform: TransformFields | None = None
    # The authority the URL is made under (``key:<id>`` or ``user:<id>``): the URL carries a tag
    # of it and its time of issue, and dies when that authority is revoked (docs/security.md,
    # "Signed URLs"). None makes a URL nothing revokes but its expiry.
    by: StrictStr | None = Field(default=None, pattern=AUTHORITY_PATTERN)


# blob: an organization's transform presets (CONTRACT §10), kept in its store.


class TransformPresets(WireModel):
    """An organization's own presets, by name."""

    presets: dict[str, TransformFields]


class SignOut(WireModel):
    url: str
    expires: int


# auth: upload tokens (CONTRACT §8)

# A media range as upload tokens take them: ``*``, ``type/*`` or ``type/subtype`` (lower case).
MEDIA_RANGE_PATTERN = r"^(\*|[a-z0-9!#$&^_.+*-]+/[a-z0-9!#$&^_.+*-]+)$"
UPLOAD_TOKEN_MAX_TYPES, UPLOAD_TOKEN_MAX_TYPE_CHARS = 100, 255
UPLOAD_TOKEN_MAX_EXPIRES_IN = 86_400


class TokenAsset(WireModel):
    """What an upload token fixes about the asset it makes (issues 47 and 50), checked by edge at
    minting: its ``expiresAt`` (ISO 8601), its metadata and tags (the upload's own are then
    ignored), or that the upload may not carry metadata or tags at all."""

    expires_at: str | None = Field(default=None, max_length=40)
    metadata: dict[str, StrictStr | StrictInt | float | bool] | None = None
    tags: list[Annotated[str, Field(max_length=64)]] | None = Field(default=None, max_length=32)
    forbid_description: bool = False

    @property
    def fixes_description(self) -> bool:
        return self.metadata is not None or self.tags is not None


class UploadTokenIn(WireModel):
    """A new token's SHA-256 and scope (the token itself never crosses the network)."""

    token_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    key_id: str | None = Field(default=None, max_length=40)
    # The dashboard user who minted it (no key), and the session it was minted in: the token and
    # the uploads made with it act only while that session lives.
    user_id: str | None = Field(default=None, max_length=40)
    session_id: str | None = Field(default=None, max_length=40)
    folder_id: str | None = Field(default=None, max_length=40)
    name: str | None = Field(default=None, max_length=1024)
    max_bytes: StrictInt = Field(ge=1, le=MAX_FILE_BYTES)
    content_types: (
        list[Annotated[str, Field(pattern=MEDIA_RANGE_PATTERN, max_length=UPLOAD_TOKEN_MAX_TYPE_CHARS)]]
        | None
    ) = Field(default=None, max_length=UPLOAD_TOKEN_MAX_TYPES)
    expires_in: StrictInt = Field(ge=1, le=UPLOAD_TOKEN_MAX_EXPIRES_IN)
    # None: the organization's default when the upload comes.
    visibility: Visibility | None = None
    asset: TokenAsset | None = None


class UploadTokenCreated(WireModel):
    id: str
    expires_at: str


class UploadGrant(WireModel):
    """What a live token allows: one upload into this organization, within this scope."""

    token_id: str
    organization_id: str
    quota_bytes: int
    folder_id: str | None
    name: str | None
    max_bytes: int
    content_types: list[str] | None
    expires_at: str
    # The token's visibility (None: the organization's default, below).
    visibility: Visibility | None = None
    default_visibility: Visibility = "public"
    # The API key that minted the token (None for a token older than that record), or the
    # dashboard user who did.
    key_id: str | None = None
    user_id: str | None = None
    ingest: Ingest = Field(default_factory=lambda: Ingest())
    asset: TokenAsset | None = None
    # The folder that key is confined to now (issue 46): the token's upload stays in its subtree.
    confined_to: str | None = None
    # The folders of the keys that made that key (``Principal.folder_within``).
    confined_within: list[str] = Field(default_factory=list)


class TokenClaim(WireModel):
    asset_id: str = Field(min_length=1, max_length=40)
