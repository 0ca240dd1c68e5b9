"""Public request and response models: they are the OpenAPI document clients are generated from."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Interval
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from coffer_kit.contract.describe import (
    KEY_PATTERN,
    MAX_KEYS,
    MAX_TAGS,
    MAX_VALUE_CHARS,
    METADATA_SCHEMA,
    TAG_PATTERN,
    TAGS_SCHEMA,
)
from coffer_kit.contract.expiry import ExpiryDays
from coffer_kit.contract.limits import (
    EXPIRES_IN_MAX,
    EXPIRES_IN_MIN,
    MAX_FILE_BYTES,
    PAGE_LIMIT_MAX,
    PAGE_OFFSET_MAX,
    TRASH_RETENTION_DAYS_MAX,
)
from coffer_kit.contract.names import NAME_RULES, NAME_SCHEMA, UPLOAD_NAME_SCHEMA
from coffer_kit.contract.resources import (
    Asset,
    AssetList,
    Folder,
    FolderCreate,
    FolderList,
    FolderWithPath,
    Visibility,
)

__all__ = [
    "TOKEN_UPLOAD_BODY",
    "UPLOAD_BODY",
    "Asset",
    "AssetList",
    "AssetSort",
    "AssetUpdate",
    "ErrorEnvelope",
    "ExpiresIn",
    "Folder",
    "FolderCreate",
    "FolderList",
    "FolderUpdate",
    "FolderWithPath",
    "OpenUpload",
    "OpenUploadList",
    "PageLimit",
    "PageOffset",
    "SignedUrl",
    "Success",
    "TransformPreset",
    "TransformPresetBody",
    "TransformPresetList",
    "TrueOrFalse",
    "UploadToken",
    "UploadTokenCreate",
    "Usage",
    "errors",
]


def _whole_number(value: Any) -> Any:
    """Query integers are written as digits: "2.0" or "1e3" are refused, not rounded."""
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        raise ValueError("must be a whole number")
    return value


# Integer query parameters within their bounds, accepting only integer notation (docs/contract.md §5.1, §5.3).
PageLimit = Annotated[int, Interval(ge=1, le=PAGE_LIMIT_MAX), BeforeValidator(_whole_number)]
PageOffset = Annotated[int, Interval(ge=0, le=PAGE_OFFSET_MAX), BeforeValidator(_whole_number)]
# A boolean query parameter as docs/api.md writes them: `true` or `false`, anything else 400.
# (FastAPI's bool also takes 1/0, yes/no, on/off, t/f: `permanent=1` deleted for good.)
TrueOrFalse = Literal["true", "false"]
ByteCount = Annotated[int, Interval(ge=0, le=2**63 - 1), BeforeValidator(_whole_number)]
ExpiresIn = Annotated[int, Interval(ge=EXPIRES_IN_MIN, le=EXPIRES_IN_MAX), BeforeValidator(_whole_number)]


class ErrorBody(BaseModel):
    code: str = Field(description="Stable snake_case code for programs.", examples=["not_found"])
    message: str = Field(description="Human-readable explanation.")
    requestId: str | None = Field(description="The request's X-Request-Id.")
    details: dict[str, Any] | None = Field(
        default=None, description="Specifics, e.g. the offending field or quota figures."
    )


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class Usage(BaseModel):
    organizationId: str
    usedBytes: int = Field(description="Sum of the live assets' sizes, exact.")
    quotaBytes: int = Field(description="The organization's storage quota.")
    assetCount: int = Field(description="Live assets of the organization.")
    trashedBytes: int = Field(default=0, description="Issue 47: bytes in the trash (not in usedBytes).")
    trashedCount: int = Field(default=0, description="Issue 47: assets in the trash.")


def _json_integer(value: object) -> object:
    """JSON Schema's integer: 600 and 600.0 alike (schemathesis sends both); a string is not one."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# Strict (no "60"), but an integral number written with a fraction is the same integer.
JsonInt = Annotated[int, BeforeValidator(_json_integer)]


class TrashSettingsBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    retentionDays: JsonInt = Field(
        ge=0,
        le=TRASH_RETENTION_DAYS_MAX,
        strict=True,
        description="Days a deleted asset stays in the trash; 0: none.",
    )


class FolderUpdate(BaseModel):
    """At least one field; ``parentId`` null moves the folder to the root."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "anyOf": [{"required": ["name"]}, {"required": ["parentId"]}, {"required": ["expiryDays"]}]
        },
    )

    # Optional, not nullable: null is refused (400), so the document does not offer it.
    name: str | SkipJsonSchema[None] = Field(
        default=None, description="The new name (same rules as on create).", json_schema_extra=NAME_SCHEMA
    )
    parentId: str | None = Field(default=None, description="The new parent; null = root.")
    expiryDays: ExpiryDays | None = Field(
        default=None,
        description=(
            "The folder's default expiry for assets uploaded into it later, in days (1-3650); "
            "null = none. Assets already in it keep theirs."
        ),
    )

    def changes(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("name", "parentId", "expiryDays") if k in self.model_fields_set}


TAG_ITEMS: dict[str, Any] = {"items": {"type": "string", "pattern": TAG_PATTERN}}
METADATA_PATCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": 2 * MAX_KEYS,
    "propertyNames": {"pattern": KEY_PATTERN},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "maxLength": MAX_VALUE_CHARS},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
        ]
    },
}


# GET /api/assets?meta[KEY]=value (issue 50): a deepObject parameter.
META_FILTER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": 10,
    "propertyNames": {"pattern": KEY_PATTERN},
    "additionalProperties": {"type": "string", "maxLength": MAX_VALUE_CHARS},
}
META_FILTER_PARAMETER: dict[str, Any] = {
    "name": "meta",
    "in": "query",
    "required": False,
    "style": "deepObject",
    "explode": True,
    "description": "`meta[KEY]=value`: only assets whose `metadata.KEY` equals the value (a string, or "
    "a number or boolean as JSON writes it); at most 10.",
    "schema": META_FILTER_SCHEMA,
}


TAG_CHANGES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "add": {"type": "array", "maxItems": MAX_TAGS, **TAG_ITEMS},
        "remove": {"type": "array", "maxItems": MAX_TAGS, **TAG_ITEMS},
    },
}


class AssetUpdate(BaseModel):
    """At least one of the five; ``folderId`` null moves the asset to the root."""

    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={
            "anyOf": [
                {"required": ["name"]},
                {"required": ["folderId"]},
                {"required": ["visibility"]},
                {"required": ["expiresAt"]},
                {"required": ["metadata"]},
                {"required": ["tags"]},
            ]
        },
    )

    # Optional, not nullable: null is refused (400), so the document does not offer it.
    name: str | SkipJsonSchema[None] = Field(
        default=None, description="The new name. " + NAME_RULES, json_schema_extra=NAME_SCHEMA
    )
    folderId: str | None = Field(default=None, description="The new folder; null = root.")
    visibility: Visibility | SkipJsonSchema[None] = Field(
        default=None,
        description="`private`: `publicUrl` becomes null and the CDN answers the bare key 404 "
        "(signed URLs keep working); `public`: back. Takes effect at the CDN within 5 seconds.",
    )
    expiresAt: str | None = Field(
        default=None,
        max_length=40,
        description="Issue 47: when the asset goes to the trash by itself (ISO 8601 with a time zone, "
        "in the future, at most 10 years ahead); null clears it.",
    )

    # Checked (bounds, merge) by metadata, which names the field of a refusal; typed loosely
    # here so that every refusal has that one envelope (docs/api.md, issue 50).
    metadata: Any = Field(
        default=None,
        description="Merged into the asset's metadata: each key given is set, a key given null is "
        "deleted. The result is bounded as `Asset.metadata`.",
        json_schema_extra=METADATA_PATCH_SCHEMA,
    )
    tags: Any = Field(
        default=None,
        description="Tags to add and remove (a tag in both is 400); the result is at most 32 tags.",
        json_schema_extra=TAG_CHANGES_SCHEMA,
    )

    def changes(self) -> dict[str, Any]:
        sent = self.model_fields_set
        fields = ("name", "folderId", "visibility", "expiresAt", "metadata", "tags")
        return {k: getattr(self, k) for k in fields if k in sent}


AssetSort = Literal["-createdAt", "createdAt", "name", "-name", "size", "-size"]


class KeySelf(BaseModel):
    """What the calling key may do (``GET /api/keys/self``, issue 46)."""

    id: str
    kind: str = Field(description="`organization` or `user`.")
    organizationId: str
    userId: str | None
    scopes: list[str] = Field(description="As given at creation: actions and bundles.")
    actions: list[str] = Field(description="The actions the scopes allow.")
    folderId: str | None = Field(description="The folder subtree the key is confined to; null: none.")
    folderPath: str | None = Field(description="That folder's path (`/public/avatars`).")
    networks: list[str] = Field(description="CIDRs the key may be used from; empty: any.")
    expiresAt: str | None
    description: str = Field(description="The scopes in words.")


class Success(BaseModel):
    success: bool = Field(description="Always true.")


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the contract's error envelope."""
    descriptions = {
        400: "Invalid request (`invalid_request`, `organization_required`, `invalid_transform`).",
        401: "Missing, unknown, deleted or expired API key (`unauthorized`).",
        403: "No access to the organization or resource (`forbidden`), or the key's scopes lack the"
        " route's action (`insufficient_scope`, `details.required`).",
        404: "Unknown id (`not_found`).",
        408: "The client sent none of the upload's body for a minute (`request_timeout`).",
        409: "A sibling folder has the same name (`conflict`); a folder cannot move into its own"
        " subtree (`folder_cycle`); folders nest at most 100 deep, and a folder holds at most 10,000"
        " folders (`conflict`).",
        413: "File over 100 MiB (`file_too_large`) or over quota (`quota_exceeded`).",
        415: "Wrong Content-Type (`unsupported_media_type`).",
        429: "Rate limit hit (`rate_limited`); see Retry-After.",
        503: "A dependency is down (`unavailable`); see Retry-After.",
    }
    common = (400, 401, 403, 429, 503)
    return {
        s: {"model": ErrorEnvelope, "description": descriptions[s]}
        for s in sorted(set(statuses) | set(common))
    }


# Image transforms (CONTRACT §10). Values are checked by coffer_kit.contract.transforms, whose refusal is
# 400 ``invalid_transform``; the schema states the same bounds for clients.
SIDE_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 4096}
QUALITY_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 20, "maximum": 100}
FIT_SCHEMA: dict[str, Any] = {"type": "string", "enum": ["cover", "contain", "inside"]}
FORMAT_SCHEMA: dict[str, Any] = {"type": "string", "enum": ["webp", "avif", "jpeg", "png", "auto"]}


class TransformPresetBody(BaseModel):
    """An organization preset's parameters: at least one of ``w``, ``h``, ``fmt`` (null: unset)."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
                for name in ("w", "h", "fmt")
            ]
        }
    )

    w: int | None = Field(default=None, description="Width in pixels.", json_schema_extra=SIDE_SCHEMA)
    h: int | None = Field(default=None, description="Height in pixels.", json_schema_extra=SIDE_SCHEMA)
    fit: str | None = Field(default=None, description="Default `cover`.", json_schema_extra=FIT_SCHEMA)
    fmt: str | None = Field(
        default=None,
        description="Output format; omitted keeps the source's (GIF, TIFF: PNG); `auto` follows Accept.",
        json_schema_extra=FORMAT_SCHEMA,
    )
    q: int | None = Field(default=None, description="Quality, default 80.", json_schema_extra=QUALITY_SCHEMA)


class TransformPreset(BaseModel):
    name: str
    builtIn: bool = Field(description="Built-in presets (thumb, small, medium, large) cannot change.")
    w: int | None
    h: int | None
    fit: str
    fmt: str | None
    q: int


class TransformPresetList(BaseModel):
    presets: list[TransformPreset]


class SignedAsset(BaseModel):
    id: str
    name: str
    mimeType: str
    size: int


class SignedUrl(BaseModel):
    url: str = Field(description="CDN URL with `expires` and `signature`; no key needed.")
    expiresIn: int
    asset: SignedAsset


_MEDIA_RANGE = r"^(\*|[A-Za-z0-9!#$&^_.+*-]+/[A-Za-z0-9!#$&^_.+*-]+)$"


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null, for a loosely typed field (its description stays the field's)."""
    return {"anyOf": [{k: v for k, v in schema.items() if k != "description"}, {"type": "null"}]}


class UploadTokenCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    folderId: str | None = Field(
        default=None, max_length=64, description="Where the asset goes; omitted or null = root."
    )
    name: str | None = Field(
        default=None,
        description="Fixes the asset's name; else the file's name. " + NAME_RULES,
        json_schema_extra=NAME_SCHEMA,
    )
    maxBytes: JsonInt = Field(
        default=MAX_FILE_BYTES, ge=1, le=MAX_FILE_BYTES, strict=True, description="Largest file accepted."
    )
    contentTypes: list[Annotated[str, Field(pattern=_MEDIA_RANGE, max_length=255)]] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Media types accepted, `*` wildcards allowed (`image/*`); omitted = any.",
    )
    expiresIn: JsonInt = Field(default=600, ge=1, le=86_400, strict=True, description="Validity in seconds.")
    visibility: Visibility | None = Field(
        default=None,
        description="The uploaded asset's visibility, fixed (the form cannot change it); omitted or "
        "null = the organization's `defaultVisibility` at upload time.",
    )

    # Issues 47 and 50: what the token fixes about the asset. Checked by the route (bounds, the
    # instant), which names the field of a refusal; typed loosely here for that one envelope.
    assetExpiresAt: str | None = Field(
        default=None,
        max_length=40,
        description="The uploaded asset's `expiresAt`, fixed (the upload's own is ignored): ISO 8601 "
        "with a time zone, after the token itself expires, at most 10 years ahead; omitted or null = "
        "the upload's own, if any.",
    )
    metadata: Any = Field(
        default=None,
        description="The uploaded asset's metadata, fixed: the upload's own `metadata` and `tags` are "
        "then ignored. Bounded as `Asset.metadata`; omitted or null = the upload's own.",
        json_schema_extra=_nullable(METADATA_SCHEMA),
    )
    tags: Any = Field(
        default=None,
        description="The uploaded asset's tags, fixed, as `metadata` is; omitted or null = the upload's own.",
        json_schema_extra=_nullable(TAGS_SCHEMA),
    )
    acceptMetadata: bool = Field(
        default=True,
        strict=True,
        description="false: an upload carrying its own `metadata` or `tags` (form fields or tus "
        "`Upload-Metadata` entries) is refused with 400, naming the field.",
    )

    def content_types(self) -> list[str] | None:
        return [t.lower() for t in self.contentTypes] if self.contentTypes is not None else None


class OpenUpload(BaseModel):
    """An unfinished resumable upload of the organization (``GET /api/uploads``)."""

    id: str = Field(description="The upload's id (`tus_…`); its URL is `/api/uploads/tus/{id}`.")
    organizationId: str
    folderId: str | None
    name: str
    size: int = Field(description="`Upload-Length`.")
    offset: int = Field(description="Bytes stored so far.")
    reservedBytes: int = Field(
        description="What it holds against the quota now: `size` while it is written, 0 once idle."
    )
    createdAt: str
    expiresAt: str = Field(description="`Upload-Expires`.")
    viaToken: bool = Field(description="Created with an upload token (its capability is the credential).")


class OpenUploadList(BaseModel):
    uploads: list[OpenUpload]
    total: int | None = Field(
        default=None,
        description="Every open upload; on an offset page always, on a cursor page with `total=true`.",
    )
    limit: int
    offset: int | None = Field(default=None, description="Present on an offset page.")
    nextCursor: str | None = Field(
        default=None, description="The next page's `cursor`; null on the last page."
    )


class UploadToken(BaseModel):
    id: str = Field(description="`upt_…`: revoke the token with `DELETE /api/upload-tokens/{id}`.")
    token: str = Field(description="`cof_upl_…`: single use; shown once, stored only hashed.")
    url: str = Field(description="Where the browser posts the file (multipart, no key headers).")
    expiresAt: str = Field(description="ISO 8601 UTC with milliseconds.")
    expiresIn: int


def _multipart_body(file: str, name: str, **more: dict[str, Any]) -> dict[str, Any]:
    """An upload's ``openapi_extra``: a multipart body with ``file``, ``name`` and ``more`` fields."""
    properties = {
        "file": {"type": "string", "format": "binary", "description": file},
        "name": {"type": "string", "description": name, **UPLOAD_NAME_SCHEMA},
        **more,
    }
    schema = {"type": "object", "required": ["file"], "properties": properties}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


# Issue 50: the asset's own metadata and tags, at upload.
DESCRIBE_FIELDS: dict[str, Any] = {
    "metadata": {
        "type": "string",
        "description": "A JSON object: the asset's `metadata` (bounded as `Asset.metadata`); empty = none.",
    },
    "tags": {"type": "string", "description": "The asset's tags, separated by commas; empty = none."},
}
TOKEN_UPLOAD_BODY = _multipart_body(
    "The file, at most the token's maxBytes.",
    "Asset name, unless the token fixes it; default: the file name.",
    **DESCRIBE_FIELDS,
)
UPLOAD_BODY = _multipart_body(
    "The file, at most 100 MiB.",
    "Asset name; defaults to the file name. " + NAME_RULES,
    folderId={"type": "string", "description": "Folder id; omitted or empty = root."},
    visibility={
        "type": "string",
        "enum": ["public", "private"],
        "description": "`public` or `private`; omitted or empty = the organization's `defaultVisibility`.",
    },
    **DESCRIBE_FIELDS,
)
