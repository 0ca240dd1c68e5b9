"""metadata client: folders and assets, always scoped by the principal's organization."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from cachetools import TTLCache

from coffer_edge.actor import actor_header, subtree_root
from coffer_edge.clients.base import ServiceClient
from coffer_kit.contract import wire
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.resources import Asset, Folder, FolderWithPath
from coffer_kit.contract.webhooks import (
    WebhookCreate,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEndpointList,
    WebhookEndpointWithSecret,
    WebhookUpdate,
)
from coffer_kit.contract.wire import (
    FactsClaim,
    FactsJobs,
    ImageFactsOut,
    ScanClaim,
    ScanHoldAsset,
    ScanHoldAssets,
    ScanJobs,
    ScanReport,
)
from coffer_kit.internal import InternalClient

# A folder delete's bound (every other call has the client's 30 s): see ``delete_folder``.
SUBTREE_TIMEOUT_SECONDS = 300


def _seg(value: str) -> str:
    """A caller-supplied id as one path segment (never a path of its own)."""
    return quote(value, safe="")


class MetadataClient(ServiceClient):
    """metadata's internal API; reads typed ``-> bytes`` answer the public body as it is."""

    service = "metadata"
    # Called after each call a caller made that may have changed something (the audit relay's
    # wake-up); the relay's and the sweeper's own calls have no caller.
    on_change: Callable[[], None] | None = None

    def __init__(self, http: InternalClient, *, cache_seconds: float = 5.0, cache_size: int = 10_000) -> None:
        super().__init__(http)
        # ``inside_all``'s answers, reused for as long as a key's (a folder moved out of a
        # maker's subtree is out of its made keys' reach within the same bound).
        self._inside: TTLCache[tuple[str, str, tuple[str, ...]], bool] = TTLCache(
            maxsize=cache_size, ttl=cache_seconds, timer=time.monotonic
        )

    async def request(self, method: str, path: str, **kwargs: Any) -> bytes:
        if (root := subtree_root()) is not None:
            # A subtree key's call: metadata answers as if that folder were the root (issue 46).
            kwargs["headers"] = {**(kwargs.get("headers") or {}), wire.SUBTREE_HEADER: root}
        body = await super().request(method, path, **kwargs)
        if method != "GET" and self.on_change is not None and actor_header() is not None:
            self.on_change()
        return body

    # The outbox's audit relay (coffer_edge.audit_relay)
    async def audit_pending(self, *, limit: int) -> list[dict[str, Any]]:
        body = await self.json("GET", "/internal/v1/events/audit-pending", params={"limit": limit})
        events: list[dict[str, Any]] = body["events"]
        return events

    async def mark_audited(self, ids: list[str]) -> None:
        await self.request("POST", "/internal/v1/events/audited", json={"ids": ids})

    # The scan queue (coffer_edge.scans, issue 48)
    async def claim_scans(self, *, limit: int, lease_seconds: float) -> ScanJobs:
        body = ScanClaim(limit=limit, lease_seconds=lease_seconds).model_dump(by_alias=True)
        return await self.call(ScanJobs, "POST", "/internal/v1/scans/claim", json=body)

    async def report_scan(self, org_id: str, asset_id: str, report: ScanReport) -> None:
        await self.request(
            "POST", f"/internal/v1/orgs/{org_id}/scans/{asset_id}", json=report.model_dump(by_alias=True)
        )

    async def scan_holds(self, org_id: str, *, after: str, limit: int) -> list[ScanHoldAsset]:
        """Issue 48: the organization's live assets whose hold follows its scan mode, by id."""
        params = {"after": after, "limit": str(limit)}
        path = f"/internal/v1/orgs/{org_id}/scan-holds"
        return (await self.call(ScanHoldAssets, "GET", path, params=params)).assets

    async def claim_facts(self, *, limit: int, lease_seconds: float) -> FactsJobs:
        body = FactsClaim(limit=limit, lease_seconds=lease_seconds).model_dump(by_alias=True)
        return await self.call(FactsJobs, "POST", "/internal/v1/facts/claim", json=body)

    async def report_facts(self, org_id: str, asset_id: str, facts: ImageFactsOut) -> None:
        await self.request(
            "POST", f"/internal/v1/orgs/{org_id}/facts/{asset_id}", json=facts.model_dump(by_alias=True)
        )

    # Folders
    async def list_folders(self, org_id: str, parent_id: str | None, *, request_id: str) -> bytes:
        params = {"parentId": parent_id} if parent_id else {}
        return await self.request(
            "GET", f"/internal/v1/orgs/{org_id}/folders", params=params, request_id=request_id
        )

    async def get_folder_body(self, org_id: str, folder_id: str, *, request_id: str) -> bytes:
        """The folder with its ``path`` (root folder first), as the public body."""
        return await self.request(
            "GET", f"/internal/v1/orgs/{org_id}/folders/{_seg(folder_id)}", request_id=request_id
        )

    async def get_folder(self, org_id: str, folder_id: str, *, request_id: str) -> FolderWithPath:
        body = await self.get_folder_body(org_id, folder_id, request_id=request_id)
        return FolderWithPath.model_validate_json(body)

    async def inside_all(
        self, org_id: str, folder_id: str, roots: tuple[str, ...], *, request_id: str
    ) -> bool:
        """Whether a folder exists and lies in the subtree of each of ``roots``, as the whole
        organization sees it (whatever the request is confined to); cached, see ``_inside``."""
        cache_key = (org_id, folder_id, roots)
        if (known := self._inside.get(cache_key)) is not None:
            return known
        path = f"/internal/v1/orgs/{org_id}/folders/{_seg(folder_id)}"
        try:  # (ServiceClient's own request: never with the request's subtree header)
            body = await ServiceClient.request(self, "GET", path, request_id=request_id)
        except CofferError as exc:
            if exc.status not in (403, 404):
                raise
            inside = False
        else:
            ancestry = {step.id for step in FolderWithPath.model_validate_json(body).path}
            inside = all(root in ancestry for root in roots)
        self._inside[cache_key] = inside
        return inside

    async def subtree_counts(self, org_id: str, folder_id: str, *, request_id: str) -> wire.SubtreeCounts:
        """Folders below a folder, and assets in it and below, in one call."""
        return await self.call(
            wire.SubtreeCounts,
            "GET",
            f"/internal/v1/orgs/{org_id}/folders/{_seg(folder_id)}/subtree",
            request_id=request_id,
        )

    async def create_folder(
        self,
        org_id: str,
        name: str,
        parent_id: str | None,
        *,
        request_id: str,
        expiry_days: int | None = None,
    ) -> Folder:
        return await self.call(
            Folder,
            "POST",
            f"/internal/v1/orgs/{org_id}/folders",
            json={"name": name, "parentId": parent_id, "expiryDays": expiry_days},
            request_id=request_id,
        )

    async def update_folder(
        self, org_id: str, folder_id: str, changes: dict[str, Any], *, request_id: str
    ) -> bytes:
        """Rename and/or move: ``changes`` holds only the fields the client sent."""
        return await self.request(
            "PATCH",
            f"/internal/v1/orgs/{org_id}/folders/{_seg(folder_id)}",
            json=changes,
            request_id=request_id,
        )

    async def delete_folder(self, org_id: str, folder_id: str, *, request_id: str) -> wire.Done:
        """One transaction moves every asset of the subtree to the root: its time grows with
        the subtree (tens of seconds for 100,000 assets, docs/performance.md "Scale"), so the
        call may take longer than the 30 s of every other."""
        return await self.call(
            wire.Done,
            "DELETE",
            f"/internal/v1/orgs/{org_id}/folders/{_seg(folder_id)}",
            request_id=request_id,
            timeout=SUBTREE_TIMEOUT_SECONDS,
        )

    # Assets
    async def register_intent(
        self, org_id: str, asset_id: str, *, size: tuple[int, int], quota_bytes: int, request_id: str
    ) -> wire.IntentOut:
        """Step 1 of an upload, whose file holds (least, most) bytes: the most is held against
        the quota while it streams; refused at once if even the least would not fit."""
        least, most = size
        intent = wire.IntentIn(
            asset_id=asset_id, reserve_bytes=most, least_bytes=least, quota_bytes=quota_bytes
        )
        body = intent.model_dump(by_alias=True)
        return await self.call(
            wire.IntentOut, "POST", f"/internal/v1/orgs/{org_id}/intents", json=body, request_id=request_id
        )

    async def abandon_intent(self, org_id: str, asset_id: str, *, request_id: str) -> wire.Done:
        return await self.call(
            wire.Done, "DELETE", f"/internal/v1/orgs/{org_id}/intents/{asset_id}", request_id=request_id
        )

    async def release_intent(self, org_id: str, asset_id: str, *, request_id: str) -> wire.Done:
        """The failed upload's hold ends now; its bytes are left to the sweeper."""
        return await self.call(
            wire.Done,
            "POST",
            f"/internal/v1/orgs/{org_id}/intents/{asset_id}/released",
            request_id=request_id,
        )

    async def commit_upload(self, org_id: str, asset: wire.UploadCommit, *, request_id: str) -> bytes:
        """The asset as the public body (metadata writes it as the contract does)."""
        return await self.request(
            "POST",
            f"/internal/v1/orgs/{org_id}/assets",
            json=asset.model_dump(by_alias=True, mode="json"),
            request_id=request_id,
        )

    async def check_upload_target(
        self, org_id: str, folder_id: str | None, name: str | None, *, request_id: str
    ) -> wire.UploadTarget:
        """The folder exists and is the organization's, the name is valid (answered normalised)."""
        return await self.call(
            wire.UploadTarget,
            "POST",
            f"/internal/v1/orgs/{org_id}/upload-targets",
            json=wire.UploadTarget(folder_id=folder_id, name=name).model_dump(by_alias=True),
            request_id=request_id,
        )

    async def list_assets(self, org_id: str, params: dict[str, Any], *, request_id: str) -> bytes:
        return await self.request(
            "GET", f"/internal/v1/orgs/{org_id}/assets", params=params, request_id=request_id
        )

    async def get_asset_body(self, org_id: str, asset_id: str, *, request_id: str) -> bytes:
        return await self.request(
            "GET", f"/internal/v1/orgs/{org_id}/assets/{_seg(asset_id)}", request_id=request_id
        )

    async def get_asset(self, org_id: str, asset_id: str, *, request_id: str) -> Asset:
        return Asset.model_validate_json(await self.get_asset_body(org_id, asset_id, request_id=request_id))

    async def update_asset(
        self, org_id: str, asset_id: str, changes: dict[str, Any], *, request_id: str
    ) -> bytes:
        """Rename and/or move: ``changes`` holds only the fields the client sent."""
        return await self.request(
            "PATCH",
            f"/internal/v1/orgs/{org_id}/assets/{_seg(asset_id)}",
            json=changes,
            request_id=request_id,
        )

    async def hide_asset(self, org_id: str, asset_id: str, *, request_id: str) -> str:
        hidden = await self.call(
            wire.Hidden,
            "POST",
            f"/internal/v1/orgs/{org_id}/assets/{_seg(asset_id)}/tombstone",
            request_id=request_id,
        )
        return hidden.key

    async def finish_delete(self, asset_id: str, *, request_id: str | None = None) -> None:
        await self.call(wire.Done, "DELETE", f"/internal/v1/tombstones/{asset_id}", request_id=request_id)

    async def usage(self, org_id: str, *, request_id: str) -> wire.StoredUsage:
        """Bytes and assets the organization stores, exact."""
        return await self.call(
            wire.StoredUsage, "GET", f"/internal/v1/orgs/{org_id}/usage", request_id=request_id
        )

    # The trash and expiry (issue 47)
    async def trash_asset(
        self, org_id: str, asset_id: str, body: wire.TrashIn, *, request_id: str
    ) -> wire.Trashed:
        path = f"/internal/v1/orgs/{org_id}/assets/{_seg(asset_id)}/trash"
        return await self.call(
            wire.Trashed, "POST", path, json=body.model_dump(by_alias=True), request_id=request_id
        )

    async def list_trash(self, org_id: str, params: dict[str, Any], *, request_id: str) -> bytes:
        return await self.request(
            "GET", f"/internal/v1/orgs/{org_id}/trash", params=params, request_id=request_id
        )

    async def restore(self, org_id: str, asset_id: str, body: wire.TrashActIn, *, request_id: str) -> bytes:
        path = f"/internal/v1/orgs/{org_id}/trash/{_seg(asset_id)}/restore"
        return await self.request("POST", path, json=body.model_dump(by_alias=True), request_id=request_id)

    async def purge(
        self, org_id: str, asset_id: str, body: wire.TrashActIn, *, request_id: str
    ) -> wire.PurgedRef:
        path = f"/internal/v1/orgs/{org_id}/trash/{_seg(asset_id)}/purge"
        return await self.call(
            wire.PurgedRef, "POST", path, json=body.model_dump(by_alias=True), request_id=request_id
        )

    async def purge_batch(self, org_id: str, *, request_id: str) -> wire.PurgeBatchOut:
        path = f"/internal/v1/orgs/{org_id}/trash/purge"
        return await self.call(wire.PurgeBatchOut, "POST", path, request_id=request_id)

    async def purge_due(self, *, limit: int) -> list[wire.PurgedRef]:
        body = await self.json("POST", "/internal/v1/trash/due", params={"limit": limit})
        return [wire.PurgedRef.model_validate(item) for item in body]

    async def expired(self, *, limit: int) -> wire.ExpiredList:
        return await self.call(wire.ExpiredList, "GET", "/internal/v1/expired", params={"limit": limit})

    async def expire(self, org_id: str, asset_id: str, body: wire.ExpireIn) -> wire.Expired:
        path = f"/internal/v1/orgs/{org_id}/assets/{_seg(asset_id)}/expire"
        return await self.call(wire.Expired, "POST", path, json=body.model_dump(by_alias=True))

    async def sweep_candidates(
        self, *, intent_age: float, tombstone_age: float, limit: int
    ) -> wire.SweepCandidates:
        params = {"intentAgeSeconds": intent_age, "tombstoneAgeSeconds": tombstone_age, "limit": limit}
        return await self.call(wire.SweepCandidates, "POST", "/internal/v1/sweep", params=params)

    async def finish_intent(self, asset_id: str) -> None:
        await self.call(wire.Done, "DELETE", f"/internal/v1/sweep/intents/{asset_id}")

    # Webhooks (CONTRACT §11): every call is scoped by the caller's organization; another
    # organization's endpoint is 404, as one that does not exist.
    async def create_webhook(
        self, org_id: str, endpoint: WebhookCreate, *, request_id: str
    ) -> WebhookEndpointWithSecret:
        """A new endpoint with its signing secret (the only time it is shown)."""
        return await self.call(
            WebhookEndpointWithSecret,
            "POST",
            f"/internal/v1/orgs/{org_id}/webhooks",
            json=endpoint.model_dump(mode="json", exclude_unset=True),
            request_id=request_id,
        )

    async def list_webhooks(self, org_id: str, *, request_id: str) -> WebhookEndpointList:
        return await self.call(
            WebhookEndpointList, "GET", f"/internal/v1/orgs/{org_id}/webhooks", request_id=request_id
        )

    async def get_webhook(self, org_id: str, webhook_id: str, *, request_id: str) -> WebhookEndpoint:
        path = f"/internal/v1/orgs/{org_id}/webhooks/{_seg(webhook_id)}"
        return await self.call(WebhookEndpoint, "GET", path, request_id=request_id)

    async def update_webhook(
        self, org_id: str, webhook_id: str, changes: WebhookUpdate, *, request_id: str
    ) -> WebhookEndpoint:
        """Change only the fields ``changes`` was given (``folderId: None`` drops the filter)."""
        return await self.call(
            WebhookEndpoint,
            "PATCH",
            f"/internal/v1/orgs/{org_id}/webhooks/{_seg(webhook_id)}",
            json=changes.model_dump(mode="json", exclude_unset=True),
            request_id=request_id,
        )

    async def delete_webhook(self, org_id: str, webhook_id: str, *, request_id: str) -> wire.Done:
        path = f"/internal/v1/orgs/{org_id}/webhooks/{_seg(webhook_id)}"
        return await self.call(wire.Done, "DELETE", path, request_id=request_id)

    async def rotate_webhook_secret(
        self, org_id: str, webhook_id: str, *, request_id: str
    ) -> WebhookEndpointWithSecret:
        """A new secret (shown once); the previous one signs too for 24 hours."""
        return await self.call(
            WebhookEndpointWithSecret,
            "POST",
            f"/internal/v1/orgs/{org_id}/webhooks/{_seg(webhook_id)}/rotate-secret",
            request_id=request_id,
        )

    async def test_webhook(self, org_id: str, webhook_id: str, *, request_id: str) -> WebhookDelivery:
        """Queue a ``ping`` event to the endpoint, sent at once."""
        return await self.call(
            WebhookDelivery,
            "POST",
            f"/internal/v1/orgs/{org_id}/webhooks/{_seg(webhook_id)}/test",
            request_id=request_id,
        )

    async def list_webhook_deliveries(
        self, org_id: str, webhook_id: str, *, params: dict[str, Any], request_id: str
    ) -> bytes:
        """The endpoint's delivery log, newest attempt first, as the public body (a
        ``WebhookAttemptList``; ``total`` and ``offset`` absent on a cursor page)."""
        return await self.request(
            "GET",
            f"/internal/v1/orgs/{org_id}/webhooks/{_seg(webhook_id)}/deliveries",
            params=params,
            request_id=request_id,
        )

    async def redeliver_webhook(
        self, org_id: str, webhook_id: str, delivery_id: str, *, request_id: str
    ) -> WebhookDelivery:
        """Send a delivery again now (same event, same ``webhook-id``)."""
        endpoint = f"/internal/v1/orgs/{org_id}/webhooks/{_seg(webhook_id)}"
        path = f"{endpoint}/deliveries/{_seg(delivery_id)}/redeliver"
        return await self.call(WebhookDelivery, "POST", path, request_id=request_id)

    # Resumable uploads (tus, CONTRACT §9)
    async def tus_create(self, org_id: str, upload: wire.TusCreate, *, request_id: str) -> wire.TusUpload:
        return await self.call(
            wire.TusUpload,
            "POST",
            f"/internal/v1/orgs/{org_id}/tus",
            json=upload.model_dump(by_alias=True),
            request_id=request_id,
        )

    async def tus_get(self, upload_id: str, org_id: str | None, *, request_id: str) -> wire.TusUpload:
        """The upload (of ``org_id``'s, if given); 404 if none, another's or expired."""
        params = {"org": org_id} if org_id else {}
        return await self.call(
            wire.TusUpload, "GET", f"/internal/v1/tus/{_seg(upload_id)}", params=params, request_id=request_id
        )

    async def tus_lock(
        self,
        upload_id: str,
        org_id: str | None,
        offset: int,
        lease_seconds: float,
        *,
        quota_bytes: int | None = None,
        request_id: str,
    ) -> wire.TusUpload:
        """Take the upload to write at ``offset``: 404, 409 (another offset) or 423 (busy); an
        idle upload reserves its length again within ``quota_bytes`` (413, or 429 past the
        organization's uploads in flight)."""
        want = wire.TusLock(
            organization_id=org_id, offset=offset, lease_seconds=lease_seconds, quota_bytes=quota_bytes
        )
        return await self._tus(upload_id, "lock", want, request_id)

    async def tus_list(
        self, org_id: str, *, limit: int, offset: int, request_id: str, extra: dict[str, str] | None = None
    ) -> wire.TusPage:
        """The organization's unfinished uploads, newest first (``extra``: ``cursor``, ``total``)."""
        return await self.call(
            wire.TusPage,
            "GET",
            f"/internal/v1/orgs/{org_id}/tus",
            params={"limit": limit, "offset": offset, **(extra or {})},
            request_id=request_id,
        )

    async def tus_minted(self, *, after: str, limit: int) -> wire.TusMintedPage:
        """Unfinished uploads created through an upload token, by id after ``after``."""
        return await self.call(
            wire.TusMintedPage, "GET", "/internal/v1/tus-minted", params={"after": after, "limit": limit}
        )

    async def tus_renew(self, upload_id: str, token: str, lease_seconds: float, *, request_id: str) -> None:
        lease = wire.TusLease(lock_token=token, lease_seconds=lease_seconds)
        await self.request(
            "POST",
            f"/internal/v1/tus/{_seg(upload_id)}/renew",
            json=lease.model_dump(by_alias=True),
            request_id=request_id,
        )

    async def tus_unlock(self, upload_id: str, token: str, *, request_id: str) -> None:
        lease = wire.TusLease(lock_token=token)
        await self.request(
            "POST",
            f"/internal/v1/tus/{_seg(upload_id)}/unlock",
            json=lease.model_dump(by_alias=True),
            request_id=request_id,
        )

    async def tus_advance(self, upload_id: str, step: wire.TusAdvance, *, request_id: str) -> wire.TusUpload:
        return await self._tus(upload_id, "advance", step, request_id)

    async def tus_complete(
        self, upload_id: str, done: wire.TusComplete, *, request_id: str
    ) -> wire.TusUpload:
        return await self._tus(upload_id, "complete", done, request_id)

    async def tus_terminate(
        self,
        upload_id: str,
        org_id: str | None,
        *,
        lock_token: str | None = None,
        unfinished_only: bool = False,
        request_id: str,
    ) -> wire.TusEnded | None:
        """End the upload at once (423 while a request writes to it, unless ``lock_token`` is
        the lease's); answers the prefix of an unfinished one's bytes, to delete.
        ``unfinished_only``: a finished upload is 404 and kept."""
        params = {"org": org_id} if org_id else {}
        if unfinished_only:
            params["unfinished"] = "true"
        lease = wire.TusLease(lock_token=lock_token).model_dump(by_alias=True) if lock_token else None
        body = await self.request(
            "POST",
            f"/internal/v1/tus/{_seg(upload_id)}/terminate",
            params=params,
            json=lease,
            request_id=request_id,
        )
        return None if body == b"null" else wire.TusEnded.model_validate_json(body)

    async def _tus(self, upload_id: str, step: str, body: wire.WireModel, request_id: str) -> wire.TusUpload:
        return await self.call(
            wire.TusUpload,
            "POST",
            f"/internal/v1/tus/{_seg(upload_id)}/{step}",
            json=body.model_dump(by_alias=True),
            request_id=request_id,
        )
