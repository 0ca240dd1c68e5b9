"""Dependencies of blob's routes: the storage driver and the settings, from app state."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from coffer_blob.config import Settings
from coffer_blob.storage import Storage


async def get_storage(request: Request) -> Storage:
    return request.app.state.storage  # type: ignore[no-any-return]


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


StorageDep = Annotated[Storage, Depends(get_storage)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
