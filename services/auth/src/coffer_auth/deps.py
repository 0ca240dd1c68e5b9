"""Dependencies of auth's routes: its typed state (settings, database, the password-hashing
limiter) from the lifespan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from anyio import CapacityLimiter
from fastapi import Depends, Request

from coffer_auth.config import Settings
from coffer_kit.db import DatabaseDep, DatabaseState, SessionDep
from coffer_kit.state import request_state

__all__ = ["AuthState", "AuthStateDep", "DatabaseDep", "SessionDep", "SettingsDep"]


@dataclass(slots=True)
class AuthState(DatabaseState[Settings]):
    """auth's state: the database service's, and the threads password hashing may use."""

    password_limiter: CapacityLimiter


async def get_settings(request: Request) -> Settings:
    settings: Settings = request_state(request, DatabaseState).settings
    return settings


async def get_state(request: Request) -> AuthState:
    return request_state(request, AuthState)


SettingsDep = Annotated[Settings, Depends(get_settings)]
AuthStateDep = Annotated[AuthState, Depends(get_state)]
