"""Typed resources of the public API (CONTRACT §4, §5, §8). Unknown fields are ignored, so a newer
service never breaks an older client; fields added by §8 are optional for the same reason."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


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
    #: From the root folder down to this one; only ``get_folder`` returns it.
    path: list[PathEntry] | None = None

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


class AssetPage(Model):
    assets: list[Asset]
    total: int
    limit: int
    offset: int


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
    scopes: list[str] = ["full"]
    actions: list[str] = []
    folder_id: str | None = None
    networks: list[str] = []
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
    scopes: list[str]
    actions: list[str]
    folder_id: str | None = None
    folder_path: str | None = None
    networks: list[str] = []
    expires_at: datetime | None = None
    description: str = ""
