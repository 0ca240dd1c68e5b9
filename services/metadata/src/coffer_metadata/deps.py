"""Dependencies of metadata's routes: its typed state (settings, database) from the lifespan."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from coffer_kit.db import DatabaseDep, DatabaseState, SessionDep, database_of
from coffer_kit.state import request_state
from coffer_metadata.config import Settings

__all__ = ["DatabaseDep", "SessionDep", "SettingsDep", "database_of", "get_settings"]


async def get_settings(request: Request) -> Settings:
    settings: Settings = request_state(request, DatabaseState).settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_settings)]
