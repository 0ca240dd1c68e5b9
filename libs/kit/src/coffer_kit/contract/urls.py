"""Storage keys and the URLs made of them (docs/contract.md §4, §6).

A key is ``{organizationId}/{assetId}/{filename}``; everything stored for one asset lives
under ``{organizationId}/{assetId}/``. A public URL is ``{cdn_url}/`` and the key, each
segment percent-encoded per RFC 3986.
"""

from __future__ import annotations

from urllib.parse import quote

from coffer_kit.contract.ids import is_asset_id, is_org_id
from coffer_kit.contract.limits import MAX_FILE_BYTES

__all__ = ["MAX_FILE_BYTES", "asset_prefix", "object_key", "public_url", "split_key"]


def asset_prefix(org_id: str, asset_id: str) -> str:
    """Everything stored for one asset (its object and any unfinished upload) is under this."""
    return f"{org_id}/{asset_id}/"


def object_key(org_id: str, asset_id: str, filename: str) -> str:
    """The key of an asset's object; ``filename`` is already safe (blob sanitises it)."""
    return asset_prefix(org_id, asset_id) + filename


def split_key(key: str) -> tuple[str, str, str] | None:
    """(organization id, asset id, filename) of a key shaped like one, else None."""
    parts = key.split("/")
    if len(parts) != 3 or not is_org_id(parts[0]) or not is_asset_id(parts[1]):
        return None
    return parts[0], parts[1], parts[2]


def public_url(cdn_url: str, key: str) -> str:
    """``{cdn_url}/`` and the key, each segment percent-encoded per RFC 3986."""
    return cdn_url.rstrip("/") + "/" + "/".join(quote(segment, safe="") for segment in key.split("/"))
