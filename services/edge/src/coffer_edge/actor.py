"""Who the current request acts as, told to metadata with every call (``coffer-actor``), so the
event metadata writes with each change names the key, token or dashboard user behind it: the
organization's audit log is built from those events (issue 23), and webhooks will be (issue 25).

A context variable, set once the caller is known (``deps.authenticate``, the upload-token route,
the dashboard's visit): every request runs in its own task, so it never outlives its request.
"""

from __future__ import annotations

import json
from contextvars import ContextVar

from starlette.requests import Request

from coffer_kit.contract.errors import request_id_of
from coffer_kit.contract.wire import Actor, ActorType

_current: ContextVar[Actor | None] = ContextVar("coffer_actor", default=None)
# The folder the request's key is confined to (issue 46), sent to metadata with every call.
_subtree: ContextVar[str | None] = ContextVar("coffer_subtree", default=None)


def act_as(
    request: Request,
    type: ActorType,
    id: str,
    *,
    user_id: str | None = None,
    key_id: str | None = None,
    label: str | None = None,
) -> None:
    """The request's changes are made by this caller, from the request's client."""
    _current.set(
        Actor.model_construct(
            type=type,
            id=id,
            user_id=user_id,
            key_id=key_id,
            label=label,
            ip=request.client.host if request.client else None,
            user_agent=(request.headers.get("user-agent") or "")[:255] or None,
            request_id=request_id_of(request),
        )
    )


def current_actor() -> Actor | None:
    """The current request's caller (None outside one)."""
    return _current.get()


def actor_header() -> str | None:
    """The ``coffer-actor`` header's value (ASCII JSON), or None outside a caller's request."""
    actor = _current.get()
    if actor is None:
        return None
    return json.dumps(actor.model_dump(by_alias=True, exclude_none=True), separators=(",", ":"))


def confine_to(folder_id: str | None) -> None:
    """The request's key sees only this folder's subtree (None: the whole organization)."""
    _subtree.set(folder_id)


def subtree_root() -> str | None:
    """The folder the current request is confined to, or None."""
    return _subtree.get()
