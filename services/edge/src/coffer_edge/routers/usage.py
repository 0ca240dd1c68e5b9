"""``/api/usage`` (CONTRACT §8): how much of its quota the organization uses."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from coffer_edge.deps import MetadataDep, PrincipalDep, RequestIdDep, needs
from coffer_edge.schemas import Usage, errors

router = APIRouter(prefix="/api/usage", tags=["usage"])


@router.get("", response_model=Usage, responses=errors(), openapi_extra=needs("usage:read"))
async def get_usage(principal: PrincipalDep, metadata: MetadataDep, rid: RequestIdDep) -> Any:
    """Bytes and assets stored by the acting organization, and its quota."""
    used = await metadata.usage(principal.organization_id, request_id=rid)
    return {
        "organizationId": principal.organization_id,
        "usedBytes": used.used_bytes,
        "quotaBytes": principal.quota_bytes,
        "assetCount": used.asset_count,
        "trashedBytes": used.trashed_bytes,
        "trashedCount": used.trashed_count,
    }
