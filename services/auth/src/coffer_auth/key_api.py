"""The key API (issue 46): keys managed by a key, through edge's ``/api/keys``.

edge asks (``/internal/v1/orgs/{org}/api-keys``; the dashboard's own ``.../keys`` are a
user's) for the calling key (``x-caller-key-id``), which it has authenticated and whose
``keys:manage`` it has checked; auth reads that key again and applies the owners' rules of the
dashboard (``apikeys``) and the one rule of its own: a key never makes or manages a key that
can do more than itself (actions, networks, expiry). Whether a folder lies inside the
caller's subtree is metadata's to answer: edge checks it before it asks here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Header
from sqlmodel import Session, col, select

from coffer_auth import apikeys
from coffer_auth.audit import Actor
from coffer_auth.deps import SessionDep
from coffer_auth.models import ApiKey, KeyKind, Membership, Organization, Role
from coffer_kit.contract import scopes
from coffer_kit.contract.accounts import KeyCreatedOut, KeyOut, KeyRotatedOut, KeysOut, SuccessOut
from coffer_kit.contract.errors import (
    forbidden,
    insufficient_scope,
    invalid,
    not_found,
    unauthorized,
)
from coffer_kit.contract.timeutil import as_utc, utcnow
from coffer_kit.contract.wire import ACTOR_HEADER, KeyCreate, KeyRotate
from coffer_kit.internal_token import require_internal_token

router = APIRouter(
    prefix="/internal/v1/orgs/{org_id}/api-keys", dependencies=[Depends(require_internal_token)]
)


@dataclass(frozen=True, slots=True)
class Caller:
    """The key that calls the key API, as auth knows it."""

    row: ApiKey
    org: Organization
    # The key's role towards the organization's keys: an organization key manages them as an
    # owner does; a personal key has its user's role.
    role: str
    actions: frozenset[str]
    networks: tuple[scopes.Network, ...]
    actor: Actor


def _caller(session: Session, org_id: str, key_id: str, actor_header: str | None) -> Caller:
    row = session.get(ApiKey, key_id)
    org = session.get(Organization, org_id)
    now = utcnow()
    if row is None or org is None or (row.expires_at is not None and as_utc(row.expires_at) <= now):
        raise unauthorized("The API key is unknown, deleted or expired.")
    if row.kind == KeyKind.organization:
        if row.organization_id != org_id:
            raise forbidden("This key does not belong to that organization.")
        role = Role.owner.value
    else:
        member = session.exec(
            select(Membership).where(Membership.organization_id == org_id, Membership.user_id == row.user_id)
        ).first()
        if member is None:
            raise forbidden("The key's user is not a member of that organization.")
        role = member.role
    actions = scopes.expand(row.scopes.split())
    if "keys:manage" not in actions:
        raise insufficient_scope("keys:manage", scopes.ordered(actions))
    seen: dict[str, str] = {}
    if actor_header:
        try:
            parsed = json.loads(actor_header)
            seen = parsed if isinstance(parsed, dict) else {}
        except ValueError:
            seen = {}
    actor = Actor(
        type="key",
        id=row.id,
        label=(row.name or row.prefix)[:320],
        ip=str(seen.get("ip") or "")[:64] or None,
        user_agent=str(seen.get("userAgent") or "")[:255] or None,
        request_id=str(seen.get("requestId") or "")[:128] or None,
    )
    return Caller(row, org, role, actions, scopes.networks_of(row.networks.split()), actor)


def caller_dep(
    org_id: str,
    session: SessionDep,
    caller_key_id: Annotated[str, Header(alias="x-caller-key-id", max_length=64)],
    actor_header: Annotated[str | None, Header(alias=ACTOR_HEADER, max_length=4096)] = None,
) -> Caller:
    return _caller(session, org_id, caller_key_id, actor_header)


CallerDep = Annotated[Caller, Depends(caller_dep)]


def _within_caller(caller: Caller, row: ApiKey) -> bool:
    """Whether a key can do no more than the caller (the folder aside: edge's to check)."""
    if not scopes.expand(row.scopes.split()) <= caller.actions:
        return False
    if caller.row.folder_id is not None and row.folder_id is None:
        return False
    if caller.networks and not scopes.networks_within(
        scopes.networks_of(row.networks.split()), caller.networks
    ):
        return False
    return not (
        caller.row.expires_at is not None
        and (row.expires_at is None or as_utc(row.expires_at) > as_utc(caller.row.expires_at))
    )


def _visible(session: Session, caller: Caller, key_id: str) -> ApiKey:
    """A key the caller may see: the dashboard's rule for its user (an organization key sees
    the organization keys), and no more than the caller can do; anything else is 404."""
    row = apikeys.get(session, org_id=caller.org.id, key_id=key_id)
    mine = row.kind == KeyKind.user and row.user_id == caller.row.user_id
    if row.kind == KeyKind.user and caller.row.kind == KeyKind.organization:
        raise not_found(f"Key {key_id} does not exist.")
    if row.kind == KeyKind.user and not mine and caller.role != Role.owner:
        raise not_found(f"Key {key_id} does not exist.")
    if not _within_caller(caller, row):
        raise not_found(f"Key {key_id} does not exist.")
    return row


def _manage(session: Session, caller: Caller, row: ApiKey) -> None:
    apikeys.require_manage(row, user_id=caller.row.user_id or "", role=caller.role)
    # A key as wide as its maker sees it; rotating it took it over (its holder locked out, the
    # new key made by nobody), and deleting it ended the key it was made under.
    if row.id in apikeys.ancestors(session, caller.row):
        raise forbidden("A key cannot rotate or delete the key that made it, nor that key's makers.")


@router.get("", response_model=KeysOut)
def list_keys(caller: CallerDep, session: SessionDep) -> KeysOut:
    viewer_role = caller.role if caller.row.kind == KeyKind.user else Role.member.value
    listed = apikeys.org_keys(
        session, org_id=caller.org.id, viewer_id=caller.row.user_id or "", viewer_role=viewer_role
    )
    rows = {r.id: r for r in session.exec(select(ApiKey).where(col(ApiKey.id).in_([k.id for k in listed])))}
    return KeysOut(keys=[k for k in listed if k.id in rows and _within_caller(caller, rows[k.id])])


@router.get("/{key_id}", response_model=KeyOut)
def get_key(key_id: str, caller: CallerDep, session: SessionDep) -> KeyOut:
    row = _visible(session, caller, key_id)
    return apikeys.view_of(session, row, here=caller.org, viewer_id=caller.row.user_id or "")


@router.post("", status_code=201, response_model=KeyCreatedOut)
def create_key(body: KeyCreate, caller: CallerDep, session: SessionDep) -> KeyCreatedOut:
    kind = KeyKind(body.kind) if body.kind else KeyKind(caller.row.kind)
    if kind == KeyKind.organization and caller.role != Role.owner:
        raise forbidden("Only organization keys and owners' keys make organization keys.")
    if kind == KeyKind.user and caller.row.kind != KeyKind.user:
        raise forbidden("A personal key is its user's alone: make it with one of that user's keys.")
    wanted = scopes.normalize(body.scopes)
    lacking = [a for a in scopes.ordered(scopes.expand(wanted)) if a not in caller.actions]
    if lacking:
        raise insufficient_scope(
            lacking[0],
            scopes.ordered(caller.actions),
            f"A key cannot make a key that may do more than itself: it lacks {lacking[0]}.",
        )
    if caller.row.folder_id is not None and body.folder_id is None:
        raise insufficient_scope(
            "folder", scopes.ordered(caller.actions), "A subtree key makes subtree keys."
        )
    networks = scopes.parse_networks(body.networks) or [str(n) for n in caller.networks]
    if not scopes.networks_within(scopes.networks_of(networks), caller.networks):
        raise insufficient_scope(
            "networks", scopes.ordered(caller.actions), "The new key's networks must lie in this key's."
        )
    expires_in = body.expires_in
    if caller.row.expires_at is not None:
        left = int((as_utc(caller.row.expires_at) - utcnow()).total_seconds())
        if expires_in is None:
            expires_in = max(1, left)
        elif expires_in > left:
            raise insufficient_scope(
                "expiry", scopes.ordered(caller.actions), "The new key cannot outlive the key that makes it."
            )
    if expires_in is not None and expires_in <= 0:
        raise invalid("The expiry must be in the future (expiresIn > 0).", field="expiresIn")
    row, secret = apikeys.create(
        session,
        caller.actor,
        org=caller.org,
        kind=kind,
        user_id=caller.row.user_id,
        name=body.name,
        expires_in=expires_in,
        created_by=None,
        scope_names=wanted,
        folder_id=body.folder_id,
        networks=networks,
        parent=caller.row,
    )
    return KeyCreatedOut(key=secret, api_key=apikeys.view_of(session, row))


@router.delete("/{key_id}", response_model=SuccessOut)
def delete_key(key_id: str, caller: CallerDep, session: SessionDep) -> SuccessOut:
    row = _visible(session, caller, key_id)
    _manage(session, caller, row)
    apikeys.delete(session, caller.actor, row=row)
    return SuccessOut()


@router.post("/{key_id}/rotate", status_code=201, response_model=KeyRotatedOut)
def rotate_key(key_id: str, body: KeyRotate, caller: CallerDep, session: SessionDep) -> KeyRotatedOut:
    row = _visible(session, caller, key_id)
    _manage(session, caller, row)
    # Read before the rotation: a key rotating itself is ``row`` too, whose expiry the rotation
    # moves to the grace's end (its successor died with it).
    end = caller.row.expires_at
    new, secret, previous = apikeys.rotate(
        session, caller.actor, org=caller.org, row=row, grace_seconds=body.grace_seconds, created_by=None
    )
    if end is not None and (new.expires_at is None or as_utc(new.expires_at) > as_utc(end)):
        new.expires_at = end  # no key outlives the key that made it, a rotated one included
        session.add(new)
        session.flush()
    return KeyRotatedOut(
        key=secret,
        api_key=apikeys.view_of(session, new),
        previous=apikeys.view_of(session, previous) if previous is not None else None,
    )
