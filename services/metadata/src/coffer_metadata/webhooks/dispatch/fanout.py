"""Fan-out: which enabled endpoints want an event (its type, its time, the folder subtree), and
the delivery rows that makes, written with the events marked dispatched (docs/webhooks.md,
"How delivery works")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection, Engine

from coffer_kit.contract.timeutil import as_utc
from coffer_kit.contract.webhooks import EVENT_TYPES
from coffer_metadata.webhooks import service
from coffer_metadata.webhooks.dispatch import statements as sql

# Parent links followed to decide whether a folder is inside an endpoint's folder.
MAX_FOLDER_DEPTH = 1000


@dataclass(slots=True)
class FanOut:
    """Events to mark dispatched, and the delivery rows they make."""

    event_ids: list[str]
    deliveries: list[dict[str, Any]]


def plan_fan_out(engine: Engine, *, now: datetime, retry_for: float) -> FanOut:
    """The deliveries of up to FAN_OUT_BATCH events not yet dispatched (reads only), each
    retried for ``retry_for`` seconds."""
    with engine.connect() as connection:
        rows = list(connection.execute(sql.PENDING_EVENTS))
        if not rows:
            return FanOut([], [])
        endpoints: dict[str, list[Subscription]] = {}
        for found in connection.execute(
            sql.ORG_ENDPOINTS, {sql.IDS: list({row.organization_id for row in rows})}
        ):
            endpoints.setdefault(found.organization_id, []).append(Subscription.of(found))
        tree = Tree(connection, rows)
        deliveries = []
        for row in rows:
            if row.type not in EVENT_TYPES:
                continue  # an endpoint's own changes are audited, not sent
            wanted = endpoints.get(row.organization_id, ())
            if not wanted:
                continue
            data = json.loads(row.data)
            changes = json.loads(row.changes) if row.changes else {}
            kind = row.type.partition(".")[0]
            created_at = as_utc(row.created_at)
            for endpoint in wanted:
                if not endpoint.wants(row.type, created_at, tree, kind, data, changes):
                    continue
                body = service.body_of(
                    event_id=row.id,
                    type=row.type,
                    created_at=created_at,
                    org_id=row.organization_id,
                    data={kind: data},
                )
                deliveries.append(
                    service.new_delivery(
                        endpoint_id=endpoint.id,
                        org_id=row.organization_id,
                        event_id=row.id,
                        type=row.type,
                        body=body,
                        trace=row.trace,
                        scope=endpoint.scope,
                        now=now,
                        retry_for=retry_for,
                    )
                )
    return FanOut([row.id for row in rows], deliveries)


def write_fan_out(connection: Connection, fan: FanOut, *, postgresql: bool) -> None:
    """Insert the deliveries of the planned events still not dispatched, and mark them: on
    PostgreSQL those another dispatcher holds are skipped (``FOR UPDATE SKIP LOCKED``);
    SQLite has one writer. The unique (endpoint, event) pair is the last word."""
    query = sql.UNDISPATCHED_SKIP_LOCKED if postgresql else sql.UNDISPATCHED
    still = {row.id for row in connection.execute(query, {sql.IDS: fan.event_ids})}
    deliveries = [row for row in fan.deliveries if row["event_id"] in still]
    if deliveries:
        connection.execute(sql.NEW_DELIVERIES, deliveries)
    if still:
        connection.execute(sql.MARK_DISPATCHED, {sql.IDS: list(still)})


@dataclass(slots=True, frozen=True)
class Subscription:
    """An enabled endpoint as the fan-out matches events to it."""

    id: str
    events: frozenset[str]
    created_at: datetime
    folder_id: str | None
    scope: int  # read with folder_id: a delivery planned before a change keeps the old scope

    @classmethod
    def of(cls, row: Any) -> Subscription:
        events = frozenset(json.loads(row.events))
        return cls(row.id, events, as_utc(row.created_at), row.folder_id, row.scope)

    def wants(
        self,
        type: str,
        created_at: datetime,
        tree: Tree,
        kind: str,
        data: dict[str, Any],
        changes: dict[str, Any],
    ) -> bool:
        """Whether it subscribed to an event: its type, its time (a change made before the
        endpoint existed is not), its folder filter."""
        if type not in self.events or created_at < self.created_at:
            return False
        return not self.folder_id or tree.touches(kind, data, changes, self.folder_id)


class Tree:
    """Parent links of folders, from the database and from the batch's own folder events (a
    deleted folder is gone from the table, but its event still says where it was)."""

    def __init__(self, connection: Connection, rows: list[Any]) -> None:
        self.connection = connection
        self.parents: dict[str, str | None] = {}
        self.from_events: dict[str, str | None] = {}
        for row in rows:
            if row.type.startswith("folder."):
                data = json.loads(row.data)
                self.from_events[data["id"]] = data.get("parentId")

    def parent(self, folder_id: str) -> str | None:
        if folder_id not in self.parents:
            found = self.connection.execute(sql.FOLDER_PARENT, {"folder": folder_id}).first()
            self.parents[folder_id] = found.parent_id if found else self.from_events.get(folder_id)
        return self.parents[folder_id]

    def inside(self, folder_id: str | None, root: str) -> bool:
        """Whether ``folder_id`` is ``root`` or below it."""
        node = folder_id
        for _ in range(MAX_FOLDER_DEPTH):
            if node is None:
                return False
            if node == root:
                return True
            node = self.parent(node)
        return False

    def touches(self, kind: str, data: dict[str, Any], changes: dict[str, Any], root: str) -> bool:
        """Whether an event is inside ``root``'s subtree (before or after a move)."""
        if kind == "asset":
            places = (
                [data.get("folderId"), changes.get("folderId")]
                if "folderId" in changes
                else [data.get("folderId")]
            )
        else:
            places = [data.get("id")]
            if "parentId" in changes:
                places.append(changes.get("parentId"))
        return any(self.inside(place, root) for place in places if place)
