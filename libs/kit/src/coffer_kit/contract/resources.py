"""The contract's resources (docs/contract.md §4) as the public API writes them.

edge declares them as its response models (they are the OpenAPI document's schemas), and
metadata writes its answers with them, so a body crosses both services unchanged.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coffer_kit.contract.describe import METADATA_SCHEMA, TAGS_SCHEMA
from coffer_kit.contract.expiry import ExpiryDays
from coffer_kit.contract.names import NAME_RULES, NAME_SCHEMA

# CONTRACT §12: who may fetch an asset's bytes without a key.
Visibility = Literal["public", "private"]
VISIBILITIES: tuple[Visibility, ...] = ("public", "private")
# Malware scanning (docs/api.md, "Safe ingest"): an asset's scan; null when its organization
# scanned nothing at upload.
ScanStatus = Literal["pending", "clean", "infected", "unscanned"]


class Folder(BaseModel):
    id: str = Field(examples=["fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"])
    organizationId: str
    parentId: str | None = Field(description="Parent folder; null for a root folder.")
    name: str
    createdAt: str = Field(
        description="ISO 8601 UTC with milliseconds.", examples=["2026-11-22T10:15:30.123Z"]
    )
    updatedAt: str = Field(description="ISO 8601 UTC with milliseconds; changes on rename and move.")
    expiryDays: ExpiryDays | None = Field(
        default=None,
        description=(
            "Days after its upload that an asset uploaded into this folder without its own "
            "`expiresAt` expires (1-3650); null = no default. Not inherited by subfolders."
        ),
    )


class PathItem(BaseModel):
    id: str
    name: str


class FolderWithPath(Folder):
    path: list[PathItem] = Field(
        description="From the root folder down to and including this one (ids and names)."
    )


class FolderList(BaseModel):
    folders: list[Folder]


class FolderCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(description=NAME_RULES, json_schema_extra=NAME_SCHEMA)
    parentId: str | None = Field(default=None, description="Parent folder id; omitted or null = root.")
    expiryDays: ExpiryDays | None = Field(
        default=None,
        description="Default expiry of the assets uploaded into it, in days (1-3650); null = none.",
    )


class ImageFacts(BaseModel):
    width: int = Field(description="Pixels, as shown (EXIF orientation applied).")
    height: int = Field(description="Pixels, as shown (EXIF orientation applied).")
    orientation: int = Field(ge=1, le=8, description="The EXIF orientation (1 when none).")


class Asset(BaseModel):
    id: str = Field(examples=["ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"])
    organizationId: str
    folderId: str | None = Field(description="Containing folder; null for root.")
    key: str = Field(
        description="Internal storage path `{organizationId}/{assetId}/{filename}`; never changes."
    )
    name: str
    mimeType: str
    size: int = Field(description="Bytes, counted by the server.")
    publicUrl: str | None = Field(
        description="Public CDN URL, no key needed; null for a private asset (use a signed URL)."
    )
    createdAt: str = Field(description="ISO 8601 UTC with milliseconds.")
    sha256: str = Field(description="Lowercase hex SHA-256 of the stored bytes.")
    updatedAt: str = Field(description="ISO 8601 UTC with milliseconds; changes on rename and move.")
    visibility: Visibility = Field(
        default="public",
        description="`public`: served at `publicUrl`; `private`: only on signed URLs (the CDN answers "
        "the bare key 404).",
    )
    detectedType: str | None = Field(
        default=None,
        description="The media type read from the file's first bytes (libmagic); `mimeType` stays the "
        "declared one. Null for files stored before detection existed.",
        examples=["image/gif"],
    )
    scanStatus: ScanStatus | None = Field(
        default=None,
        description="Malware scan: `pending`, `clean`, `infected` (quarantined: never served nor "
        "signed), `unscanned` (the scanner could not be reached after retries); null when the "
        "organization's scanning was off at upload.",
    )
    scanSignature: str | None = Field(
        default=None, description="The scanner's signature name for an infected file; else null."
    )
    expiresAt: str | None = Field(
        default=None,
        description="Issue 47: when the asset goes to the trash (or is deleted, without a trash) by "
        "itself, within two minutes after; null: never.",
    )

    metadata: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        json_schema_extra=METADATA_SCHEMA,
    )
    tags: list[str] = Field(default_factory=list, json_schema_extra=TAGS_SCHEMA)
    image: ImageFacts | None = Field(
        default=None,
        description="For an image the transforms can read: its size as shown (EXIF orientation "
        "applied); null otherwise, and until computed (shortly after upload).",
    )
    placeholder: str | None = Field(
        default=None,
        description="A BlurHash of the image (4×3 components), for a placeholder while it loads; "
        "null when `image` is.",
        examples=["LEHV6nWB2yk8pyo0adR*.7kCMdnj"],
    )
    folderPath: list[PathItem] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Only in a `recursive=true` listing: the folders from the root down to the "
        "asset's own (`[]` at the root).",
    )


class TrashedBy(BaseModel):
    type: str = Field(description="`key`, `user`, `token` or `system` (an expiry).")
    id: str | None = None
    label: str | None = None


class TrashedAsset(Asset):
    """Issue 47: an asset in its organization's trash, as it was, with the trash's fields."""

    trashedAt: str = Field(description="ISO 8601 UTC with milliseconds.")
    purgeAt: str = Field(description="When the sweeper deletes it for good (ISO 8601).")
    trashedBy: TrashedBy
    reason: Literal["deleted", "expired"]


class TrashList(BaseModel):
    assets: list[TrashedAsset]
    total: int
    limit: int
    offset: int


class TrashSettings(BaseModel):
    retentionDays: int = Field(description="0-90; 0: deletes are final.")
    limitBytes: int = Field(description="The most the trash holds (the organization's quota).")


class PurgeBatch(BaseModel):
    purged: int = Field(description="Trashed assets purged by this call.")
    remaining: int = Field(description="Still in the trash; call again while above 0.")


class AssetList(BaseModel):
    assets: list[Asset]
    total: int | None = Field(
        default=None,
        description="Every matching asset, not just this page. Always present on an offset page (a "
        "request without `cursor`, unless `total=false`); with `cursor`, only when `total=true`.",
    )
    limit: int
    offset: int | None = Field(
        default=None, description="Present on an offset page (a request without `cursor`)."
    )
    nextCursor: str | None = Field(
        default=None, description="Send as `cursor` for the page after this one; null on the last page."
    )
