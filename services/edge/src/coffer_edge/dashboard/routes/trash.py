"""The Files page's Trash view (issue 47): what the organization deleted, who deleted it and when
it goes for good; restore, purge, empty (owners), and the retention (owners).

Every action goes through edge's trash protocols (``coffer_edge.trash``) with the session's
organization: a member restores and purges only what they deleted themselves (metadata
refuses the rest with 403), owners act on everything. Forms are plain POSTs with the CSRF
token, so the view works without JavaScript.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from coffer_edge import trash
from coffer_edge.dashboard.routes.orgs import render
from coffer_edge.dashboard.security import PREFIX
from coffer_edge.dashboard.web import (
    OrgVisitDep,
    Visit,
    accounts_of,
    field,
    metadata_of,
    posted,
    redirect,
    state_of,
)
from coffer_kit.contract.errors import NOT_OWN_DELETION, CofferError, forbidden, invalid
from coffer_kit.contract.limits import TRASH_RETENTION_DAYS_MAX
from coffer_kit.contract.resources import TrashList

router = APIRouter(prefix=PREFIX, include_in_schema=False)
PAGE_SIZE = 50
# Batches one "Empty trash" click runs (100 assets each); past them the page says how many are left.
EMPTY_BATCHES = 20
NOT_IN_TRASH = "That file is not in the trash."
NOTICES = {
    "restored": "The file is back, with the same URLs.",
    "purged": "The file is deleted for good.",
    "emptied": "The trash is empty.",
    "retention": "The trash retention is saved.",
}


def _owner(visit: Visit) -> bool:
    return visit.org.role == "owner"


def _only_user(visit: Visit) -> str | None:
    return None if _owner(visit) else visit.current.user.id


def _rid(visit: Visit) -> str:
    return visit.caller.request_id or ""


def _url(org_id: str, **query: str) -> str:
    tail = "&".join(f"{k}={v}" for k, v in query.items())
    return f"{PREFIX}/o/{org_id}/files/trash" + (f"?{tail}" if tail else "")


async def _page(visit: Visit, *, page: int, notice: str = "", error: str = "", status: int = 200) -> Response:
    params = {"limit": PAGE_SIZE, "offset": (page - 1) * PAGE_SIZE}
    raw = await metadata_of(visit.request).list_trash(visit.org.id, params, request_id=_rid(visit))
    listed = TrashList.model_validate_json(raw)
    usage = await metadata_of(visit.request).usage(visit.org.id, request_id=_rid(visit))
    return render(
        visit,
        "trash.html",
        status=status,
        title="Trash",
        section="files",
        trashed=listed.assets,
        total=listed.total,
        page=page,
        pages=max(1, -(-listed.total // PAGE_SIZE)),
        trashed_bytes=usage.trashed_bytes,
        owner=_owner(visit),
        me=visit.current.user.id,
        retention_max=TRASH_RETENTION_DAYS_MAX,
        notice=notice,
        error=error,
    )


@router.get("/o/{org_id}/files/trash")
async def trash_page(visit: OrgVisitDep, page: int = 1, done: str = "", left: int = 0) -> Response:
    notice = NOTICES.get(done, "")
    if done == "emptied" and left > 0:
        notice = f"{left} files are still in the trash: empty it again to go on."
    return await _page(visit, page=max(1, min(page, 10_000)), notice=notice)


async def _act(visit: Visit, action: str, asset_id: str) -> Response:
    state = state_of(visit.request)
    try:
        if action == "restore":
            await trash.restore_asset(
                visit.org.id,
                asset_id,
                quota_bytes=visit.org.quota_bytes,
                only_user=_only_user(visit),
                scan_mode=visit.org.scan_mode,
                metadata=state.metadata,
                blob=state.blob,
                rid=_rid(visit),
            )
        else:
            await trash.purge_asset(
                visit.org.id,
                asset_id,
                only_user=_only_user(visit),
                metadata=state.metadata,
                blob=state.blob,
                rid=_rid(visit),
            )
    except CofferError as exc:
        # A member acting on what someone else deleted keeps metadata's 403 and reason (a file
        # this organization's Trash lists to them); every other 403 is another organization's.
        if exc.status == 404 or (exc.status == 403 and (exc.details or {}).get("reason") != NOT_OWN_DELETION):
            # Another organization's file, or one not there: the same answer for both (metadata
            # says 403 for the first, no existence oracle here, as files.py's _unknown).
            return await _page(visit, page=1, error=NOT_IN_TRASH, status=404)
        if exc.status in (403, 413):
            return await _page(visit, page=1, error=exc.message, status=exc.status)
        raise
    return redirect(_url(visit.org.id, done="restored" if action == "restore" else "purged"))


@router.post("/o/{org_id}/files/trash/{asset_id}/restore")
async def restore(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    await posted(request, visit)
    return await _act(visit, "restore", asset_id)


@router.post("/o/{org_id}/files/trash/{asset_id}/purge")
async def purge(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    await posted(request, visit)
    return await _act(visit, "purge", asset_id)


@router.post("/o/{org_id}/files/trash/empty")
async def empty(request: Request, visit: OrgVisitDep) -> Response:
    await posted(request, visit)
    if not _owner(visit):
        raise forbidden("Only owners empty the trash.")
    state = state_of(visit.request)
    remaining = 0
    for _ in range(EMPTY_BATCHES):
        _, remaining = await trash.purge_batch(visit.org.id, state.metadata, state.blob, _rid(visit))
        if remaining == 0:
            break
    return redirect(_url(visit.org.id, done="emptied", left=str(remaining)))


@router.post("/o/{org_id}/files/trash/retention")
async def retention(request: Request, visit: OrgVisitDep) -> Response:
    form = await posted(request, visit)
    raw = field(form, "days", limit=3)
    if not raw.isdigit() or not 0 <= int(raw) <= TRASH_RETENTION_DAYS_MAX:
        raise invalid(f"Days are a whole number from 0 to {TRASH_RETENTION_DAYS_MAX}.", field="days")
    await accounts_of(request).set_trash_retention(visit.caller, visit.org.id, int(raw))
    return redirect(_url(visit.org.id, done="retention"))
