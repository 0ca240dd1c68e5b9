"""Webhooks (CONTRACT §11) as the public API writes them, and their limits, defined once.

edge declares these as its request and response models (the OpenAPI document's schemas);
metadata, which owns endpoints and deliveries, writes its answers with them, so a body
crosses both services unchanged.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from coffer_kit.contract.resources import Asset, Folder

# The events an endpoint subscribes to; ``ping`` is sent only by POST /api/webhooks/{id}/test.
EventType = Literal[
    "asset.created",
    "asset.updated",
    "asset.deleted",
    "asset.scanned",
    "asset.infected",
    "asset.trashed",
    "asset.restored",
    "asset.expired",
    "asset.purged",
    "folder.created",
    "folder.updated",
    "folder.deleted",
]
EVENT_TYPES: tuple[str, ...] = (
    "asset.created",
    "asset.updated",
    "asset.deleted",
    "asset.scanned",
    "asset.infected",
    "asset.trashed",
    "asset.restored",
    "asset.expired",
    "asset.purged",
    "folder.created",
    "folder.updated",
    "folder.deleted",
)
PING = "ping"

# Endpoints one organization may have.
MAX_ENDPOINTS = 10
# An endpoint's URL, in characters.
MAX_URL_CHARS = 2048
MAX_DESCRIPTION_CHARS = 500
# The receiver's answer kept with each attempt (and read at most), in bytes.
RESPONSE_KEEP_BYTES = 1024
# Both secrets sign this long after a rotation.
ROTATION_OVERLAP_SECONDS = 24 * 3600
# A receiver's answer must come within this (CONTRACT §11: a 2xx within 10 s is success).
DELIVERY_TIMEOUT_SECONDS = 10.0

DeliveryStatus = Literal["pending", "succeeded", "failed"]
AttemptResult = Literal["succeeded", "failed"]


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    url: str = Field(
        min_length=1,
        max_length=MAX_URL_CHARS,
        description="Where events are POSTed: `https` (plain `http` only where the operator allows it); "
        "its host must not resolve to a loopback, private, link-local or otherwise internal address.",
        examples=["https://example.com/coffer-hook"],
    )
    events: list[EventType] = Field(
        min_length=1, max_length=len(EVENT_TYPES), description="The events to receive (at least one)."
    )
    folderId: str | None = Field(
        default=None, description="Receive only events of this folder and everything below it."
    )
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)


class WebhookUpdate(BaseModel):
    """Only the fields sent change; ``folderId: null`` removes the folder filter."""

    model_config = ConfigDict(extra="ignore")

    url: str | None = Field(default=None, min_length=1, max_length=MAX_URL_CHARS)
    events: list[EventType] | None = Field(default=None, min_length=1, max_length=len(EVENT_TYPES))
    folderId: str | None = None
    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION_CHARS)
    enabled: bool | None = Field(
        default=None, description="false pauses deliveries; true resumes them (and clears `disabledReason`)."
    )


class WebhookEndpoint(BaseModel):
    id: str = Field(examples=["whk_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"])
    organizationId: str
    url: str
    events: list[str]
    folderId: str | None = Field(description="Only events inside this folder's subtree; null = all.")
    description: str | None
    enabled: bool
    disabledReason: str | None = Field(
        description="Why deliveries stopped: `paused` (by a caller), `gone` (the receiver answered 410), "
        "`failing` (every delivery failed for 5 days); null while enabled."
    )
    previousSecretExpiresAt: str | None = Field(
        description="After a rotation, until when the previous secret still signs (a second signature)."
    )
    createdAt: str = Field(description="ISO 8601 UTC with milliseconds.")
    updatedAt: str = Field(description="ISO 8601 UTC with milliseconds.")


class WebhookEndpointWithSecret(WebhookEndpoint):
    secret: str = Field(
        description="The signing secret (`whsec_` + base64), shown only now: keep it to verify deliveries."
    )


class WebhookEndpointList(BaseModel):
    webhooks: list[WebhookEndpoint]


class WebhookAttempt(BaseModel):
    """One attempt to deliver one event to one endpoint (a row of the delivery log)."""

    id: str = Field(examples=["wha_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"])
    deliveryId: str = Field(description="The delivery (one event to this endpoint) to redeliver.")
    eventId: str = Field(description="The event's id: the `webhook-id` header, the same on every attempt.")
    eventType: str
    attempt: int = Field(description="1 for the first attempt of the delivery, then 2, 3…")
    result: AttemptResult
    responseStatus: int | None = Field(description="The receiver's HTTP status; null if none came.")
    error: str | None = Field(description="Why no answer came (timeout, refused address…); null if one did.")
    latencyMs: int
    response: str | None = Field(description="The first 1 KiB of the receiver's answer (as text).")
    createdAt: str = Field(description="When the attempt started.")
    deliveryStatus: DeliveryStatus = Field(description="Where the delivery is now.")
    nextAttemptAt: str | None = Field(description="When a pending delivery is tried again.")


class WebhookAttemptList(BaseModel):
    deliveries: list[WebhookAttempt] = Field(description="Newest first.")
    total: int | None = Field(
        default=None,
        description="Every attempt; on an offset page always, on a cursor page only with `total=true`.",
    )
    limit: int
    offset: int | None = Field(default=None, description="Present on an offset page.")
    nextCursor: str | None = Field(
        default=None, description="The next page's `cursor`; null on the last page."
    )


class WebhookDelivery(BaseModel):
    """A delivery queued now (a test ping, or a redelivery)."""

    id: str = Field(examples=["whd_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"])
    eventId: str
    eventType: str
    status: DeliveryStatus
    attempts: int
    nextAttemptAt: str | None
    createdAt: str


class PingTarget(BaseModel):
    id: str
    url: str


class WebhookEventData(BaseModel):
    """The resource the event is about, as the public API writes it: exactly one field."""

    asset: Asset | None = Field(
        default=None, description="asset.* events: the asset after the change (before it, for asset.deleted)."
    )
    folder: Folder | None = Field(
        default=None,
        description="folder.* events: the folder after the change (before it, for folder.deleted).",
    )
    webhook: PingTarget | None = Field(default=None, description="ping: the endpoint tested.")


class WebhookEvent(BaseModel):
    """The body of every webhook request Coffer sends (CONTRACT §11)."""

    type: Literal[
        "asset.created",
        "asset.updated",
        "asset.deleted",
        "asset.scanned",
        "asset.infected",
        "asset.trashed",
        "asset.restored",
        "asset.expired",
        "asset.purged",
        "folder.created",
        "folder.updated",
        "folder.deleted",
        "ping",
    ]
    id: str = Field(description="The event id; also the `webhook-id` header, the same on every retry.")
    createdAt: str = Field(description="When the change was committed (ISO 8601 UTC, milliseconds).")
    organizationId: str
    data: WebhookEventData
