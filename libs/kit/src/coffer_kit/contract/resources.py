"""The contract's resources (docs/contract.md §4) as the public API writes them.

edge declares them as its response models (they are the OpenAPI document's schemas), and
metadata writes its answers with them, so a body crosses both services unchanged.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

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


class AssetList(BaseModel):
    assets: list[Asset]
    total: int = Field(description="Every matching asset, not just this page.")
    limit: int
    offset: int
