"""Internal API: the one question edge asks on every request."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from coffer_auth import service
from coffer_kit.db import SessionDep, writer
from coffer_kit.internal import require_internal_token

log = logging.getLogger("coffer.auth")
router = APIRouter(prefix="/internal/v1", dependencies=[Depends(require_internal_token)])


@router.get("/principal")
def principal(
    request: Request,
    session: SessionDep,
    key_hash: Annotated[str, Header(alias="x-key-hash", min_length=64, max_length=64)],
    organization_id: Annotated[str | None, Header(alias="x-organization-id")] = None,
) -> dict[str, Any]:
    """Resolve a key's SHA-256 (the raw key never crosses the network) to a principal."""
    answer = service.resolve_principal(
        session, key_hash=key_hash.lower(), organization_id=organization_id or None
    )
    last_used = answer.pop("lastUsedAt")
    # Best effort, in its own short write transaction, so lookups stay read-only and concurrent.
    try:
        with Session(writer(request.app.state.engine)) as write:
            service.touch_key(write, key_id=answer["keyId"], last_used_at=last_used)
            write.commit()
    except SQLAlchemyError:
        log.warning("could not record key use", extra={"key_id": answer["keyId"]})
    return answer
