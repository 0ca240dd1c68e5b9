"""metadata client: folders and assets, always scoped by the principal's organization."""

from __future__ import annotations

import json as jsonlib
from typing import Any
from urllib.parse import quote

from coffer_edge.clients.base import ServiceClient


def _seg(value: str) -> str:
    """A caller-supplied id as one path segment (never a path of its own)."""
    return quote(value, safe="")


class MetadataClient(ServiceClient):
    """metadata's internal API; reads typed ``-> bytes`` answer the public body as it is."""

    service = "metadata"

    # Folders
    async def list_folders(self, org_id: str, parent_id: str | None, *, request_id: str) -> bytes:
        params = {"parentId": parent_id} if parent_id else {}
        return await self.request(
            "GET", f"/internal/v1/orgs/{org_id}/folders", params=params, request_id=request_id
        )

    async def create_folder(self, org_id: str, name: str, parent_id: str | None, *, request_id: str) -> Any:
        return await self.json(
            "POST",
            f"/internal/v1/orgs/{org_id}/folders",
            json={"name": name, "parentId": parent_id},
            request_id=request_id,
        )

    async def delete_folder(self, org_id: str, folder_id: str, *, request_id: str) -> Any:
        return await self.json(
            "DELETE", f"/internal/v1/orgs/{org_id}/folders/{_seg(folder_id)}", request_id=request_id
        )

    # Assets
    async def register_intent(self, org_id: str, asset_id: str, *, request_id: str) -> Any:
        return await self.json(
            "POST", f"/internal/v1/orgs/{org_id}/intents", json={"assetId": asset_id}, request_id=request_id
        )

    async def abandon_intent(self, org_id: str, asset_id: str, *, request_id: str) -> Any:
        return await self.json(
            "DELETE", f"/internal/v1/orgs/{org_id}/intents/{asset_id}", request_id=request_id
        )

    async def commit_upload(self, org_id: str, asset: dict[str, Any], *, request_id: str) -> Any:
        return await self.json(
            "POST", f"/internal/v1/orgs/{org_id}/assets", json=asset, request_id=request_id
        )

    async def list_assets(self, org_id: str, params: dict[str, Any], *, request_id: str) -> bytes:
        return await self.request(
            "GET", f"/internal/v1/orgs/{org_id}/assets", params=params, request_id=request_id
        )

    async def get_asset_body(self, org_id: str, asset_id: str, *, request_id: str) -> bytes:
        return await self.request(
            "GET", f"/internal/v1/orgs/{org_id}/assets/{_seg(asset_id)}", request_id=request_id
        )

    async def get_asset(self, org_id: str, asset_id: str, *, request_id: str) -> Any:
        return jsonlib.loads(await self.get_asset_body(org_id, asset_id, request_id=request_id))

    async def hide_asset(self, org_id: str, asset_id: str, *, request_id: str) -> str:
        body = await self.json(
            "POST", f"/internal/v1/orgs/{org_id}/assets/{_seg(asset_id)}/tombstone", request_id=request_id
        )
        return str(body["key"])

    async def finish_delete(self, asset_id: str, *, request_id: str | None = None) -> None:
        await self.request("DELETE", f"/internal/v1/tombstones/{asset_id}", request_id=request_id)

    # Sweeper
    async def sweep_candidates(self, *, intent_age: float, tombstone_age: float, limit: int) -> Any:
        params = {"intentAgeSeconds": intent_age, "tombstoneAgeSeconds": tombstone_age, "limit": limit}
        return await self.json("POST", "/internal/v1/sweep", params=params)

    async def finish_intent(self, asset_id: str) -> None:
        await self.request("DELETE", f"/internal/v1/sweep/intents/{asset_id}")
