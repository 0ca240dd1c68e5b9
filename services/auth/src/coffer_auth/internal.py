"""Internal API: the one question edge asks on every request."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Header
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from coffer_auth import service
from coffer_auth.deps import DatabaseDep, SessionDep
from coffer_kit.db import writer
from coffer_kit.internal_token import require_internal_token
from coffer_kit.wire import Principal

log = logging.getLogger("coffer.auth")
router = APIRouter(prefix="/internal/v1", dependencies=[Depends(require_internal_token)])


@router.get("/principal")
def principal(
    database: DatabaseDep,
    session: SessionDep,
    key_hash: Annotated[str, Header(alias="x-key-hash", min_length=64, max_length=64)],
    organization_id: Annotated[str | None, Header(alias="x-organization-id")] = None,
) -> Principal:
    """Resolve a key's SHA-256 (the raw key never crosses the network) to a principal."""
    resolved = service.resolve_principal(
        session, key_hash=key_hash.lower(), organization_id=organization_id or None
    )
    key_id = resolved.principal.key_id
    # Best effort, in its own short write transaction, so lookups stay read-only and concurrent.
    try:
        with Session(writer(database.engine)) as write:
            service.touch_key(
                write,
                key_id=key_id,
                organization_id=resolved.principal.organization_id,
                last_used_at=resolved.last_used_at,
            )
            write.commit()
    except SQLAlchemyError:
        log.warning("could not record key use", extra={"key_id": key_id})
    return resolved.principal
