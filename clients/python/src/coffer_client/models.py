"""Typed resources of the public API (CONTRACT §4, §5, §8). Unknown fields are ignored, so a newer
service never breaks an older client; fields added by §8 are optional for the same reason."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

V = TypeVar("V")

# A list stops at its first bad item: pydantic otherwise keeps an error for every missing field
# of every item, and 2 MiB of ``[{}, {}, …]`` made 6,291,459 of them (4.5 GB).
Items = Annotated[list[V], Field(fail_fast=True)]
# The most keys a dict of typed values may hold: each value is checked, and a failed check is
# an error kept; ``fail_fast`` on a dict needs pydantic 2.14, newer than the oldest admitted (2.9).
# Coffer's are a few keys (an image's width, height, orientation; who trashed an asset).
SMALL_DICT = 64


def _few_keys(value: object) -> object:
    if isinstance(value, dict) and len(value) > SMALL_DICT:
        raise ValueError(f"more than {SMALL_DICT} keys")
    return value


Fields = Annotated[dict[str, V], BeforeValidator(_few_keys)]


class Model(BaseModel):
    """camelCase on the wire, snake_case in Python. Each model builds its validator on first use
    (``defer_build``): a command that only uploads never pays for the other seven."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True, defer_build=True
    )


class PathEntry(Model):
    id: str
    name: str


class Folder(Model):
    id: str
    organization_id: str
    parent_id: str | None
    name: str
    created_at: datetime
    updated_at: datetime | None = None
    #: The default expiry, in days, of the assets uploaded into it; None = none.
    expiry_days: int | None = None
    #: From the root folder down to this one; only ``get_folder`` returns it.
    path: Items[PathEntry] | None = None

    @property
    def path_str(self) -> str | None:
        """``/photos/2024`` when the path is known."""
        return None if self.path is None else "/" + "/".join(p.name for p in self.path)


class Asset(Model):
    id: str
    organization_id: str
    folder_id: str | None
    key: str
    name: str
    mime_type: str
    size: int
    #: None for a private asset (CONTRACT §12): only signed URLs reach it.
    public_url: str | None
    created_at: datetime
    sha256: str | None = None
    updated_at: datetime | None = None
    #: ``"public"`` or ``"private"`` (CONTRACT §12); older services send none: public.
    visibility: str = "public"
    #: The media type read from the file's first bytes (``mime_type`` is the declared one);
    #: None for files stored before detection, or from older services.
    detected_type: str | None = None
    #: The malware scan: ``pending``, ``clean``, ``infected``, ``unscanned``; None when the
    #: organization does not scan.
    scan_status: str | None = None
    #: The signature an infected file matched.
    scan_signature: str | None = None
    #: Issue 47: when the asset goes to the trash by itself; None: never (or an older service).
    expires_at: datetime | None = None
    #: The application's own metadata and tags (issue 50).
    metadata: dict[str, Any] = {}
    tags: Items[str] = []
    #: ``{"width", "height", "orientation"}`` of an image, once computed; its BlurHash.
    image: Fields[int] | None = None
    placeholder: str | None = None
    #: In a recursive listing: the folders from the root down to the asset's own.
    folder_path: Items[Fields[str]] | None = None


class AssetPage(Model):
    assets: Items[Asset]
    #: Every match; None on a cursor page that did not ask for it (``total=False``).
    total: int | None = None
    limit: int
    #: None on a cursor page.
    offset: int | None = None
    #: Pass as ``cursor`` for the next page; None on the last page (or from a service
    #: older than cursors, which pages by ``offset`` only).
    next_cursor: str | None = None


class AssetSummary(Model):
    id: str
    name: str
    mime_type: str
    size: int


class SignedUrl(Model):
    url: str
    expires_in: int
    asset: AssetSummary


class Usage(Model):
    organization_id: str
    used_bytes: int
    quota_bytes: int
    asset_count: int
    #: Issue 47: what the trash holds (0 from older services).
    trashed_bytes: int = 0
    trashed_count: int = 0


class TrashedAsset(Asset):
    """An asset in the organization's trash (issue 47)."""

    trashed_at: datetime
    purge_at: datetime
    trashed_by: Fields[str | None]
    reason: str


class TrashPage(Model):
    assets: Items[TrashedAsset]
    total: int
    limit: int
    offset: int


class TrashSettings(Model):
    retention_days: int
    limit_bytes: int


class UploadToken(Model):
    token: str
    url: str
    expires_at: datetime
    expires_in: int


class TransformPreset(Model):
    """A named image transform (CONTRACT §10): built in, or one of the organization's own."""

    name: str
    built_in: bool = False
    w: int | None = None
    h: int | None = None
    fit: str = "cover"
    fmt: str | None = None
    q: int = 80


class ApiKey(Model):
    """A key as the key API shows it (issue 46): never its secret."""

    id: str
    name: str
    kind: str
    prefix: str
    organization_id: str
    created_at: datetime
    expires_at: datetime | None = None
    last_used_at: datetime | None = None
    scopes: Items[str] = ["full"]
    actions: Items[str] = []
    folder_id: str | None = None
    networks: Items[str] = []
    #: The scopes in words ("can upload into /avatars; cannot read or delete").
    description: str = ""


class CreatedKey(Model):
    """A new (or rotated) key: ``key`` is its secret, shown this once."""

    key: str
    api_key: ApiKey


class KeySelf(Model):
    """What the calling key may do (``GET /api/keys/self``)."""

    id: str
    kind: str
    organization_id: str
    scopes: Items[str]
    actions: Items[str]
    folder_id: str | None = None
    folder_path: str | None = None
    networks: Items[str] = []
    expires_at: datetime | None = None
    description: str = ""
