"""Asset operations: the metadata halves of the upload and delete protocols (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from prometheus_client import Counter
from sqlalchemy.engine import Connection, Row
from sqlalchemy.orm.attributes import flag_modified
from sqlmodel import Session

from coffer_kit import pagination
from coffer_kit.contract import describe
from coffer_kit.contract.errors import (
    CofferError,
    conflict,
    forbidden,
    invalid,
    not_found,
    quota_exceeded,
    rate_limited,
)
from coffer_kit.contract.expiry import folder_expiry
from coffer_kit.contract.ids import is_asset_id, is_folder_id
from coffer_kit.contract.names import could_be_in_a_name, normalize_name, search_key
from coffer_kit.contract.timeutil import as_utc, isoformat, utcnow
from coffer_kit.contract.urls import asset_prefix, public_url
from coffer_kit.contract.wire import Actor, StaleIntent, StaleTombstone, StoredUsage, SweepCandidates
from coffer_kit.db import Database, PgTransaction
from coffer_kit.tracing import tracer
from coffer_metadata import events
from coffer_metadata import subtree as confined
from coffer_metadata.assets import filters as asset_filters
from coffer_metadata.assets import repository
from coffer_metadata.folders import repository as folder_repository
from coffer_metadata.folders.service import Unset, check_folder, missing_folder
from coffer_metadata.models import Asset

# COFFER_METADATA_TUS_IDLE_SECONDS's default (config.py): an hour.
DEFAULT_IDLE_SECONDS = 3600.0
QUOTA_REJECTIONS = Counter(
    "coffer_quota_rejections_total", "Uploads refused because they would exceed the quota."
)


def view(asset: Asset | Row | SimpleNamespace, cdn_url: str) -> dict[str, Any]:  # type: ignore[type-arg]
    """An asset (a model, a row of its public fields, or its values) as the contract writes it."""
    return {
        "id": asset.id,
        "organizationId": asset.organization_id,
        "folderId": asset.folder_id,
        "key": asset.key,
        "name": asset.name,
        "mimeType": asset.mime_type,
        "size": asset.size,
        # CONTRACT §12: a private asset has no public URL.
        "publicUrl": public_url(cdn_url, asset.key) if asset.visibility != "private" else None,
        "createdAt": isoformat(asset.created_at),
        "sha256": asset.sha256,
        "updatedAt": isoformat(asset.updated_at),
        "visibility": asset.visibility,
        "detectedType": asset.detected_type,
        "scanStatus": asset.scan_status,
        "scanSignature": asset.scan_signature,
        "expiresAt": isoformat(asset.expires_at) if asset.expires_at is not None else None,
        "metadata": describe.metadata_of(asset.custom_metadata),
        "tags": describe.tags_of(asset.tags),
        "image": describe.image_of(asset.image),
        "placeholder": asset.placeholder,
    }


def page_views(rows: Iterable[Row], cdn_url: str, org_id: str) -> list[dict[str, Any]]:  # type: ignore[type-arg]
    """A page's rows (``repository``'s listing columns) as ``view`` writes them, for less.

    ``view`` costs a page of 50 about 1 ms of CPU (half of the listing's own): three
    ``quote`` calls per public URL, four ``datetime.replace`` per row. Here the key's first
    two segments, the organization's id and the asset's (letters, digits and ``_``, which
    ``quote`` leaves as they are), are taken as they are and only the filename is quoted; a
    naive timestamp (SQLite's) is formatted as it is. Anything else goes through ``view``'s
    own helpers, so the answer is the same byte for byte (test_list_views_match_view).
    """
    base = cdn_url.rstrip("/") + "/"
    org_safe = quote(org_id, safe="") == org_id
    views = []
    for row in rows:
        # (A search's rows carry their window count after the listing columns.)
        (
            asset_id,
            owner,
            folder_id,
            key,
            name,
            mime_type,
            size,
            created,
            sha256,
            updated,
            visibility,
            detected_type,
            scan_status,
            scan_signature,
            expires_at,
            custom_metadata,
            tags,
            image,
            placeholder,
            *_,
        ) = row
        url = None
        if visibility != "private":
            head = f"{owner}/{asset_id}/"
            if org_safe and owner == org_id and key.startswith(head) and is_asset_id(asset_id):
                url = base + head + quote(key[len(head) :], safe="")
            else:
                url = public_url(cdn_url, key)
        views.append(
            {
                "id": asset_id,
                "organizationId": owner,
                "folderId": folder_id,
                "key": key,
                "name": name,
                "mimeType": mime_type,
                "size": size,
                "publicUrl": url,
                "createdAt": _iso(created),
                "sha256": sha256,
                "updatedAt": _iso(updated),
                "visibility": visibility,
                "detectedType": detected_type,
                "scanStatus": scan_status,
                "scanSignature": scan_signature,
                "expiresAt": _iso(expires_at) if expires_at is not None else None,
                "metadata": describe.metadata_of(custom_metadata),
                "tags": describe.tags_of(tags),
                "image": describe.image_of(image),
                "placeholder": placeholder,
            }
        )
    return views


def _iso(value: datetime) -> str:
    """``isoformat``, without its two conversions for a naive (UTC) timestamp."""
    if value.tzinfo is None:
        return value.isoformat(timespec="milliseconds") + "Z"
    return isoformat(value)


def _missing(connection: Connection, asset_id: str) -> CofferError:
    """Why the organization has no such asset: 403 if it is another's, 404 if none."""
    if is_asset_id(asset_id) and repository.owner(connection, asset_id) is not None:
        return _elsewhere(asset_id)
    return not_found(f"Asset {asset_id} does not exist.")


def _elsewhere(asset_id: str) -> CofferError:
    return forbidden(f"Asset {asset_id} belongs to another organization.")


async def read_view(database: Database, *, org_id: str, asset_id: str, cdn_url: str) -> dict[str, Any]:
    """The organization's asset as the contract writes it; 403 or 404 otherwise."""
    if not is_asset_id(asset_id):
        raise not_found(f"Asset {asset_id!r} does not exist.")
    row = await repository.get_row(database, org_id=org_id, asset_id=asset_id)
    if row is None:
        if await repository.read_owner(database, asset_id) is not None:
            raise _elsewhere(asset_id)
        raise not_found(f"Asset {asset_id} does not exist.")
    return view(row, cdn_url)


@dataclass(frozen=True, slots=True)
class NewIntent:
    """Step 1 of an upload: remember that bytes may soon exist under the asset's prefix.

    Before any byte streams, the upload holds ``reserve_bytes`` (the most it can store) against
    the quota beside the organization's other uploads in flight, whose number is capped. It is
    refused when even ``least_bytes`` (the least its body can carry) would not fit: an
    organization near its quota, or one opening uploads by the thousand, is refused here rather
    than after its bytes have cost disk and bandwidth. The commit checks the stored size, so
    the quota stays exact and a file that fits is never refused for its framing."""

    org_id: str
    asset_id: str
    max_in_flight: int
    reserve_bytes: int = 0
    least_bytes: int = 0
    quota_bytes: int | None = None
    # After how long without a write a resumable upload's hold no longer counts (``repository._ACTIVE``).
    idle_seconds: float = DEFAULT_IDLE_SECONDS

    def active_after(self) -> datetime:
        return repository.active_after(now=utcnow(), idle=timedelta(seconds=self.idle_seconds))

    def room(self, used: int) -> int | None:
        """What the quota leaves beside ``used`` stored bytes (None: no quota asked)."""
        return None if self.quota_bytes is None else max(0, self.quota_bytes - used)

    def admitted(self, *, used: int, uploads: int, reserved: int) -> dict[str, Any]:
        """The intent's row, given the organization's stored bytes and its uploads in flight
        (read under its usage row's lock); 429 past the cap, 413 if the least bytes do not fit.
        It holds its most, but never more than the quota leaves: a body without a length (the
        100 MiB bound) held more than a small quota, and every other upload was refused while
        it streamed (edge stops such a body at the room: ``room``)."""
        if uploads >= self.max_in_flight:
            raise rate_limited(
                f"The organization has {uploads} uploads in progress, the most it may have at once; "
                "retry when one has finished.",
                retry_after=1,
            )
        if self.quota_bytes is not None and used + reserved + self.least_bytes > self.quota_bytes:
            QUOTA_REJECTIONS.inc()
            raise quota_exceeded(
                size=self.reserve_bytes,
                used_bytes=used,
                quota_bytes=self.quota_bytes,
                in_flight_bytes=reserved,
            )
        return repository.intent_row(
            org_id=self.org_id,
            asset_id=self.asset_id,
            key_prefix=asset_prefix(self.org_id, self.asset_id),
            now=utcnow(),
            reserved_bytes=self.reserve_bytes
            if self.quota_bytes is None
            else min(self.reserve_bytes, self.quota_bytes - used - reserved),
        )


@dataclass(frozen=True, slots=True)
class Admitted:
    """An intent recorded: the organization's stored bytes, and the room its quota left beside
    them (``NewIntent.room``)."""

    used_bytes: int
    room_bytes: int | None


def register_intent(session: Session, *, intent: NewIntent) -> Admitted:
    """Record ``intent`` (see :class:`NewIntent`); 409 if the asset has one already."""
    used = repository.lock_usage(session, org_id=intent.org_id)
    uploads, reserved = repository.uploads_in_flight(
        session, org_id=intent.org_id, active_after=intent.active_after()
    )
    if not repository.add_intent(session, intent.admitted(used=used, uploads=uploads, reserved=reserved)):
        raise conflict(f"An upload for {intent.asset_id} is already registered.")
    return Admitted(used, intent.room(used))


async def register_intent_on_loop(transaction: PgTransaction, *, intent: NewIntent) -> Admitted | None:
    """``register_intent`` on PostgreSQL's event-loop connections (``Database.write``'s
    ``on_loop``), committed; None for an organization without a usage row yet, whose first
    intent ``register_intent`` makes."""
    found = await repository.lock_usage_on_loop(
        transaction, org_id=intent.org_id, active_after=intent.active_after()
    )
    if found is None:
        return None
    used, uploads, reserved = found
    row = intent.admitted(used=used, uploads=uploads, reserved=reserved)
    if not await repository.add_intent_on_loop(transaction, row):
        raise conflict(f"An upload for {intent.asset_id} is already registered.")
    return Admitted(used, intent.room(used))


def commit_upload(
    session: Session,
    *,
    org_id: str,
    asset_id: str,
    key: str,
    name: str,
    folder_id: str | None,
    mime_type: str,
    size: int,
    sha256: str,
    quota_bytes: int,
    visibility: str = "public",
    idle_seconds: float = DEFAULT_IDLE_SECONDS,
    detected_type: str | None = None,
    scan_status: str | None = None,
    expires_at: datetime | None = None,
    metadata: describe.Metadata | None = None,
    tags: list[str] | None = None,
) -> dict[str, Any]:
    """Step 3: check the folder, reserve quota (honouring the organization's other resumable
    uploads' holds), insert the asset, consume the intent — one transaction; the commit's
    steps (``repository._COMMIT_CHECKS`` and after) one by one, answered by ``refusal``."""
    asset = _asset_row(
        org_id=org_id,
        asset_id=asset_id,
        key=key,
        name=name,
        folder_id=folder_id,
        mime_type=mime_type,
        size=size,
        sha256=sha256,
        visibility=visibility,
        detected_type=detected_type,
        scan_status=scan_status,
        expires_at=expires_at,
        metadata=metadata,
        tags=tags,
    )
    params = _commit_params(asset, quota_bytes=quota_bytes, idle_seconds=idle_seconds)
    if folder_id is not None:
        # In turns with folder deletes: one committed between the folder's check and the insert
        # failed the insert on the foreign key, a 500 (every tus completion, every upload into a
        # folder with a default expiry); after it, the check answers 404. Before the usage row's
        # lock, in the order a restore takes them.
        folder_repository.lock_tree(session, org_id=org_id)
    with tracer.start_as_current_span("quota.reserve"):
        repository.lock_usage(session, org_id=org_id)  # (makes the row if missing)
        checks = repository.commit_checks(session, params)
        if checks.needs_expiry:  # the folder's default (issue 47): from the commit's own time
            asset["expires_at"] = folder_expiry(checks.expiry_days, now=asset["created_at"])
        consumed = repository.consume_checked_intent(session, params)
    if (refused := refusal(asset, checks, consumed=consumed, quota_bytes=quota_bytes)) is not None:
        raise refused
    repository.reserve(session, params)
    repository.add_asset(session, asset)
    return asset


def refusal(
    asset: dict[str, Any], checks: repository.CommitChecks, *, consumed: bool, quota_bytes: int
) -> CofferError | None:
    """Why the commit of ``asset`` was refused, if it was (then it wrote nothing), in this
    order: the folder is not the organization's (403 or 404), the upload does not fit the
    quota (413), its intent is gone (409)."""
    if not checks.folder_ok:
        return missing_folder(asset["folder_id"], owner=checks.folder_owner)
    if not checks.fits:
        QUOTA_REJECTIONS.inc()
        return quota_exceeded(
            size=asset["size"], used_bytes=checks.used, quota_bytes=quota_bytes, in_flight_bytes=checks.held
        )
    if not consumed:
        # The sweeper claimed this upload (or it never registered): its bytes are being deleted.
        return conflict("The upload took too long and was abandoned; upload again.")
    return None


def _commit_params(asset: dict[str, Any], *, quota_bytes: int, idle_seconds: float) -> dict[str, Any]:
    active_after = repository.active_after(now=utcnow(), idle=timedelta(seconds=idle_seconds))
    return repository.commit_params(asset, quota_bytes=quota_bytes, active_after=active_after)


def _asset_row(*, org_id: str, asset_id: str, key: str, name: str, **fields: Any) -> dict[str, Any]:
    """A new asset's row (every column of ``assets``); 400 for a key outside the asset's
    prefix, a name no asset may have or an expiry passed, 404 for a folder id no folder can
    have."""
    if not key.startswith(asset_prefix(org_id, asset_id)):
        raise invalid("The key does not belong to this asset.", field="key")
    name = normalize_name(name)
    folder_id = fields.get("folder_id")
    if folder_id is not None and not is_folder_id(folder_id):
        raise not_found(f"Folder {folder_id!r} does not exist.")
    now = utcnow()
    if (expires_at := fields.get("expires_at")) is not None and as_utc(expires_at) <= now:
        # Checked when the upload began, but a body may stream for most of an hour and a
        # resumable upload for days: an asset made already expired was gone moments later.
        raise invalid(
            f"'expiresAt' ({isoformat(expires_at)}) passed while the file was uploading; "
            "upload it again with a later one, or none.",
            field="expiresAt",
        )
    scan_status = fields.pop("scan_status", None)
    described = _described(
        metadata=fields.pop("metadata", None),
        tags=fields.pop("tags", None),
        media_types=(fields.get("mime_type"), fields.get("detected_type")),
        now=now,
    )
    return {
        "id": asset_id,
        "organization_id": org_id,
        "key": key,
        "name": name,
        "created_at": now,
        "updated_at": now,
        "name_key": search_key(name),
        "detected_type": None,
        # A pending scan is the queue's at once (the scan job, docs/architecture.md).
        "scan_status": scan_status,
        "scan_signature": None,
        "scan_attempts": 0,
        "scan_due_at": now if scan_status == "pending" else None,
        "expires_at": None,
        **described,
        **fields,
    }


def _described(
    *, metadata: object, tags: object, media_types: tuple[str | None, ...], now: datetime
) -> dict[str, Any]:
    """A new asset's issue-50 columns: its metadata and tags (bounded: 400 naming the field),
    no image facts yet, and for a file that may be an image the transforms read, its facts
    queued (computed after the commit, never on the upload's path)."""
    image = describe.facts_due(*media_types)
    return {
        "custom_metadata": describe.check_metadata(metadata) if metadata is not None else {},
        "tags": describe.check_tags(tags) if tags is not None else [],
        "image": None,
        "placeholder": None,
        "facts_due_at": now if image else None,
    }


def commit_upload_view(session: Session, *, cdn_url: str, actor: Actor, **upload: Any) -> dict[str, Any]:
    """``commit_upload`` and its event, answered as the contract writes the asset."""
    asset = commit_upload(session, **upload)
    public = view(SimpleNamespace(**asset), cdn_url)
    org_id, now = asset["organization_id"], asset["created_at"]
    events.record(session, org_id=org_id, type="asset.created", data=public, actor=actor, now=now)
    return public


async def commit_upload_view_on_loop(
    transaction: PgTransaction,
    *,
    cdn_url: str,
    actor: Actor,
    quota_bytes: int,
    idle_seconds: float = DEFAULT_IDLE_SECONDS,
    **upload: Any,
) -> dict[str, Any] | None:
    """``commit_upload_view`` on PostgreSQL's event-loop connections (``Database.write``'s
    ``on_loop``): the same steps chained into one statement, sent with the COMMIT in one
    exchange, and answered by the same ``refusal``; None, for ``commit_upload_view`` to run,
    for an organization without a usage row yet."""
    asset = _asset_row(**upload)
    public = view(SimpleNamespace(**asset), cdn_url)
    org_id, now = asset["organization_id"], asset["created_at"]
    event = events.row(org_id=org_id, type="asset.created", data=public, actor=actor, now=now)
    params = _commit_params(asset, quota_bytes=quota_bytes, idle_seconds=idle_seconds)
    with tracer.start_as_current_span("quota.reserve"):
        done = await repository.commit_on_loop(transaction, asset=asset, event=event, params=params)
    if done is None:
        return None
    checks, consumed = done
    if checks.folder_ok and checks.fits and checks.needs_expiry:
        # The folder has a default expiry the row did not know: nothing was written, and
        # ``commit_upload_view`` commits with it (only uploads into such a folder pay this).
        return None
    if (refused := refusal(asset, checks, consumed=consumed, quota_bytes=quota_bytes)) is not None:
        raise refused
    return public


def abandon_upload(session: Session, *, org_id: str, asset_id: str) -> None:
    """After edge deleted a failed upload's bytes: forget its intent."""
    repository.consume_intent(session, org_id=org_id, asset_id=asset_id)


def release_upload(session: Session, *, org_id: str, asset_id: str) -> None:
    """A failed upload whose bytes edge could not delete (blob down): its intent marked swept,
    as the sweeper marks it, so that it holds no quota or place in flight from now and can
    never commit, and is kept for the sweeper to delete its bytes."""
    repository.mark_swept(session, org_id=org_id, asset_id=asset_id)


def _placement(
    session: Session, *, org_id: str, folder_id: str | None, subtree: str | None, recursive: bool
) -> tuple[str | None, bool, str | None]:
    """Where a listing looks: (the folder, root level only, the subtree it keeps to)."""
    root_only = folder_id == ""
    folder = folder_id or None
    within: str | None = None
    if subtree is not None:
        if root_only:
            root_only, folder = False, subtree
        elif folder is None:
            within = subtree
        else:
            confined.require_inside(session, org_id=org_id, root=subtree, folder_id=folder)
    if folder is not None:
        check_folder(session, org_id=org_id, folder_id=folder)
    if recursive:  # the folder's whole subtree (or the organization's, or the key's)
        if folder is not None:
            within, folder = folder, None
        root_only = False
    return folder, root_only, within


def list_views(
    session: Session,
    *,
    org_id: str,
    folder_id: str | None,
    limit: int,
    offset: int,
    cdn_url: str,
    q: str | None = None,
    sort: repository.Sort = repository.DEFAULT_SORT,
    visibility: str | None = None,
    subtree: str | None = None,
    cursor: str | None = None,
    with_total: bool | None = None,
    filters: asset_filters.AssetFilters = asset_filters.NONE,
    recursive: bool = False,
) -> dict[str, Any]:
    """A page of assets and the total that match, as the contract writes them.

    With a ``cursor``, or ``with_total`` false (``?total=false``), the page is read by keyset
    (``keyset_views``).

    ``folder_id`` "" means root level only; ``q`` keeps names containing it (any case);
    ``visibility`` keeps only public or only private assets. With ``subtree`` (a subtree key,
    issue 46) that folder is the root: "" lists its own assets, none lists its whole subtree,
    and a folder outside it is 404.
    """
    repository.one_snapshot(session)
    folder, root_only, within = _placement(
        session, org_id=org_id, folder_id=folder_id, subtree=subtree, recursive=recursive
    )
    extra = tuple(asset_filters.where(session.get_bind().dialect.name, org_id, filters))
    if cursor is not None or with_total is False:
        if offset:
            raise invalid("'offset' cannot be combined with 'cursor' or 'total=false'.", field="offset")
        where = Where(
            org_id,
            folder,
            root_only,
            q,
            visibility,
            within,
            extra,
            repr(filters) if filters else "",
            recursive,
        )
        page = keyset_views(
            session, where, sort=sort, limit=limit, cursor=cursor, total=bool(with_total), cdn_url=cdn_url
        )
        if recursive:
            with_folder_paths(session, org_id=org_id, views=page["assets"], root=subtree)
        return page
    if q is not None and not could_be_in_a_name(q):
        # No name holds a control character (and PostgreSQL could not even compare a NUL).
        return {"assets": [], "total": 0, "limit": limit, "offset": offset, "nextCursor": None}
    if q is None and sort == repository.DEFAULT_SORT and visibility is None and within is None and not extra:
        total = repository.count(session, org_id=org_id, folder_id=folder, root_only=root_only)
        items = repository.page(
            session,
            org_id=org_id,
            folder_id=folder,
            root_only=root_only,
            limit=limit,
            offset=offset,
            total=total,
        )
    else:
        q_key = search_key(q) if q is not None else None
        items, matches = repository.search_page(
            session,
            org_id=org_id,
            folder_id=folder,
            root_only=root_only,
            q_key=q_key,
            sort=sort,
            limit=limit,
            offset=offset,
            visibility=visibility,
            within=within,
            extra=extra,
        )
        if matches is not None:
            total = matches
        elif q_key is None and visibility is None and within is None and not extra:
            total = repository.count(session, org_id=org_id, folder_id=folder, root_only=root_only)
        else:  # a page past the end, or a visibility without a search: count apart
            total = repository.search_count(
                session,
                org_id=org_id,
                folder_id=folder,
                root_only=root_only,
                q_key=q_key,
                visibility=visibility,
                within=within,
                extra=extra,
            )
    listing = f"assets:{sort}"
    scope = Where(
        org_id, folder, root_only, q, visibility, within, extra, repr(filters) if filters else "", recursive
    ).scope()
    column = repository.SORTS[sort][0]
    following = [*items, None] if items and offset + len(items) < total else items
    views = page_views(items, cdn_url, org_id)
    if recursive:
        with_folder_paths(session, org_id=org_id, views=views, root=subtree)
    return {
        "assets": views,
        "total": total,
        "limit": limit,
        "offset": offset,
        "nextCursor": pagination.next_cursor(following, len(items), listing, scope, column),
    }


@dataclass(frozen=True)
class Where:
    """What a listing of assets keeps: the scope a cursor is bound to."""

    org_id: str
    folder: str | None
    root_only: bool
    q: str | None
    visibility: str | None
    within: str | None
    # The issue-50 filters' WHERE clauses, and what they are (``repr``) for the scope.
    extra: tuple[sa.ColumnElement[bool], ...] = ()
    filters: str = ""
    recursive: bool = False

    def scope(self) -> list[Any]:
        return [
            self.org_id,
            self.folder,
            self.root_only,
            self.q,
            self.visibility,
            self.within,
            self.filters,
            self.recursive,
        ]


_CURSOR_KINDS: dict[str, pagination.Kind] = {"created_at": "time", "name": "str", "size": "int"}


def keyset_views(
    session: Session,
    where: Where,
    *,
    sort: repository.Sort,
    limit: int,
    cursor: str | None,
    total: bool,
    cdn_url: str,
) -> dict[str, Any]:
    """A page after ``cursor`` (None: the first), its ``nextCursor`` (null on the last page),
    and ``total`` only when asked: a page costs the same at any depth (issue 49)."""
    listing, scope = f"assets:{sort}", where.scope()
    column = repository.SORTS[sort][0]
    position = None if cursor is None else pagination.decode(cursor, listing, scope, _CURSOR_KINDS[column])
    q_key = search_key(where.q) if where.q is not None else None
    rows: list[Any] = []
    if where.q is None or could_be_in_a_name(where.q):
        rows = repository.cursor_page(
            session,
            org_id=where.org_id,
            folder_id=where.folder,
            root_only=where.root_only,
            q_key=q_key,
            sort=sort,
            limit=limit,
            position=position,
            visibility=where.visibility,
            within=where.within,
            extra=where.extra,
        )
    body: dict[str, Any] = {
        "assets": page_views(rows[:limit], cdn_url, where.org_id),
        "limit": limit,
        "nextCursor": pagination.next_cursor(rows, limit, listing, scope, column),
    }
    if total:
        body["total"] = count_views(session, where, q_key)
    return body


def count_views(session: Session, where: Where, q_key: str | None) -> int:
    """Every asset ``where`` keeps: the usage row for all of them, else counted."""
    if where.q is not None and not could_be_in_a_name(where.q):
        return 0
    if q_key is None and where.visibility is None and where.within is None and not where.extra:
        return repository.count(
            session, org_id=where.org_id, folder_id=where.folder, root_only=where.root_only
        )
    return repository.search_count(
        session,
        org_id=where.org_id,
        folder_id=where.folder,
        root_only=where.root_only,
        q_key=q_key,
        visibility=where.visibility,
        within=where.within,
        extra=where.extra,
    )


def with_folder_paths(
    session: Session, *, org_id: str, views: list[dict[str, Any]], root: str | None = None
) -> None:
    """A recursive listing's items gain ``folderPath``: the folders from the root down to each
    one's own (one query up the parent links for every distinct folder of the page). For a
    subtree key the root is its folder ``root``: nothing above it exists for the key."""
    folders = sorted({item["folderId"] for item in views if item["folderId"] is not None})
    chains = folder_repository.ancestries(session, org_id=org_id, folder_ids=folders)
    if root is not None:
        chains = {folder: _below(chain, root) for folder, chain in chains.items()}
    paths = {folder: [{"id": i, "name": n} for i, n in chain] for folder, chain in chains.items()}
    for item in views:
        item["folderPath"] = paths.get(item["folderId"], []) if item["folderId"] is not None else []


def _below(chain: list[tuple[str, str]], root: str) -> list[tuple[str, str]]:
    """``chain`` (root first) from ``root`` down (the listing's one snapshot keeps every folder
    of a subtree key's page below its root)."""
    ids = [folder for folder, _ in chain]
    return chain[ids.index(root) :] if root in ids else []


async def first_page_views(
    database: Database, *, org_id: str, limit: int, offset: int, cdn_url: str
) -> dict[str, Any] | None:
    """``list_views`` of every asset of the organization, newest first, for a page near the
    start (``repository.FIRST_PAGE_OFFSET_MAX``), read on the event loop; None for an empty
    page, which ``list_views`` answers."""
    found = await repository.first_page(database, org_id=org_id, limit=limit, offset=offset)
    if found is None:
        return None
    items, total = found
    scope = Where(org_id, None, False, None, None, None).scope()
    following = [*items, None] if items and offset + len(items) < total else items
    return {
        "assets": page_views(items, cdn_url, org_id),
        "total": total,
        "limit": limit,
        "offset": offset,
        "nextCursor": pagination.next_cursor(following, len(items), "assets:-createdAt", scope, "created_at"),
    }


def update(
    session: Session,
    *,
    org_id: str,
    asset_id: str,
    name: str | None,
    folder_id: str | Unset | None,
    visibility: str | None = None,
    cdn_url: str,
    actor: Actor,
    expires_at: datetime | Unset | None = None,
    metadata: dict[str, Any] | None = None,
    tags: dict[str, Any] | None = None,
) -> Asset:
    """Rename, move and/or change the visibility, metadata or tags of an asset in this
    transaction (with its event); its key and signed URLs never change (a private asset has
    no public URL)."""
    if not is_asset_id(asset_id):
        raise not_found(f"Asset {asset_id!r} does not exist.")
    if not isinstance(folder_id, Unset):
        # In turns with folder deletes: one committed between the folder's check and the write
        # made the write fail on the foreign key (a 500); after it, the check answers 404.
        # Before the row's lock, in the order every change of the tree takes them.
        folder_repository.lock_tree(session, org_id=org_id)
    # The row locked as it is read: two PATCHes of its metadata or tags merge in turn (each
    # merged into what it read, and the last write won: keys and tags lost on PostgreSQL).
    asset = repository.get(session, org_id=org_id, asset_id=asset_id, for_update=True)
    if asset is None:
        raise _missing(session.connection(), asset_id)
    new_name = normalize_name(name) if name is not None else asset.name
    new_folder = folder_id if not isinstance(folder_id, Unset) else asset.folder_id
    if new_folder is not None and new_folder != asset.folder_id:
        check_folder(session, org_id=org_id, folder_id=new_folder)
    new_visibility = visibility or asset.visibility
    # Issue 47: None (the default) keeps the expiry, an Unset clears it (the router).
    new_expiry = (
        asset.expires_at if expires_at is None else (None if isinstance(expires_at, Unset) else expires_at)
    )
    old_expiry = isoformat(asset.expires_at) if asset.expires_at is not None else None
    changes = {
        field: old
        for field, new, old in (
            ("name", new_name, asset.name),
            ("folderId", new_folder, asset.folder_id),
            ("visibility", new_visibility, asset.visibility),
            ("expiresAt", isoformat(new_expiry) if new_expiry is not None else None, old_expiry),
        )
        if new != old
    }
    changes.update(redescribe(asset, metadata=metadata, tags=tags))
    if changes:
        asset.name, asset.name_key = new_name, search_key(new_name)
        asset.folder_id, asset.updated_at = new_folder, utcnow()
        asset.visibility = new_visibility
        asset.expires_at = new_expiry
        session.add(asset)
        session.flush()
        events.record(
            session,
            org_id=org_id,
            type="asset.updated",
            data=view(asset, cdn_url),
            actor=actor,
            changes=changes,
            now=asset.updated_at,
        )
    return asset


def redescribe(
    asset: Asset, *, metadata: dict[str, Any] | None, tags: dict[str, Any] | None
) -> dict[str, Any]:
    """A PATCH's ``metadata`` (merged; a null deletes a key) and ``tags`` (``add``/``remove``)
    applied to ``asset`` (not yet flushed); what changed, with the values before (issue 50).
    Bounded on the result: 400 naming the field, and nothing changes."""
    changes: dict[str, Any] = {}
    if metadata is not None:
        before = describe.metadata_of(asset.custom_metadata)
        after = describe.merge_metadata(before, metadata)
        # As JSON text: Python's == takes 1 for True and 2 for 2.0.
        if describe.encode_metadata(after) != describe.encode_metadata(before):
            changes["metadata"], asset.custom_metadata = before, after
            flag_modified(asset, "custom_metadata")  # (the flush compares with == too)
    if tags is not None:
        had = describe.tags_of(asset.tags)
        now = describe.apply_tags(had, tags)
        if now != had:
            changes["tags"], asset.tags = had, now
    return changes


def usage_view(session: Session, *, org_id: str) -> StoredUsage:
    """Bytes and assets the organization stores: the usage row, kept in the same transactions
    that insert and delete assets, so it is exact (the sum of the live assets' sizes)."""
    usage = repository.usage(session, org_id=org_id)
    return StoredUsage(
        used_bytes=int(usage.used_bytes),
        asset_count=int(usage.asset_count),
        trashed_bytes=int(usage.trashed_bytes or 0),
        trashed_count=int(usage.trashed_count or 0),
    )


def hide(session: Session, *, org_id: str, asset_id: str, cdn_url: str, actor: Actor) -> str:
    """Step 1 of a delete: drop the row, release its quota, leave a tombstone, record the event.
    Returns the key.

    Idempotent: deleting again while the tombstone is there answers the same key, so a
    client can retry a delete whose byte deletion failed.
    """
    if not is_asset_id(asset_id):
        raise not_found(f"Asset {asset_id!r} does not exist.")
    # The row locked as it is read: a trash of the asset committed meanwhile (PostgreSQL) left
    # this delete releasing its size a second time, a tombstone beside the trashed row, and
    # the trashed file's bytes deleted.
    asset = repository.get(session, org_id=org_id, asset_id=asset_id, for_update=True)
    if asset is None:
        stone = repository.tombstone(session, org_id=org_id, asset_id=asset_id)
        if stone is not None:
            return stone.key
        raise _missing(session.connection(), asset_id)
    repository.release(session, org_id=org_id, size=asset.size)
    now = utcnow()
    repository.add_tombstone(session, asset=asset, now=now)
    gone = view(asset, cdn_url)
    events.record(session, org_id=org_id, type="asset.deleted", data=gone, actor=actor, now=now)
    session.delete(asset)
    session.flush()
    return asset.key


def finish_delete(session: Session, *, asset_id: str) -> None:
    """Step 3 of a delete, once blob has deleted the bytes."""
    repository.drop_tombstone(session, asset_id=asset_id)


def sweep_candidates(
    session: Session, *, intent_age: timedelta, tombstone_age: timedelta, limit: int
) -> SweepCandidates:
    """Claim stale intents and list stale tombstones for the sweeper."""
    now: datetime = utcnow()
    intents = repository.claim_stale_intents(session, older_than=now - intent_age, now=now, limit=limit)
    repository.drop_completed_tus_uploads(session, now=now, limit=limit)
    tombstones = repository.stale_tombstones(session, older_than=now - tombstone_age, limit=limit)
    return SweepCandidates(
        intents=[
            StaleIntent(asset_id=i.asset_id, organization_id=i.organization_id, prefix=i.key) for i in intents
        ],
        tombstones=[
            StaleTombstone(asset_id=t.asset_id, organization_id=t.organization_id, key=t.key)
            for t in tombstones
        ],
    )


def finish_intent(session: Session, *, asset_id: str) -> None:
    """The sweeper deleted a stale upload's bytes: drop its intent (and a resumable upload's row)."""
    repository.drop_intent(session, asset_id=asset_id)
    repository.drop_tus_upload(session, asset_id=asset_id)
