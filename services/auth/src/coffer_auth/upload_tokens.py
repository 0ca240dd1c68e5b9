"""Upload tokens (CONTRACT §8): short-lived, single-use credentials for one browser upload.

A server holding an API key mints a token through edge; the browser sends it instead of a key.
Only the token's SHA-256 is stored (edge generates the token and sends only its hash, as it
does for keys). A token is *claimed* by an upload just before that upload commits, with a
conditional update, so of any number of concurrent uploads exactly one can hold it; an upload
that fails after claiming gives it back, so a token is spent only by an upload that succeeds.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Header
from sqlalchemy import BigInteger, Column, DateTime, ForeignKey, String, Text, delete, update
from sqlmodel import Field as SQLField
from sqlmodel import Session, SQLModel, col, select

from coffer_auth import apikeys
from coffer_auth.deps import SessionDep
from coffer_auth.models import (
    MAX_ROTATIONS_FOLLOWED,
    ApiKey,
    DashboardSession,
    KeyKind,
    Membership,
    Organization,
)
from coffer_kit.contract.errors import not_found, unauthorized
from coffer_kit.contract.ids import UPLOAD_TOKEN, new_id
from coffer_kit.contract.timeutil import as_utc, isoformat, utcnow
from coffer_kit.contract.wire import (
    Done,
    MinterRef,
    MintersIn,
    MintersOut,
    TokenAsset,
    TokenClaim,
    UploadGrant,
    UploadTokenCreated,
    UploadTokenIn,
    UploadTokenPlace,
)
from coffer_kit.internal_token import require_internal_token

# Expired tokens are deleted this long after they expired, when their organization mints again.
KEEP_EXPIRED = timedelta(days=1)


class UploadToken(SQLModel, table=True):
    __tablename__ = "upload_tokens"

    id: str = SQLField(primary_key=True, max_length=40)
    # SHA-256 of the full token, hex. The token itself is never stored.
    token_hash: str = SQLField(sa_column=Column(String(64), unique=True, nullable=False))
    organization_id: str = SQLField(
        sa_column=Column(
            String(40), ForeignKey("organizations.id", ondelete="CASCADE"), nullable=False, index=True
        )
    )
    # The API key that minted it: the token lives only while that key does (and, for a
    # personal key, while its user is a member of the organization).
    key_id: str | None = SQLField(default=None, max_length=40)
    # The dashboard user who minted it (no key): it lives only while that user is a member, and
    # the session it was minted in lives (their uploads' capabilities with it).
    user_id: str | None = SQLField(default=None, max_length=40)
    session_id: str | None = SQLField(default=None, max_length=40)
    folder_id: str | None = SQLField(default=None, max_length=40)
    name: str | None = SQLField(default=None, max_length=1024)
    max_bytes: int = SQLField(sa_column=Column(BigInteger, nullable=False))
    # A JSON list of media ranges (``image/*``), or NULL for any media type.
    content_types: str | None = SQLField(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = SQLField(sa_column=Column(DateTime(timezone=True), nullable=False))
    expires_at: datetime = SQLField(sa_column=Column(DateTime(timezone=True), nullable=False, index=True))
    # Set when an upload claims the token (just before it commits), cleared if that upload fails.
    used_at: datetime | None = SQLField(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    asset_id: str | None = SQLField(default=None, max_length=40)
    # CONTRACT §12: 'public' or 'private', fixed for the upload; NULL: the organization's
    # default when the upload comes.
    visibility: str | None = SQLField(default=None, max_length=16)
    # Issues 47 and 50: what the token fixes about its asset (``TokenAsset`` as JSON); NULL: nothing.
    asset: str | None = SQLField(default=None, sa_column=Column(Text, nullable=True))


TABLES = [UploadToken.__table__]  # type: ignore[attr-defined]


def create(
    session: Session,
    *,
    org_id: str,
    token_hash: str,
    key_id: str | None,
    folder_id: str | None,
    name: str | None,
    max_bytes: int,
    content_types: list[str] | None,
    expires_in: int,
    visibility: str | None = None,
    user_id: str | None = None,
    session_id: str | None = None,
    asset: TokenAsset | None = None,
) -> UploadToken:
    """Store a new token's hash and scope."""
    if session.get(Organization, org_id) is None:
        raise not_found(f"Organization {org_id} does not exist.")
    now = utcnow()
    session.exec(
        delete(UploadToken).where(
            col(UploadToken.organization_id) == org_id, col(UploadToken.expires_at) < now - KEEP_EXPIRED
        )
    )
    row = UploadToken(
        id=new_id(UPLOAD_TOKEN),
        token_hash=token_hash,
        organization_id=org_id,
        key_id=key_id,
        user_id=user_id,
        session_id=session_id,
        folder_id=folder_id,
        name=name,
        max_bytes=max_bytes,
        content_types=json.dumps(content_types) if content_types is not None else None,
        created_at=now,
        expires_at=now + timedelta(seconds=expires_in),
        visibility=visibility,
        asset=asset.model_dump_json() if asset is not None else None,
    )
    session.add(row)
    session.flush()
    return row


def resolve(session: Session, *, token_hash: str) -> UploadGrant:
    """The scope of a live token, and its organization's quota; 401 for any other token."""
    row = session.exec(select(UploadToken).where(UploadToken.token_hash == token_hash)).first()
    if row is None:
        raise unauthorized("The upload token is unknown.")
    if as_utc(row.expires_at) <= utcnow():
        raise unauthorized("The upload token has expired.")
    if row.used_at is not None:
        raise unauthorized("The upload token was used already.")
    minter = _minter(session, key_id=row.key_id, org_id=row.organization_id) if row.key_id else None
    if row.key_id is not None and minter is None:
        raise unauthorized("The upload token's key was deleted or its user left the organization.")
    if row.user_id is not None and not _member(session, user_id=row.user_id, org_id=row.organization_id):
        raise unauthorized("The upload token's user left the organization.")
    if not _session_lives(session, row):
        raise unauthorized("The upload token's dashboard session has ended.")
    org = session.get(Organization, row.organization_id)
    if org is None:
        raise unauthorized("The upload token's organization no longer exists.")
    return UploadGrant(
        token_id=row.id,
        organization_id=row.organization_id,
        quota_bytes=org.quota_bytes,
        folder_id=row.folder_id,
        name=row.name,
        max_bytes=row.max_bytes,
        content_types=json.loads(row.content_types) if row.content_types is not None else None,
        expires_at=isoformat(row.expires_at),
        visibility=row.visibility,
        default_visibility=org.default_visibility,
        key_id=row.key_id,
        user_id=row.user_id,
        ingest=org.ingest(),
        asset=TokenAsset.model_validate_json(row.asset) if row.asset is not None else None,
        confined_to=minter.folder_id if minter is not None else None,
        confined_within=apikeys.makers_folders(session, minter) if minter is not None else [],
    )


def minters(session: Session, refs: list[MinterRef]) -> MintersOut:
    """Whether each minter can still act in its organization (an upload token's key, or its
    dashboard user, or the ones recorded on the token), and that organization's quota. A token
    that no longer exists counts as a minter gone."""
    acting: list[bool] = []
    quotas: list[int | None] = []
    confined: list[str | None] = []
    within: list[list[str]] = []
    until: list[str | None] = []
    for ref in refs:
        org = session.get(Organization, ref.organization_id)
        quotas.append(org.quota_bytes if org is not None else None)
        key_id, user_id = ref.key_id, ref.user_id
        token = session.get(UploadToken, ref.token_id) if ref.token_id is not None else None
        if key_id is None and user_id is None and ref.token_id is not None:
            if token is None or token.organization_id != ref.organization_id:
                acting.append(False)
                confined.append(None)
                within.append([])
                until.append(None)
                continue
            key_id, user_id = token.key_id, token.user_id
        alive = org is not None
        key = None
        if alive and key_id is not None:
            key = _minter(session, key_id=key_id, org_id=ref.organization_id)
            alive = key is not None
        if alive and user_id is not None:
            alive = _member(session, user_id=user_id, org_id=ref.organization_id)
        if alive and token is not None and token.organization_id == ref.organization_id:
            alive = _session_lives(session, token)
        acting.append(alive)
        confined.append(key.folder_id if key is not None else None)
        within.append(apikeys.makers_folders(session, key) if key is not None else [])
        until.append(isoformat(key.expires_at) if key is not None and key.expires_at is not None else None)
    return MintersOut(
        acting=acting, quota_bytes=quotas, confined_to=confined, confined_within=within, acting_until=until
    )


def _session_lives(session: Session, token: UploadToken) -> bool:
    """Whether the dashboard session a token was minted in still lives (a token minted with a
    key, or before tokens recorded sessions, names none). Signed out, revoked, ended by a
    password change or past its end, it takes its tokens' uploads along."""
    if token.session_id is None:
        return True
    row = session.get(DashboardSession, token.session_id)
    return row is not None and as_utc(row.expires_at) > utcnow()


def move_session(session: Session, *, old_id: str, new_id: str) -> None:
    """The tokens minted in a dashboard session now name the session that replaced it (a
    re-authentication: the same browser), so that its resumable uploads go on."""
    session.exec(update(UploadToken).where(col(UploadToken.session_id) == old_id).values(session_id=new_id))


def _member(session: Session, *, user_id: str, org_id: str) -> bool:
    found = select(Membership).where(Membership.organization_id == org_id, Membership.user_id == user_id)
    return session.exec(found).first() is not None


def _minter(session: Session, *, key_id: str, org_id: str) -> ApiKey | None:
    """The key that minted a token, if it could still act in its organization (issue 23:
    tokens outlived a deleted key, or a member removed, by up to their 24 h); or, for a key
    rotated since, the key that replaced it (a rotation ends no authority)."""
    key = session.get(ApiKey, key_id)
    for _ in range(MAX_ROTATIONS_FOLLOWED):
        if key is not None and (key.expires_at is None or as_utc(key.expires_at) > utcnow()):
            break
        successor = select(ApiKey).where(col(ApiKey.rotated_from_key_id) == key_id)
        if (key := session.exec(successor).first()) is None:
            return None
        key_id = key.id
    else:
        return None
    if key.kind == KeyKind.organization:
        return key if key.organization_id == org_id else None
    member = session.exec(
        select(Membership).where(Membership.organization_id == org_id, Membership.user_id == key.user_id)
    ).first()
    return key if member is not None else None


def revoke(session: Session, *, org_id: str, token_id: str) -> None:
    """Delete a token of the organization (used or not); 404 for any other."""
    row = session.get(UploadToken, token_id)
    if row is None or row.organization_id != org_id:
        raise not_found(f"Upload token {token_id} does not exist.")
    session.delete(row)
    session.flush()


def claim(session: Session, *, token_id: str, asset_id: str) -> None:
    """Take the token for one upload; 401 if another upload holds or spent it, or it expired."""
    now = utcnow()
    result = session.exec(
        update(UploadToken)
        .where(
            col(UploadToken.id) == token_id,
            col(UploadToken.used_at).is_(None),
            col(UploadToken.expires_at) > now,
        )
        .values(used_at=now, asset_id=asset_id)
    )
    if result.rowcount != 1:
        raise unauthorized("The upload token was used already or has expired.")


def release(session: Session, *, token_id: str, asset_id: str) -> None:
    """Give the token back after the upload that claimed it failed."""
    session.exec(
        update(UploadToken)
        .where(col(UploadToken.id) == token_id, col(UploadToken.asset_id) == asset_id)
        .values(used_at=None, asset_id=None)
    )


# Internal API, called by edge only.
router = APIRouter(prefix="/internal/v1", dependencies=[Depends(require_internal_token)])


@router.post("/orgs/{org_id}/upload-tokens", status_code=201)
def create_token(org_id: str, body: UploadTokenIn, session: SessionDep) -> UploadTokenCreated:
    row = create(
        session,
        org_id=org_id,
        token_hash=body.token_hash,
        key_id=body.key_id,
        folder_id=body.folder_id,
        name=body.name,
        max_bytes=body.max_bytes,
        content_types=body.content_types,
        expires_in=body.expires_in,
        visibility=body.visibility,
        user_id=body.user_id,
        session_id=body.session_id,
        asset=body.asset,
    )
    return UploadTokenCreated(id=row.id, expires_at=isoformat(row.expires_at))


@router.get("/orgs/{org_id}/upload-tokens/{token_id}")
def token_place(org_id: str, token_id: str, session: SessionDep) -> UploadTokenPlace:
    """Where a token of the organization uploads to (issue 46: its subtree) and what it accepts
    (issue 48); 404 for any other."""
    row = session.get(UploadToken, token_id)
    if row is None or row.organization_id != org_id:
        raise not_found(f"Upload token {token_id} does not exist.")
    types = json.loads(row.content_types) if row.content_types is not None else None
    return UploadTokenPlace(folder_id=row.folder_id, content_types=types)


@router.delete("/orgs/{org_id}/upload-tokens/{token_id}")
def revoke_token(org_id: str, token_id: str, session: SessionDep) -> Done:
    revoke(session, org_id=org_id, token_id=token_id)
    return Done()


@router.get("/upload-tokens/grant")
def grant(
    session: SessionDep,
    token_hash: Annotated[str, Header(alias="x-token-hash", min_length=64, max_length=64)],
) -> UploadGrant:
    """Resolve a token's SHA-256 (the token never crosses the network) to its scope."""
    return resolve(session, token_hash=token_hash.lower())


@router.post("/upload-tokens/minters")
def check_minters(body: MintersIn, session: SessionDep) -> MintersOut:
    """Whether the keys behind resumable uploads' capabilities can still act (edge asks on
    every request of a capability, and for its sweep of uploads whose minter is gone)."""
    return minters(session, body.minters)


@router.post("/upload-tokens/{token_id}/claim")
def claim_token(token_id: str, body: TokenClaim, session: SessionDep) -> Done:
    claim(session, token_id=token_id, asset_id=body.asset_id)
    return Done()


@router.delete("/upload-tokens/{token_id}/claim/{asset_id}")
def release_token(token_id: str, asset_id: str, session: SessionDep) -> Done:
    release(session, token_id=token_id, asset_id=asset_id)
    return Done()
