"""Webhooks (CONTRACT §11, issue 25): owners add endpoints (the signing secret shown once),
rotate the secret, pause and resume, send a test, read the delivery log and redeliver.

metadata owns endpoints and deliveries and checks URLs (https, no internal address); it trusts
edge to have authorized the caller, so every route here refuses members itself (403, as the
audit page does) and non-members get 404 from the session lookup. Another organization's
endpoint id is 404 from metadata, as one that does not exist.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from coffer_edge.dashboard.routes.files import _tree
from coffer_edge.dashboard.routes.orgs import render
from coffer_edge.dashboard.security import PREFIX
from coffer_edge.dashboard.web import (
    OrgVisitDep,
    Visit,
    field,
    metadata_of,
    posted,
    redirect,
    state_of,
    with_sudo,
)
from coffer_kit.contract.errors import CofferError, forbidden, not_found
from coffer_kit.contract.webhooks import (
    EVENT_TYPES,
    MAX_DESCRIPTION_CHARS,
    MAX_ENDPOINTS,
    MAX_URL_CHARS,
    WebhookAttemptList,
    WebhookCreate,
    WebhookEndpoint,
    WebhookEndpointWithSecret,
    WebhookUpdate,
)

router = APIRouter(prefix=PREFIX, include_in_schema=False)

# The delivery log, a page at a time (the dashboard's lists paginate at 50).
LOG_PAGE = 50
# An offset further than this is refused before anything is asked (metadata bounds it too).
MAX_LOG_OFFSET = 1_000_000
# The folder filter's picker lists at most this many folders.
MAX_PICKER_FOLDERS = 500
_WEBHOOK_ID = re.compile(r"^whk_[0-9A-Za-z]{1,60}$")
_DELIVERY_ID = re.compile(r"^whd_[0-9A-Za-z]{1,60}$")
_FOLDER_ID = re.compile(r"^fld_[0-9A-Za-z]{1,60}$")
DONE = {
    "test": "A ping event was queued: it appears in the log below once sent.",
    "redelivered": "The delivery was queued again, with the same webhook-id.",
    "enabled": "Deliveries resumed.",
    "disabled": "Deliveries paused: events are not sent to this endpoint until you resume it.",
}
REASONS = {
    "paused": "Paused by an owner.",
    "gone": "Disabled: the receiver answered 410 Gone.",
    "failing": "Disabled: every delivery failed for 5 days.",
}


def _rid(visit: Visit) -> str:
    return visit.caller.request_id or ""


def _owner(visit: Visit) -> None:
    if visit.org.role != "owner":
        raise forbidden("Only owners can manage webhooks.")


def _check(value: str, pattern: re.Pattern[str]) -> str:
    """An id from the URL, refused as 404 unless it has the shape of one."""
    if not pattern.fullmatch(value):  # not match: "$" also matches before a final "\n"
        raise not_found("No such webhook endpoint or delivery.")
    return value


def _reauth_needed(visit: Visit) -> None:
    """A signing secret is a credential: as for keys, the password is asked again when it was
    last entered longer ago than the re-authentication window."""
    if datetime.now(UTC) > visit.current.session.reauth_until:
        raise CofferError(403, "reauth_required", "Enter your password again to continue.")


def _blank_form() -> dict[str, Any]:
    return {"url": "", "events": list(EVENT_TYPES), "folder": "", "description": ""}


async def _list_page(
    visit: Visit,
    *,
    status: int = 200,
    error: str | None = None,
    notice: str | None = None,
    form: dict[str, Any] | None = None,
) -> Response:
    listed = await metadata_of(visit.request).list_webhooks(visit.org.id, request_id=_rid(visit))
    endpoints = listed.webhooks
    entries, truncated = await _tree(visit, None, MAX_PICKER_FOLDERS)
    return render(
        visit,
        "webhooks.html",
        status,
        title="Webhooks",
        section="webhooks",
        endpoints=endpoints,
        folders={e.folder.id: e.folder.name for e in entries},
        entries=entries,
        truncated=truncated,
        event_types=EVENT_TYPES,
        reasons=REASONS,
        max_endpoints=MAX_ENDPOINTS,
        error=error,
        notice=notice,
        form=form or _blank_form(),
        form_id=secrets.token_urlsafe(16),
        max_url=MAX_URL_CHARS,
        max_description=MAX_DESCRIPTION_CHARS,
    )


@router.get("/o/{org_id}/webhooks")
async def webhooks(visit: OrgVisitDep, deleted: str | None = None) -> Response:
    _owner(visit)
    return await _list_page(visit, notice="The endpoint was deleted." if deleted else None)


def _secret_page(visit: Visit, endpoint: WebhookEndpointWithSecret, *, rotated: bool) -> Response:
    """The signing secret, once, on a page of its own (never cached)."""
    response = render(
        visit,
        "webhook_secret.html",
        201 if not rotated else 200,
        title="Secret rotated" if rotated else "Endpoint added",
        section="webhooks",
        endpoint=endpoint,
        rotated=rotated,
    )
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/o/{org_id}/webhooks")
async def create(request: Request, visit: OrgVisitDep) -> Response:
    _owner(visit)
    form = await posted(request, visit)
    chosen = [e for e in form.getlist("events") if isinstance(e, str)][: len(EVENT_TYPES)]
    values: dict[str, Any] = {
        "url": field(form, "url", limit=MAX_URL_CHARS + 1).strip(),
        "events": chosen,
        "folder": field(form, "folder", limit=64),
        "description": field(form, "description", limit=MAX_DESCRIPTION_CHARS + 1).strip(),
    }
    if not values["url"]:
        return await _list_page(visit, status=400, error="Enter the URL to send events to.", form=values)
    if len(values["url"]) > MAX_URL_CHARS:
        return await _list_page(
            visit, status=400, error=f"The URL is longer than {MAX_URL_CHARS} characters.", form=values
        )
    if not chosen or any(e not in EVENT_TYPES for e in chosen):
        return await _list_page(visit, status=400, error="Choose at least one event.", form=values)
    if values["folder"] and not _FOLDER_ID.fullmatch(values["folder"]):
        return await _list_page(visit, status=400, error="Choose a folder from the list.", form=values)
    if len(values["description"]) > MAX_DESCRIPTION_CHARS:
        return await _list_page(
            visit,
            status=400,
            error=f"The description is longer than {MAX_DESCRIPTION_CHARS} characters.",
            form=values,
        )
    body = WebhookCreate.model_validate(
        {
            "url": values["url"],
            "events": chosen,
            "folderId": values["folder"] or None,
            "description": values["description"] or None,
        }
    )
    form_id = field(form, "form_id", limit=64)
    used = state_of(request).used_forms

    async def action(v: Visit) -> Response:
        if form_id and form_id in used:
            # A reload or Back re-posted the form: the endpoint exists, its secret was shown once.
            return await _list_page(
                v,
                status=409,
                error="This form was sent already and its secret shown once. "
                "Rotate the secret if it was lost.",
                form=values,
            )
        _reauth_needed(v)
        try:
            made = await metadata_of(request).create_webhook(v.org.id, body, request_id=_rid(v))
        except CofferError as exc:
            if exc.status in (403, 404):
                # metadata's 403 is another organization's folder: as one that does not exist
                # (no existence oracle, as files.py's _unknown).
                message = "That folder does not exist any more."
                return await _list_page(v, status=404, error=message, form=values)
            if exc.status in (400, 409):
                return await _list_page(v, status=exc.status, error=exc.message, form=values)
            raise
        if form_id:
            used[form_id] = True
        return _secret_page(v, made, rotated=False)

    return await with_sudo(visit, form, action)


async def _endpoint(visit: Visit, webhook_id: str) -> WebhookEndpoint:
    _check(webhook_id, _WEBHOOK_ID)
    return await metadata_of(visit.request).get_webhook(visit.org.id, webhook_id, request_id=_rid(visit))


@router.get("/o/{org_id}/webhooks/{webhook_id}")
async def endpoint_page(
    visit: OrgVisitDep, webhook_id: str, offset: int = 0, done: str | None = None
) -> Response:
    _owner(visit)
    if not 0 <= offset <= MAX_LOG_OFFSET:
        offset = 0
    endpoint = await _endpoint(visit, webhook_id)
    log = WebhookAttemptList.model_validate_json(
        await metadata_of(visit.request).list_webhook_deliveries(
            visit.org.id, webhook_id, params={"limit": LOG_PAGE, "offset": offset}, request_id=_rid(visit)
        )
    )
    folder_name = None
    if endpoint.folderId:
        try:
            found = await metadata_of(visit.request).get_folder(
                visit.org.id, endpoint.folderId, request_id=_rid(visit)
            )
            folder_name = "/" + "/".join(p.name for p in found.path)
        except CofferError as exc:
            if exc.status not in (403, 404):
                raise
            folder_name = "(deleted folder)"
    return render(
        visit,
        "webhook.html",
        title=endpoint.description or endpoint.url,
        section="webhooks",
        block="log" if offset else None,
        endpoint=endpoint,
        folder_name=folder_name,
        log=log,
        reasons=REASONS,
        notice=DONE.get(done or ""),
        next_offset=offset + LOG_PAGE if offset + LOG_PAGE < (log.total or 0) else None,
        prev_offset=max(0, offset - LOG_PAGE) if offset else None,
    )


def _back(visit: Visit, webhook_id: str, done: str) -> Response:
    return redirect(f"{PREFIX}/o/{visit.org.id}/webhooks/{webhook_id}?done={done}")


@router.post("/o/{org_id}/webhooks/{webhook_id}/test")
async def send_test(request: Request, visit: OrgVisitDep, webhook_id: str) -> Response:
    _owner(visit)
    await posted(request, visit)
    _check(webhook_id, _WEBHOOK_ID)
    await metadata_of(request).test_webhook(visit.org.id, webhook_id, request_id=_rid(visit))
    return _back(visit, webhook_id, "test")


@router.post("/o/{org_id}/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver")
async def redeliver(request: Request, visit: OrgVisitDep, webhook_id: str, delivery_id: str) -> Response:
    _owner(visit)
    await posted(request, visit)
    _check(webhook_id, _WEBHOOK_ID)
    _check(delivery_id, _DELIVERY_ID)
    metadata = metadata_of(request)
    await metadata.redeliver_webhook(visit.org.id, webhook_id, delivery_id, request_id=_rid(visit))
    return _back(visit, webhook_id, "redelivered")


async def _set_enabled(request: Request, visit: Visit, webhook_id: str, enabled: bool) -> Response:
    _owner(visit)
    await posted(request, visit)
    _check(webhook_id, _WEBHOOK_ID)
    changes = WebhookUpdate.model_validate({"enabled": enabled})
    await metadata_of(request).update_webhook(visit.org.id, webhook_id, changes, request_id=_rid(visit))
    return _back(visit, webhook_id, "enabled" if enabled else "disabled")


@router.post("/o/{org_id}/webhooks/{webhook_id}/enable")
async def enable(request: Request, visit: OrgVisitDep, webhook_id: str) -> Response:
    return await _set_enabled(request, visit, webhook_id, True)


@router.post("/o/{org_id}/webhooks/{webhook_id}/disable")
async def disable(request: Request, visit: OrgVisitDep, webhook_id: str) -> Response:
    return await _set_enabled(request, visit, webhook_id, False)


@router.post("/o/{org_id}/webhooks/{webhook_id}/rotate")
async def rotate(request: Request, visit: OrgVisitDep, webhook_id: str) -> Response:
    _owner(visit)
    form = await posted(request, visit)
    _check(webhook_id, _WEBHOOK_ID)

    async def action(v: Visit) -> Response:
        _reauth_needed(v)
        rotated = await metadata_of(request).rotate_webhook_secret(v.org.id, webhook_id, request_id=_rid(v))
        return _secret_page(v, rotated, rotated=True)

    return await with_sudo(visit, form, action)


@router.get("/o/{org_id}/webhooks/{webhook_id}/delete")
async def delete_page(visit: OrgVisitDep, webhook_id: str) -> Response:
    _owner(visit)
    endpoint = await _endpoint(visit, webhook_id)
    return render(
        visit, "webhook_delete.html", title="Delete endpoint", section="webhooks", endpoint=endpoint
    )


@router.post("/o/{org_id}/webhooks/{webhook_id}/delete")
async def delete(request: Request, visit: OrgVisitDep, webhook_id: str) -> Response:
    _owner(visit)
    await posted(request, visit)
    _check(webhook_id, _WEBHOOK_ID)
    await metadata_of(request).delete_webhook(visit.org.id, webhook_id, request_id=_rid(visit))
    return redirect(f"{PREFIX}/o/{visit.org.id}/webhooks?deleted=1")
