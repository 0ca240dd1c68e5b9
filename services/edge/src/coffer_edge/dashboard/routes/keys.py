"""API keys: list, create (shown once), delete, rotate with a grace period."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import FormData

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
    with_sudo,
)
from coffer_edge.deps import edge_state
from coffer_edge.routers.keys import described
from coffer_kit.contract.accounts import KeyCreatedOut, KeyOut, KeyRotatedOut
from coffer_kit.contract.errors import CofferError, invalid, not_found
from coffer_kit.contract.limits import MAX_KEY_LIFETIME_DAYS

router = APIRouter(prefix=PREFIX, include_in_schema=False)

DAY = 86400
PRESETS: dict[str, tuple[str, int | None]] = {
    "7d": ("7 days", 7 * DAY),
    "30d": ("30 days", 30 * DAY),
    "90d": ("90 days", 90 * DAY),
    "1y": ("1 year", 365 * DAY),
    "never": ("No expiry", None),
}
DEFAULT_EXPIRY = "90d"
# What a key made here may do (issue 46): the bundles, in words.
ACCESS: dict[str, str] = {
    "full": "Everything (full)",
    "read-only": "Read only: read files, list folders, sign URLs, see usage",
    "uploader": "Upload only: upload, list folders, make upload tokens",
}


async def _folder_by_path(visit: Visit, path: str) -> str | None:
    """The folder at ``/a/b`` (None for the root); 400 naming the first missing part."""
    metadata = metadata_of(visit.request)
    parent: str | None = None
    walked = ""
    for part in [p for p in path.strip().split("/") if p]:
        walked += "/" + part
        children = json.loads(
            await metadata.list_folders(visit.org.id, parent, request_id=visit.caller.request_id or "")
        )
        match = [f["id"] for f in children["folders"] if f["name"] == part]
        if not match:
            raise invalid(f"There is no folder {walked}.")
        parent = match[0]
    return parent


def _choices(visit: Visit) -> list[tuple[str, str]]:
    choices = [(value, label) for value, (label, _) in PRESETS.items()]
    extra = state_of(visit.request).settings.dashboard_extra_key_expiry_seconds
    if extra:
        choices.insert(0, (f"{extra}s", f"{extra} seconds"))
    choices.append(("date", "On a date…"))
    return choices


def _expires_in(visit: Visit, form: FormData) -> int | None:
    """Seconds from now for the chosen expiry; None for "No expiry"; 400 for a bad choice."""
    choice = field(form, "expiry", limit=32) or DEFAULT_EXPIRY
    if choice in PRESETS:
        return PRESETS[choice][1]
    extra = state_of(visit.request).settings.dashboard_extra_key_expiry_seconds
    if extra and choice == f"{extra}s":
        return extra
    if choice == "date":
        raw = field(form, "expiry_date", limit=32)
        try:
            day = date.fromisoformat(raw)
        except ValueError as exc:
            raise invalid("Choose the expiry date (YYYY-MM-DD).") from exc
        if day > datetime.now(UTC).date() + timedelta(days=MAX_KEY_LIFETIME_DAYS):
            raise invalid(f"The expiry date must be within {MAX_KEY_LIFETIME_DAYS // 365} years.")
        # The key works through the whole chosen day (UTC).
        end = datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC)
        seconds = int((end - datetime.now(UTC)).total_seconds())
        if seconds <= 0:
            raise invalid("The expiry date must be in the future.")
        return seconds
    raise invalid("Choose an expiry from the list.")


async def _keys_page(
    visit: Visit,
    *,
    status: int = 200,
    error: str | None = None,
    form: dict[str, str] | None = None,
    notice: str | None = None,
) -> Response:
    keys = await accounts_of(visit.request).keys(visit.caller, visit.org.id)
    keys = await described(keys, visit.org.id, metadata_of(visit.request), visit.caller.request_id or "")
    return render(
        visit,
        "keys.html",
        status,
        title="API keys",
        section="keys",
        org_keys=[k for k in keys if k.kind == "organization"],
        user_keys=[k for k in keys if k.kind == "user"],
        now=datetime.now(UTC),
        error=error,
        notice=notice,
        form=form
        or {
            "kind": "organization",
            "name": "",
            "expiry": DEFAULT_EXPIRY,
            "expiry_date": "",
            "access": "full",
            "folder": "",
        },
        form_id=secrets.token_urlsafe(16),
        expiry_choices=_choices(visit),
        access_choices=list(ACCESS.items()),
    )


@router.get("/o/{org_id}/keys")
async def keys(visit: OrgVisitDep, deleted: str | None = None) -> Response:
    return await _keys_page(
        visit, notice="The key was deleted. Requests with it fail within 5 seconds." if deleted else None
    )


def _created_page(visit: Visit, created: KeyCreatedOut | KeyRotatedOut, *, rotated: bool) -> Response:
    """The secret, once, on a page of its own (never cached: the guard sends no-store)."""
    several_orgs = len(visit.current.organizations) > 1
    context: dict[str, Any] = {
        "title": "Key rotated" if rotated else "Key created",
        "section": "keys",
        "created": created,
        "rotated": rotated,
        "previous": created.previous if isinstance(created, KeyRotatedOut) else None,
        "org_header": created.api_key.kind == "user" and several_orgs,
        "api_url": state_of(visit.request).api_url,
    }
    status = 201
    response = render(visit, "key_created.html", status, **context)
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/o/{org_id}/keys")
async def create_key(request: Request, visit: OrgVisitDep) -> Response:
    form = await posted(request, visit)
    kind = field(form, "kind", limit=32)
    name = field(form, "name", limit=1024).strip()
    values = {
        "kind": kind,
        "name": name,
        "expiry": field(form, "expiry", limit=32),
        "expiry_date": field(form, "expiry_date", limit=32),
        "access": field(form, "access", limit=32) or "full",
        "folder": field(form, "folder", limit=1024).strip(),
    }
    if kind not in ("organization", "user"):
        return await _keys_page(visit, status=400, error="Choose the kind of key.", form=values)
    if values["access"] not in ACCESS:
        return await _keys_page(visit, status=400, error="Choose what the key may do.", form=values)
    try:
        expires_in = _expires_in(visit, form)
        folder_id = await _folder_by_path(visit, values["folder"])
    except CofferError as exc:
        return await _keys_page(visit, status=400, error=exc.message, form=values)
    form_id = field(form, "form_id", limit=64)
    used = state_of(request).used_forms

    async def action(v: Visit) -> Response:
        if form_id and form_id in used:
            # A reload or Back re-posted the form: the key it made was shown once already.
            return await _keys_page(
                v,
                status=409,
                error="This form was sent already and its key shown once. Create another key if needed.",
                form=values,
            )
        try:
            created = await accounts_of(request).create_key(
                v.caller,
                v.org.id,
                kind=kind,
                name=name,
                expires_in=expires_in,
                scopes=[values["access"]],
                folder_id=folder_id,
            )
        except CofferError as exc:
            if exc.status == 400:
                return await _keys_page(v, status=400, error=exc.message, form=values)
            if exc.code == "forbidden":
                return await _keys_page(
                    v,
                    status=403,
                    error="Only owners can create organization keys. Create a personal key.",
                    form=values,
                )
            raise
        if form_id:
            used[form_id] = True
        (key,) = await described([created.api_key], v.org.id, metadata_of(request), v.caller.request_id or "")
        return _created_page(v, created.model_copy(update={"api_key": key}), rotated=False)

    return await with_sudo(visit, form, action)


async def _key(visit: Visit, key_id: str) -> KeyOut:
    for key in await accounts_of(visit.request).keys(visit.caller, visit.org.id):
        if key.id == key_id:
            return key
    raise not_found("No such key.")


@router.get("/o/{org_id}/keys/{key_id}/delete")
async def delete_page(visit: OrgVisitDep, key_id: str) -> Response:
    key = await _key(visit, key_id)
    return render(visit, "key_delete.html", title="Delete key", section="keys", key=key)


@router.post("/o/{org_id}/keys/{key_id}/delete")
async def delete_key(request: Request, visit: OrgVisitDep, key_id: str) -> Response:
    await posted(request, visit)
    await accounts_of(request).delete_key(visit.caller, visit.org.id, key_id)
    edge_state(request).authority_ended()
    return redirect(f"{PREFIX}/o/{visit.org.id}/keys?deleted=1")


@router.get("/o/{org_id}/keys/{key_id}/rotate")
async def rotate_page(visit: OrgVisitDep, key_id: str) -> Response:
    key = await _key(visit, key_id)
    return render(visit, "key_rotate.html", title="Rotate key", section="keys", key=key)


@router.post("/o/{org_id}/keys/{key_id}/rotate")
async def rotate_key(request: Request, visit: OrgVisitDep, key_id: str) -> Response:
    form = await posted(request, visit)
    raw = field(form, "grace", limit=16)
    if raw not in ("0", "3600", "86400", "604800"):
        return await _keys_page(visit, status=400, error="Choose when the old key stops working.")
    grace = int(raw)

    async def action(v: Visit) -> Response:
        rotated = await accounts_of(request).rotate_key(v.caller, v.org.id, key_id, grace)
        return _created_page(v, rotated, rotated=True)

    return await with_sudo(visit, form, action)
