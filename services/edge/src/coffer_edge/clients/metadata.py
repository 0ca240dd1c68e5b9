"""metadata client: folders and assets, always scoped by the principal's organization."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from coffer_edge.clients.base import ServiceClient


class MetadataClient(ServiceClient):
    service = "metadata"

    async def list_folders(self, org_id: str, parent_id: str | None, *, request_id: str) -> Any:
        params = {"parentId": parent_id} if parent_id else {}
        return await self.json(
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
            "DELETE", f"/internal/v1/orgs/{org_id}/folders/{quote(folder_id, safe='')}", request_id=request_id
        )
