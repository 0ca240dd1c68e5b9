"""``/api/webhooks`` (CONTRACT §11): endpoints that receive the organization's events, signed.

Organization keys and owners only: a member's personal key is 403. metadata owns endpoints
and deliveries, checks URLs (https, no internal address) and answers another organization's
endpoint 404, like one that does not exist.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Response
from fastapi.routing import APIRoute
from pydantic.json_schema import SkipJsonSchema
from starlette.routing import BaseRoute

from coffer_edge.clients.auth import Principal
from coffer_edge.deps import MetadataDep, PrincipalDep, RequestIdDep, needs
from coffer_edge.routers.folders import require_json
from coffer_edge.schemas import PageLimit, PageOffset, Success, TrueOrFalse, errors
from coffer_kit.contract.errors import forbidden, invalid
from coffer_kit.contract.limits import CURSOR_MAX_CHARS, PAGE_LIMIT_DEFAULT, PAGE_OFFSET_DEFAULT
from coffer_kit.contract.webhooks import (
    EVENT_TYPES,
    PING,
    WebhookAttemptList,
    WebhookCreate,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEndpointList,
    WebhookEndpointWithSecret,
    WebhookEvent,
    WebhookUpdate,
)


async def webhook_admin(principal: PrincipalDep) -> Principal:
    """The caller, if it may manage webhooks: an organization key, or an owner's personal key."""
    if principal.key_kind == "organization" or principal.role == "owner":
        return principal
    raise forbidden("Only organization keys and owners' keys manage webhooks.")


AdminDep = Annotated[Principal, Depends(webhook_admin)]


class JSONBodyRoute(APIRoute):
    """415 for a body that is not JSON; the actions (rotate-secret, test, redeliver) take none."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            headers = request.headers
            if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
                require_json(request)
            return await handler(request)

        return checked


router = APIRouter(prefix="/api/webhooks", tags=["webhooks"], route_class=JSONBodyRoute)


@router.post(
    "",
    status_code=201,
    response_model=WebhookEndpointWithSecret,
    openapi_extra=needs("webhooks:manage"),
    responses=errors(404, 409, 415),
)
async def create_webhook(
    body: WebhookCreate, principal: AdminDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """Subscribe a URL to events; the answer holds the signing secret, shown only now.

    At most 10 endpoints per organization (409 past it). ``folderId`` limits the endpoint to
    events of that folder's subtree. The URL must be https, and its host must not resolve to
    an internal address (400).
    """
    return await metadata.create_webhook(principal.organization_id, body, request_id=rid)


@router.get(
    "", response_model=WebhookEndpointList, openapi_extra=needs("webhooks:manage"), responses=errors()
)
async def list_webhooks(principal: AdminDep, metadata: MetadataDep, rid: RequestIdDep) -> Any:
    """The organization's endpoints, oldest first (never their secrets)."""
    return await metadata.list_webhooks(principal.organization_id, request_id=rid)


@router.get(
    "/{webhook_id}",
    response_model=WebhookEndpoint,
    openapi_extra=needs("webhooks:manage"),
    responses=errors(404),
)
async def get_webhook(webhook_id: str, principal: AdminDep, metadata: MetadataDep, rid: RequestIdDep) -> Any:
    """One endpoint."""
    return await metadata.get_webhook(principal.organization_id, webhook_id, request_id=rid)


@router.patch(
    "/{webhook_id}",
    response_model=WebhookEndpoint,
    openapi_extra=needs("webhooks:manage"),
    responses=errors(404, 415),
)
async def update_webhook(
    webhook_id: str, body: WebhookUpdate, principal: AdminDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """Change the URL, events, folder filter or description, pause (``enabled: false``) or
    resume (``enabled: true``, which also re-enables an endpoint the server disabled)."""
    if not body.model_fields_set:
        raise invalid("Send at least one of url, events, folderId, description, enabled.", field="body")
    return await metadata.update_webhook(principal.organization_id, webhook_id, body, request_id=rid)


@router.delete(
    "/{webhook_id}", response_model=Success, openapi_extra=needs("webhooks:manage"), responses=errors(404)
)
async def delete_webhook(
    webhook_id: str, principal: AdminDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """Delete an endpoint; its pending deliveries are dropped."""
    return await metadata.delete_webhook(principal.organization_id, webhook_id, request_id=rid)


@router.post(
    "/{webhook_id}/rotate-secret",
    response_model=WebhookEndpointWithSecret,
    openapi_extra=needs("webhooks:manage"),
    responses=errors(404),
)
async def rotate_webhook_secret(
    webhook_id: str, principal: AdminDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """A new signing secret (shown only now); for 24 hours deliveries carry a signature with
    each, so receivers can switch without missing one."""
    return await metadata.rotate_webhook_secret(principal.organization_id, webhook_id, request_id=rid)


@router.post(
    "/{webhook_id}/test",
    status_code=202,
    response_model=WebhookDelivery,
    openapi_extra=needs("webhooks:manage"),
    responses=errors(404, 409),
)
async def test_webhook(webhook_id: str, principal: AdminDep, metadata: MetadataDep, rid: RequestIdDep) -> Any:
    """Send a ``ping`` event to the endpoint now; its attempts show in the delivery log (409 if
    the endpoint is disabled)."""
    return await metadata.test_webhook(principal.organization_id, webhook_id, request_id=rid)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=WebhookAttemptList,
    openapi_extra=needs("webhooks:manage"),
    responses=errors(404),
)
async def list_webhook_deliveries(
    webhook_id: str,
    principal: AdminDep,
    metadata: MetadataDep,
    rid: RequestIdDep,
    limit: Annotated[PageLimit, Query(description="Page size, 1–100.")] = PAGE_LIMIT_DEFAULT,
    offset: Annotated[PageOffset, Query(description="Attempts to skip.")] = PAGE_OFFSET_DEFAULT,
    cursor: Annotated[
        str | SkipJsonSchema[None],
        Query(max_length=CURSOR_MAX_CHARS, description="A previous page's `nextCursor`: the page after it."),
    ] = None,
    total: Annotated[
        TrueOrFalse | SkipJsonSchema[None],
        Query(description="Count every attempt into `total`: default true without `cursor`, false with one."),
    ] = None,
) -> Response:
    """The delivery log, newest attempt first: event, attempt number, result, the receiver's
    status, latency, time and the first 1 KiB of its answer. Paged by `offset` or `cursor`."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    if cursor is not None:
        params["cursor"] = cursor
    if total is not None:
        params["total"] = total
    body = await metadata.list_webhook_deliveries(
        principal.organization_id, webhook_id, params=params, request_id=rid
    )
    return Response(body, media_type="application/json")


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=WebhookDelivery,
    openapi_extra=needs("webhooks:manage"),
    responses=errors(404, 409),
)
async def redeliver_webhook(
    webhook_id: str, delivery_id: str, principal: AdminDep, metadata: MetadataDep, rid: RequestIdDep
) -> Any:
    """Send a delivery again now: the same event, body and ``webhook-id`` (409 while an
    attempt of it is in flight)."""
    org_id = principal.organization_id
    return await metadata.redeliver_webhook(org_id, webhook_id, delivery_id, request_id=rid)


def document_events(app: FastAPI) -> None:
    """The requests Coffer sends to endpoints, in the OpenAPI document's ``webhooks`` section."""
    app.webhooks.routes.extend(_event_routes())


@functools.cache
def _event_routes() -> list[BaseRoute]:
    """Built once per process: the routes only feed the OpenAPI document, and building them
    (a dependant per event) costs more than the rest of the app."""
    events = APIRouter()
    for name in (*EVENT_TYPES, PING):

        async def event(
            body: WebhookEvent,
            webhook_id: Annotated[
                str, Header(alias="webhook-id", description="The event id (the same on every retry).")
            ],
            webhook_timestamp: Annotated[
                str,
                Header(alias="webhook-timestamp", description="Unix seconds when this attempt was signed."),
            ],
            webhook_signature: Annotated[
                str,
                Header(
                    alias="webhook-signature",
                    description="`v1,` + base64 HMAC-SHA256 of `id.timestamp.body` with the secret; two "
                    "space-separated entries for 24 h after a rotation (Standard Webhooks).",
                ),
            ],
        ) -> None:
            """Answer 2xx within 10 s; anything else is retried (410 disables the endpoint)."""

        events.post(
            name,
            summary=f"{name} (sent to endpoints)",
            status_code=204,
            operation_id=f"webhook_{name.replace('.', '_')}",
        )(event)
    return events.routes
