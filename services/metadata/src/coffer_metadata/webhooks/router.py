"""Internal webhook API, called by edge only; the organization comes from edge's principal."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query

from coffer_kit.contract.errors import invalid, not_found
from coffer_kit.contract.limits import CURSOR_MAX_CHARS, PAGE_LIMIT_MAX, PAGE_OFFSET_MAX
from coffer_kit.contract.webhooks import (
    WebhookCreate,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEndpointList,
    WebhookEndpointWithSecret,
    WebhookUpdate,
)
from coffer_kit.contract.wire import Done
from coffer_metadata import subtree
from coffer_metadata.config import Settings
from coffer_metadata.deps import SessionDep, SettingsDep
from coffer_metadata.events import ActorDep
from coffer_metadata.models import WebhookEndpoint as WebhookEndpointRow
from coffer_metadata.subtree import SubtreeDep
from coffer_metadata.webhooks import service
from coffer_metadata.webhooks.secrets import SecretBox

router = APIRouter(prefix="/internal/v1/orgs/{org_id}/webhooks")


def _box(settings: Settings) -> SecretBox:
    return SecretBox(settings.webhook_secret())


def _confined(org_id: str, webhook_id: str, session: SessionDep, root: SubtreeDep) -> None:
    """A subtree key (issue 46) reaches only the endpoints limited to its subtree: 404 else."""
    if root is None:
        return
    endpoint = session.get(WebhookEndpointRow, webhook_id)
    if (
        endpoint is not None
        and endpoint.organization_id == org_id
        and not (
            endpoint.folder_id is not None
            and subtree.inside(session, org_id=org_id, root=root, folder_id=endpoint.folder_id)
        )
    ):
        raise not_found(f"Webhook endpoint {webhook_id} does not exist.")


Confined = [Depends(_confined)]


@router.post("", status_code=201)
def create_webhook(
    org_id: str,
    body: WebhookCreate,
    session: SessionDep,
    settings: SettingsDep,
    actor: ActorDep,
    root: SubtreeDep,
) -> WebhookEndpointWithSecret:
    if root is not None:  # a subtree key's endpoint hears its subtree only
        folder = subtree.folder_or_root(session, org_id=org_id, root=root, folder_id=body.folderId)
        body = body.model_copy(update={"folderId": folder})
    box = _box(settings)
    return service.create(session, org_id=org_id, body=body, settings=settings, box=box, actor=actor)


@router.get("")
def list_webhooks(org_id: str, session: SessionDep, root: SubtreeDep) -> WebhookEndpointList:
    views = service.list_views(session, org_id=org_id)
    if root is not None:
        views = [
            v
            for v in views
            if v["folderId"] is not None
            and subtree.inside(session, org_id=org_id, root=root, folder_id=v["folderId"])
        ]
    return WebhookEndpointList.model_validate({"webhooks": views})


@router.get("/{webhook_id}", dependencies=Confined)
def get_webhook(org_id: str, webhook_id: str, session: SessionDep) -> WebhookEndpoint:
    return WebhookEndpoint.model_validate(service.get_view(session, org_id=org_id, webhook_id=webhook_id))


@router.patch("/{webhook_id}", dependencies=Confined)
def update_webhook(
    org_id: str,
    webhook_id: str,
    body: Annotated[WebhookUpdate, Body()],
    session: SessionDep,
    settings: SettingsDep,
    actor: ActorDep,
    root: SubtreeDep,
) -> WebhookEndpoint:
    changes = body.model_dump(mode="json", include=body.model_fields_set)
    if root is not None and "folderId" in changes:
        changes["folderId"] = subtree.folder_or_root(
            session, org_id=org_id, root=root, folder_id=changes["folderId"]
        )
    for field in ("url", "events", "enabled"):
        if field in changes and changes[field] is None:
            raise invalid(f"'{field}' must not be null.", field=field)
    view = service.update(
        session, org_id=org_id, webhook_id=webhook_id, changes=changes, settings=settings, actor=actor
    )
    return WebhookEndpoint.model_validate(view)


@router.delete("/{webhook_id}", dependencies=Confined)
def delete_webhook(org_id: str, webhook_id: str, session: SessionDep, actor: ActorDep) -> Done:
    service.delete(session, org_id=org_id, webhook_id=webhook_id, actor=actor)
    return Done()


@router.post("/{webhook_id}/rotate-secret", dependencies=Confined)
def rotate_secret(
    org_id: str, webhook_id: str, session: SessionDep, settings: SettingsDep, actor: ActorDep
) -> WebhookEndpointWithSecret:
    return service.rotate(session, org_id=org_id, webhook_id=webhook_id, box=_box(settings), actor=actor)


@router.post("/{webhook_id}/test", status_code=202, dependencies=Confined)
def test_webhook(
    org_id: str, webhook_id: str, session: SessionDep, settings: SettingsDep, actor: ActorDep
) -> WebhookDelivery:
    return service.ping(session, org_id=org_id, webhook_id=webhook_id, settings=settings, actor=actor)


@router.get("/{webhook_id}/deliveries", dependencies=Confined)
def list_deliveries(
    org_id: str,
    webhook_id: str,
    session: SessionDep,
    root: SubtreeDep,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = 50,
    offset: Annotated[int, Query(ge=0, le=PAGE_OFFSET_MAX)] = 0,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
    total: Annotated[bool | None, Query()] = None,
) -> dict[str, Any]:
    return service.attempts_page(
        session,
        org_id=org_id,
        webhook_id=webhook_id,
        limit=limit,
        offset=offset,
        cursor=cursor,
        with_total=total,
        current_scope=root is not None,
    )


@router.post("/{webhook_id}/deliveries/{delivery_id}/redeliver", status_code=202, dependencies=Confined)
def redeliver(
    org_id: str,
    webhook_id: str,
    delivery_id: str,
    session: SessionDep,
    settings: SettingsDep,
    root: SubtreeDep,
    actor: ActorDep,
) -> WebhookDelivery:
    if root is not None:
        # A subtree key redelivers only what its subtree made: the endpoint may have been
        # narrowed to it after sending the organization's other events, and redelivery goes
        # to the endpoint's URL as it is now (which the subtree key may have set).
        _check_event_inside(session, org_id=org_id, webhook_id=webhook_id, delivery_id=delivery_id, root=root)
    return service.redeliver(
        session,
        org_id=org_id,
        webhook_id=webhook_id,
        delivery_id=delivery_id,
        settings=settings,
        actor=actor,
        current_scope=root is not None,
    )


def _check_event_inside(
    session: SessionDep, *, org_id: str, webhook_id: str, delivery_id: str, root: str
) -> None:
    """404 unless the delivery's event happened inside ``root``'s subtree (before or after a
    move), as fan-out decides for an endpoint limited to it; a ping is the endpoint's own.
    Once retention has pruned the event (the outbox's 7 days; the log keeps 30), nothing says
    where it happened: still 404, saying why only for a delivery this key's log lists (planned
    in the endpoint's current scope, as attempts_page shows it), so it tells nothing of others."""
    from coffer_metadata.models import Event
    from coffer_metadata.models import WebhookDelivery as DeliveryRow
    from coffer_metadata.webhooks.dispatch.fanout import Tree

    delivery = session.get(DeliveryRow, delivery_id) if len(delivery_id) <= 40 else None
    if delivery is None:
        return  # (service.redeliver answers 404 for it)
    if not delivery.event_type.startswith(("asset.", "folder.")):
        return  # the endpoint's own (a test ping): about nothing of the organization's
    event = session.get(Event, delivery.event_id)
    if event is None:
        endpoint = session.get(WebhookEndpointRow, webhook_id)
        if (
            endpoint is not None
            and endpoint.organization_id == org_id
            and delivery.endpoint_id == endpoint.id
            and delivery.scope == endpoint.scope
        ):
            raise not_found(
                f"Delivery {delivery_id} cannot be redelivered by this key: its event is no longer kept."
            )
        raise not_found(f"Delivery {delivery_id} does not exist.")
    changes = json.loads(event.changes) if event.changes else {}
    tree = Tree(session.connection(), [event])
    if not tree.touches(event.type.partition(".")[0], json.loads(event.data), changes, root):
        raise not_found(f"Delivery {delivery_id} does not exist.")
