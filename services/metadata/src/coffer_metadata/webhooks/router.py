"""Internal webhook API, called by edge only; the organization comes from edge's principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query

from coffer_kit.errors import invalid
from coffer_kit.limits import PAGE_LIMIT_MAX, PAGE_OFFSET_MAX
from coffer_kit.webhooks import (
    WebhookAttemptList,
    WebhookCreate,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEndpointList,
    WebhookEndpointWithSecret,
    WebhookUpdate,
)
from coffer_kit.wire import Done
from coffer_metadata.config import Settings
from coffer_metadata.deps import SessionDep, SettingsDep
from coffer_metadata.events import ActorDep
from coffer_metadata.webhooks import service
from coffer_metadata.webhooks.secrets import SecretBox

router = APIRouter(prefix="/internal/v1/orgs/{org_id}/webhooks")


def _box(settings: Settings) -> SecretBox:
    return SecretBox(settings.webhook_secret())


@router.post("", status_code=201)
def create_webhook(
    org_id: str, body: WebhookCreate, session: SessionDep, settings: SettingsDep, actor: ActorDep
) -> WebhookEndpointWithSecret:
    box = _box(settings)
    return service.create(session, org_id=org_id, body=body, settings=settings, box=box, actor=actor)


@router.get("")
def list_webhooks(org_id: str, session: SessionDep) -> WebhookEndpointList:
    return WebhookEndpointList.model_validate({"webhooks": service.list_views(session, org_id=org_id)})


@router.get("/{webhook_id}")
def get_webhook(org_id: str, webhook_id: str, session: SessionDep) -> WebhookEndpoint:
    return WebhookEndpoint.model_validate(service.get_view(session, org_id=org_id, webhook_id=webhook_id))


@router.patch("/{webhook_id}")
def update_webhook(
    org_id: str,
    webhook_id: str,
    body: Annotated[WebhookUpdate, Body()],
    session: SessionDep,
    settings: SettingsDep,
    actor: ActorDep,
) -> WebhookEndpoint:
    changes = body.model_dump(mode="json", include=body.model_fields_set)
    for field in ("url", "events", "enabled"):
        if field in changes and changes[field] is None:
            raise invalid(f"'{field}' must not be null.", field=field)
    view = service.update(
        session, org_id=org_id, webhook_id=webhook_id, changes=changes, settings=settings, actor=actor
    )
    return WebhookEndpoint.model_validate(view)


@router.delete("/{webhook_id}")
def delete_webhook(org_id: str, webhook_id: str, session: SessionDep, actor: ActorDep) -> Done:
    service.delete(session, org_id=org_id, webhook_id=webhook_id, actor=actor)
    return Done()


@router.post("/{webhook_id}/rotate-secret")
def rotate_secret(
    org_id: str, webhook_id: str, session: SessionDep, settings: SettingsDep, actor: ActorDep
) -> WebhookEndpointWithSecret:
    return service.rotate(session, org_id=org_id, webhook_id=webhook_id, box=_box(settings), actor=actor)


@router.post("/{webhook_id}/test", status_code=202)
def test_webhook(org_id: str, webhook_id: str, session: SessionDep, settings: SettingsDep) -> WebhookDelivery:
    return service.ping(session, org_id=org_id, webhook_id=webhook_id, settings=settings)


@router.get("/{webhook_id}/deliveries")
def list_deliveries(
    org_id: str,
    webhook_id: str,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT_MAX)] = 50,
    offset: Annotated[int, Query(ge=0, le=PAGE_OFFSET_MAX)] = 0,
) -> WebhookAttemptList:
    return service.attempts_page(session, org_id=org_id, webhook_id=webhook_id, limit=limit, offset=offset)


@router.post("/{webhook_id}/deliveries/{delivery_id}/redeliver", status_code=202)
def redeliver(
    org_id: str, webhook_id: str, delivery_id: str, session: SessionDep, settings: SettingsDep
) -> WebhookDelivery:
    return service.redeliver(
        session, org_id=org_id, webhook_id=webhook_id, delivery_id=delivery_id, settings=settings
    )
