"""Public request and response models: they are the OpenAPI document clients are generated from."""

from __future__ import annotations

from typing import Annotated, Any

from annotated_types import Interval
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def _whole_number(value: Any) -> Any:
    """Query integers are written as digits: "2.0" or "1e3" are refused, not rounded."""
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        raise ValueError("must be a whole number")
    return value


def whole_number(ge: int, le: int | None = None) -> Any:
    """An integer query parameter within [ge, le] that accepts only integer notation."""
    return Annotated[int, Interval(ge=ge, le=le), BeforeValidator(_whole_number)]


class ErrorBody(BaseModel):
    code: str = Field(description="Stable snake_case code for programs.", examples=["not_found"])
    message: str = Field(description="Human-readable explanation.")
    requestId: str | None = Field(description="The request's X-Request-Id.")
    details: dict[str, Any] | None = Field(
        default=None, description="Specifics, e.g. the offending field or quota figures."
    )


class ErrorEnvelope(BaseModel):
    error: ErrorBody


class Folder(BaseModel):
    id: str = Field(examples=["fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"])
    organizationId: str
    parentId: str | None = Field(description="Parent folder; null for a root folder.")
    name: str
    createdAt: str = Field(
        description="ISO 8601 UTC with milliseconds.", examples=["2026-11-22T10:15:30.123Z"]
    )


class FolderList(BaseModel):
    folders: list[Folder]


class FolderCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(
        description="1–255 characters after NFC; no control characters, no '/', not '.' or '..'."
    )
    parentId: str | None = Field(default=None, description="Parent folder id; omitted or null = root.")


class Success(BaseModel):
    success: bool = True


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the contract's error envelope."""
    descriptions = {
        400: "Invalid request (`invalid_request`, `organization_required`).",
        401: "Missing, unknown, deleted or expired API key (`unauthorized`).",
        403: "No access to the organization or resource (`forbidden`).",
        404: "Unknown id (`not_found`).",
        409: "A sibling folder has the same name (`conflict`).",
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
    publicUrl: str = Field(description="Public CDN URL; no key needed.")
    createdAt: str = Field(description="ISO 8601 UTC with milliseconds.")


class AssetList(BaseModel):
    assets: list[Asset]
    total: int = Field(description="Every matching asset, not just this page.")
    limit: int
    offset: int


class SignedAsset(BaseModel):
    id: str
    name: str
    mimeType: str
    size: int


class SignedUrl(BaseModel):
    url: str = Field(description="CDN URL with `expires` and `signature`; no key needed.")
    expiresIn: int
    asset: SignedAsset


UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "The file, at most 100 MiB.",
                        },
                        "name": {"type": "string", "description": "Asset name; defaults to the file name."},
                        "folderId": {"type": "string", "description": "Folder id; omitted or empty = root."},
                    },
                }
            }
        },
    }
}
