"""Organizations: list, create, switch, overview, usage, settings, audit log."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator
from datetime import date
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from coffer_edge.dashboard.security import PREFIX
from coffer_edge.dashboard.web import (
    OrgVisitDep,
    Visit,
    VisitDep,
    accounts_of,
    field,
    metadata_of,
    posted,
    redirect,
    state_of,
)
from coffer_edge.routers.tus import end_open_upload
from coffer_kit.contract.accounts import AuditEventOut
from coffer_kit.contract.errors import CofferError, forbidden, invalid, not_found

router = APIRouter(prefix=PREFIX, include_in_schema=False)


def render(
    visit: Visit, template: str, status: int = 200, block: str | None = None, **extra: Any
) -> Response:
    return state_of(visit.request).renderer.page(
        visit.request, template, visit.context(**extra), status=status, block=block
    )


async def _usage(visit: Visit, org_id: str) -> tuple[int, int]:
    stored = await metadata_of(visit.request).usage(org_id, request_id=visit.caller.request_id or "")
    return stored.used_bytes, stored.asset_count


@router.get("/orgs")
async def orgs(visit: VisitDep) -> Response:
    async def one(org_id: str) -> tuple[str, tuple[int, int] | None]:
        try:
            return org_id, await _usage(visit, org_id)
        except CofferError:
            return org_id, None  # the list still shows; the bar says "unavailable"

    found = await asyncio.gather(*(one(o.id) for o in visit.current.organizations))
    usage = {org_id: u for org_id, u in found if u is not None}
    return render(visit, "orgs.html", title="Organizations", usage=usage)


@router.get("/orgs/new")
async def new_org_page(visit: VisitDep) -> Response:
    return render(visit, "org_new.html", title="New organization", name="", narrow=True)


@router.post("/orgs/new")
async def new_org(request: Request, visit: VisitDep) -> Response:
    form = await posted(request, visit)
    name = field(form, "name", limit=2048).strip()
    accounts = accounts_of(request)
    try:
        org = await accounts.create_org(visit.caller, name)
    except CofferError as exc:
        if exc.status in (400, 409):  # a bad name; the most organizations one person may own
            return render(
                visit,
                "org_new.html",
                exc.status,
                title="New organization",
                name=name,
                error=exc.message,
                narrow=True,
            )
        raise
    assert visit.caller.session_hash is not None
    accounts.forget(visit.caller.session_hash)
    return redirect(f"{PREFIX}/o/{org.id}")


@router.get("/switch")
async def switch(visit: VisitDep, org: str = "") -> Response:
    if any(o.id == org for o in visit.current.organizations):
        return redirect(f"{PREFIX}/o/{org}")
    return redirect(f"{PREFIX}/orgs")


@router.get("/o/{org_id}")
async def overview(visit: OrgVisitDep) -> Response:
    accounts = accounts_of(visit.request)
    org = visit.org
    (used, asset_count), keys = await asyncio.gather(
        _usage(visit, org.id), accounts.keys(visit.caller, org.id)
    )
    events: list[AuditEventOut] = []
    if org.role == "owner":
        events = (await accounts.audit(visit.caller, org.id, {"limit": 5})).events
    settings = state_of(visit.request).settings
    return render(
        visit,
        "overview.html",
        title=org.name,
        section="overview",
        used=used,
        asset_count=asset_count,
        key_count=len(keys),
        events=events,
        base_url=settings.base_url,
        api_url=settings.base_url + "/api",
        cdn_url=settings.cdn_url,
    )


@router.get("/o/{org_id}/usage")
async def usage(visit: OrgVisitDep, ended: str | None = None) -> Response:
    rid = visit.caller.request_id or ""
    (used, asset_count), open_uploads = await asyncio.gather(
        _usage(visit, visit.org.id),
        metadata_of(visit.request).tus_list(visit.org.id, limit=OPEN_UPLOADS_SHOWN, offset=0, request_id=rid),
    )
    return render(
        visit,
        "usage.html",
        title="Usage",
        section="usage",
        used=used,
        asset_count=asset_count,
        uploads=open_uploads.uploads,
        uploads_total=open_uploads.total,
        held=sum(u.length for u in open_uploads.uploads if u.active),
        notice="The upload was ended: its bytes are deleted and its space is free." if ended else None,
    )


# Unfinished uploads the Usage page lists (the newest; the API pages through all of them).
OPEN_UPLOADS_SHOWN = 50


@router.post("/o/{org_id}/uploads/{upload_id}/end")
async def end_upload(request: Request, visit: OrgVisitDep, upload_id: str) -> Response:
    """End one of the organization's unfinished resumable uploads (any member, as deleting a
    file): its bytes deleted, its reservation released."""
    await posted(request, visit)
    state = state_of(request)
    await end_open_upload(upload_id, visit.org.id, state.metadata, state.blob, visit.caller.request_id or "")
    return redirect(f"{PREFIX}/o/{visit.org.id}/usage?ended=1")


@router.get("/o/{org_id}/settings")
async def settings_page(
    visit: OrgVisitDep, renamed: str | None = None, visibility: str | None = None
) -> Response:
    notice = "The organization was renamed." if renamed else None
    if visibility in ("public", "private"):
        notice = f"New uploads are now {visibility} unless they say otherwise."
    return render(
        visit, "settings.html", title="Settings", section="settings", name=visit.org.name, notice=notice
    )


@router.post("/o/{org_id}/settings")
async def rename(request: Request, visit: OrgVisitDep) -> Response:
    form = await posted(request, visit)
    name = field(form, "name", limit=2048).strip()
    accounts = accounts_of(request)
    try:
        await accounts.rename_org(visit.caller, visit.org.id, name)
    except CofferError as exc:
        if exc.status == 400:
            return render(
                visit,
                "settings.html",
                400,
                title="Settings",
                section="settings",
                name=name,
                error=exc.message,
            )
        raise
    assert visit.caller.session_hash is not None
    accounts.forget(visit.caller.session_hash)
    return redirect(f"{PREFIX}/o/{visit.org.id}/settings?renamed=1")


@router.post("/o/{org_id}/settings/default-visibility")
async def set_default_visibility(request: Request, visit: OrgVisitDep) -> Response:
    """CONTRACT §12: what uploads that do not say become (owners; auth refuses members)."""
    form = await posted(request, visit)
    visibility = field(form, "visibility", limit=16)
    accounts = accounts_of(request)
    try:
        await accounts.set_default_visibility(visit.caller, visit.org.id, visibility)
    except CofferError as exc:
        if exc.status == 400:
            return render(
                visit,
                "settings.html",
                400,
                title="Settings",
                section="settings",
                name=visit.org.name,
                error="Choose public or private.",
            )
        raise
    assert visit.caller.session_hash is not None
    accounts.forget(visit.caller.session_hash)
    return redirect(f"{PREFIX}/o/{visit.org.id}/settings?visibility={visibility}")


@router.post("/o/{org_id}/settings/ingest")
async def set_ingest(request: Request, visit: OrgVisitDep) -> Response:
    """Issue 48: detected types recorded or enforced, the allowed types, malware scanning
    (owners; auth refuses members and bad values)."""
    form = await posted(request, visit)
    accounts = accounts_of(request)
    try:
        await accounts.set_ingest(
            visit.caller,
            visit.org.id,
            mode=field(form, "ingest", limit=16),
            allowed_types=field(form, "allowed", limit=4096),
            scan=field(form, "scan", limit=16),
        )
    except CofferError as exc:
        if exc.status == 400:
            return render(
                visit,
                "settings.html",
                400,
                title="Settings",
                section="settings",
                name=visit.org.name,
                error=exc.message,
            )
        raise
    assert visit.caller.session_hash is not None
    accounts.forget(visit.caller.session_hash)
    return redirect(f"{PREFIX}/o/{visit.org.id}/settings?ingest=1")


# Audit log ------------------------------------------------------------------------------

FILTERS = ("action", "actor", "since", "until")


def _filters(request: Request) -> dict[str, str]:
    return {name: request.query_params.get(name, "").strip()[:255] for name in FILTERS}


def _audit_params(filters: dict[str, str]) -> dict[str, str | int]:
    """The filters as auth's query; dates are whole days (``until`` includes its day)."""
    params: dict[str, str | int] = {}
    for name in ("action", "actor"):
        if filters[name]:
            params[name] = filters[name]
    for name, suffix in (("since", "T00:00:00Z"), ("until", "T23:59:59.999Z")):
        if filters[name]:
            try:
                date.fromisoformat(filters[name])
            except ValueError as exc:
                raise invalid(f"'{filters[name]}' is not a date (YYYY-MM-DD).") from exc
            params[name] = filters[name] + suffix
    return params


@router.get("/o/{org_id}/audit")
async def audit(visit: OrgVisitDep) -> Response:
    if visit.org.role != "owner":
        raise forbidden("Only owners can read the audit log.")
    request = visit.request
    filters = _filters(request)
    params = _audit_params(filters)
    before = request.query_params.get("before", "")[:128]
    if before:
        params["before"] = before
    page = await accounts_of(request).audit(visit.caller, visit.org.id, {**params, "limit": 50})
    query = urlencode({k: v for k, v in filters.items() if v})
    more_query = urlencode({**{k: v for k, v in filters.items() if v}, "before": page.next_before or ""})
    return render(
        visit,
        "audit.html",
        title="Audit log",
        section="audit",
        block="rows",
        events=page.events,
        next_before=page.next_before,
        filters=filters,
        query=query,
        more_query=more_query,
    )


_COLUMNS = (
    "createdAt",
    "actorType",
    "actorLabel",
    "action",
    "targetType",
    "targetId",
    "targetLabel",
    "ip",
    "requestId",
)


async def _all_events(visit: Visit, params: dict[str, str | int]) -> AsyncIterator[AuditEventOut]:
    """Every event matching the filters, page by page (500 at a time)."""
    accounts = accounts_of(visit.request)
    before: str | None = None
    while True:
        query = {**params, "limit": 500, **({"before": before} if before else {})}
        page = await accounts.audit(visit.caller, visit.org.id, query)
        for event in page.events:
            yield event
        if not page.next_before:
            return
        before = page.next_before


@router.get("/o/{org_id}/audit/export.{fmt}")
async def audit_export(visit: OrgVisitDep, fmt: str) -> Response:
    if fmt not in ("csv", "jsonl"):
        raise not_found("Exports are CSV or JSON Lines.")
    if visit.org.role != "owner":
        raise forbidden("Only owners can read the audit log.")
    params = _audit_params(_filters(visit.request))
    # The first page is fetched before answering, so an auth outage is a 503 page, not a cut file.
    first = _all_events(visit, params)
    try:
        head = [await anext(first)]
    except StopAsyncIteration:
        head = []

    async def rows() -> AsyncIterator[str]:
        if fmt == "csv":
            buffer = io.StringIO()
            writer = csv.writer(buffer)
            writer.writerow(_COLUMNS)
            yield buffer.getvalue()
        for event in head:
            yield _line(event, fmt)
        async for event in first:
            yield _line(event, fmt)

    name = f"coffer-audit-{visit.org.id}.{fmt}"
    media = "text/csv; charset=utf-8" if fmt == "csv" else "application/x-ndjson"
    return StreamingResponse(
        rows(), media_type=media, headers={"Content-Disposition": f'attachment; filename="{name}"'}
    )


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP "CSV
# Injection"): a file named "=HYPERLINK(...)" would act when an owner opens the export.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value  # shown as text; the quote is the documented OWASP escape
    return "" if value is None else value


def _line(event: AuditEventOut, fmt: str) -> str:
    data = event.model_dump(mode="json", by_alias=True)
    if fmt == "jsonl":
        return json.dumps(data, separators=(",", ":")) + "\n"
    buffer = io.StringIO()
    csv.writer(buffer).writerow([_cell(data.get(c)) for c in _COLUMNS])
    return buffer.getvalue()
