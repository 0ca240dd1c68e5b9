"""Typed application state: what a service's lifespan opens, reached through one accessor.

Each service declares its state as a dataclass (settings, engine or storage, clients), its
lifespan stores one instance with :func:`install_state`, and its ``deps.py`` reads it back with
:func:`state_of` behind ``Annotated`` dependencies. Nothing else touches ``app.state``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from starlette.applications import Starlette
from starlette.requests import HTTPConnection

from coffer_kit.settings import BaseServiceSettings

SettingsT = TypeVar("SettingsT", bound=BaseServiceSettings)
StateT = TypeVar("StateT", bound="ServiceState[Any]")
T = TypeVar("T")

_ATTRIBUTE = "coffer"


@dataclass(slots=True)
class ServiceState(Generic[SettingsT]):
    """What every service's state holds; services extend it with what their lifespan opens."""

    settings: SettingsT


def install_state(app: Starlette, state: ServiceState[SettingsT]) -> None:
    setattr(app.state, _ATTRIBUTE, state)


def clear_state(app: Starlette) -> None:
    setattr(app.state, _ATTRIBUTE, None)


def installed_state(app: Starlette, kind: type[StateT]) -> StateT | None:
    """The app's state as ``kind``, or None outside its lifespan (e.g. for a metrics scrape)."""
    state = getattr(app.state, _ATTRIBUTE, None)
    return state if isinstance(state, kind) else None


def state_of(app: Starlette, kind: type[StateT]) -> StateT:
    """The app's state as ``kind``; refuses when the lifespan has not installed it."""
    state = installed_state(app, kind)
    if state is None:
        raise RuntimeError(f"{kind.__name__} is not installed: is the app's lifespan running?")
    return state


def request_state(connection: HTTPConnection, kind: type[StateT]) -> StateT:
    """The state of the app serving this request."""
    return state_of(connection.app, kind)


def from_state(kind: type[StateT], pick: Callable[[StateT], T]) -> Callable[[HTTPConnection], Awaitable[T]]:
    """A dependency answering ``pick(state)`` (async: it costs no thread-pool trip)."""

    async def dependency(connection: HTTPConnection) -> T:
        return pick(request_state(connection, kind))

    return dependency
