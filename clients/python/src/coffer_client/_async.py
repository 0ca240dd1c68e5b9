"""The client, written once: ``AsyncCoffer`` here; ``Coffer`` (``_sync.py``) is generated from this
file by unasync (``make unasync``; tests/client/test_unasync.py fails when it is not current), so a
fix lands in both. The asyncio client's disk reads and writes run in worker threads
(``_async_io``), so a transfer never blocks the event loop; the synchronous one calls them."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import httpx
import tenacity

from coffer_client import _async_io as offload
from coffer_client import _tus as tus
from coffer_client import errors
from coffer_client._base import (
    CHUNK,
    DEFAULT_TIMEOUT,
    IDENTITY,
    MAX_EMPTY_ROUNDS,
    MAX_FILE_BYTES,
    MAX_RESPONSE_BYTES,
    UNSET,
    USER_AGENT,
    AsyncLazyTLSTransport,
    Cursors,
    Delivery,
    Multipart,
    ProgressCallback,
    RetryPolicy,
    Source,
    auth_headers,
    check,
    clean_params,
    describe_fields,
    document,
    encoded,
    filter_params,
    overdue,
    parse,
    partial_file,
    patch_body,
    retrying_kwargs,
    segment,
    settings_from,
    source_for,
    too_large,
    transport_error,
    unsendable,
)
from coffer_client.models import (
    ApiKey,
    Asset,
    AssetPage,
    CreatedKey,
    Folder,
    KeySelf,
    SignedUrl,
    TransformPreset,
    TrashPage,
    TrashSettings,
    UploadToken,
    Usage,
)
from coffer_client.paths import split_path
from coffer_client.transforms import Transform, preset_path


class AsyncCoffer:
    """A client for one Coffer service and one API key (``AsyncCoffer``: the same, for asyncio).

    ``Coffer()`` reads COFFER_URL, COFFER_API_KEY and COFFER_ORGANIZATION_ID; arguments win. It is safe
    to share between threads (the underlying httpx client is), and a context manager.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        organization_id: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        max_connections: int = 32,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._settings = settings_from(base_url, api_key, organization_id)
        self.retry = retry or RetryPolicy()
        self._own_client = http_client is None
        if http_client is None:
            limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
            http_client = httpx.AsyncClient(
                timeout=timeout,
                limits=limits,
                headers={"user-agent": USER_AGENT},
                transport=AsyncLazyTLSTransport(limits),
            )
        self._http = http_client

    @property
    def base_url(self) -> str:
        return self._settings.base_url

    @property
    def organization_id(self) -> str | None:
        return self._settings.organization_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    async def aclose(self) -> None:
        if self._own_client:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncCoffer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- plumbing ------------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        replayable: bool = True,
        authenticated: bool = True,
    ) -> httpx.Response:
        """One API call with the retry policy; ``body`` is a callable giving a fresh iterator per try."""
        url = path if path.startswith(("http://", "https://")) else self.base_url + path
        hdrs = {**IDENTITY, **(auth_headers(self._settings) if authenticated else {}), **(headers or {})}
        delivery = Delivery()
        try:
            async for attempt in tenacity.AsyncRetrying(
                **retrying_kwargs(self.retry, method=method, replayable=replayable, delivery=delivery)
            ):
                with attempt:
                    content = delivery.atrack(body()) if body is not None else None
                    request = self._http.build_request(
                        method,
                        url,
                        params=clean_params(params) if params else None,
                        json=json,
                        content=content,
                        headers=hdrs,
                    )
                    # Never a redirect, whatever the client (``check`` refuses one): the key
                    # would go with it.
                    sent = await self._http.send(request, stream=True, follow_redirects=False)
                    return check(await _read_within(sent, self._http.timeout.read))
        except httpx.TransportError as exc:
            raise transport_error(exc, method, url.split("?")[0]) from exc
        except httpx.InvalidURL as exc:
            raise unsendable(exc, url.split("?")[0]) from None
        raise AssertionError("unreachable")  # pragma: no cover

    # --- folders -------------------------------------------------------------------------------

    async def list_folders(self, parent_id: str | None = None) -> list[Folder]:
        """Children of ``parent_id``, or the root folders; ordered by name."""
        r = await self._request("GET", "/api/folders", params={"parentId": parent_id})
        return [Folder.model_validate(f) for f in document(r)["folders"]]

    async def get_folder(self, folder_id: str) -> Folder:
        """The folder with its ``path`` from the root (CONTRACT §8)."""
        return parse(Folder, await self._request("GET", f"/api/folders/{segment(folder_id)}"))

    async def create_folder(
        self, name: str, parent_id: str | None = None, *, expiry_days: int | None = None
    ) -> Folder:
        """``expiry_days``: the default expiry of the assets uploaded into it (1-3650 days)."""
        body: dict[str, Any] = {"name": name, "parentId": parent_id}
        if expiry_days is not None:
            body["expiryDays"] = expiry_days
        return parse(Folder, await self._request("POST", "/api/folders", json=body))

    async def update_folder(
        self, folder_id: str, *, name: str | None = None, parent_id: Any = UNSET, expiry_days: Any = UNSET
    ) -> Folder:
        """Rename and/or move (``parent_id=None`` moves to the root), and/or set the default
        expiry in days (``expiry_days=None`` clears it), in one transaction."""
        body = {} if expiry_days is UNSET else {"expiryDays": expiry_days}
        if name is not None or parent_id is not UNSET or not body:
            body = {**patch_body(name, "parentId", parent_id), **body}
        return parse(Folder, await self._request("PATCH", f"/api/folders/{segment(folder_id)}", json=body))

    async def delete_folder(self, folder_id: str) -> None:
        """Deletes the folder and its subfolders; their assets move to the root."""
        await self._request("DELETE", f"/api/folders/{segment(folder_id)}")

    # --- assets --------------------------------------------------------------------------------

    async def assets_page(
        self,
        folder_id: str | None = None,
        *,
        q: str | None = None,
        sort: str | None = None,
        limit: int = 100,
        offset: int = 0,
        visibility: str | None = None,
        cursor: str | None = None,
        total: bool | None = None,
        tags: Sequence[str] = (),
        any_tag: bool = False,
        meta: Mapping[str, object] | None = None,
        recursive: bool = False,
    ) -> AssetPage:
        """One page. ``folder_id``: None = every asset, ``""`` = root level only, an id = its
        children (with ``recursive``: its whole subtree, each asset with ``folder_path``).
        ``cursor``: a previous page's ``next_cursor``; ``total``: count every match (default: yes
        for an offset page, no for a cursor page; ``False`` reads the first page by cursor).
        ``tags``: assets with every one (``any_tag``: at least one); ``meta``: whose metadata
        has these values (issue 50)."""
        params: dict[str, Any] = {
            "folderId": folder_id,
            "q": q,
            "sort": sort,
            "limit": limit,
            "offset": offset,
        }
        if visibility is not None:
            params["visibility"] = visibility
        if cursor is not None:
            params["cursor"] = cursor
            del params["offset"]
        if total is not None:
            params["total"] = "true" if total else "false"
        params.update(filter_params(tags, any_tag, meta, recursive))
        return parse(AssetPage, await self._request("GET", "/api/assets", params=params))

    async def list_assets(
        self,
        folder_id: str | None = None,
        *,
        q: str | None = None,
        sort: str | None = None,
        page_size: int = 100,
        visibility: str | None = None,
        tags: Sequence[str] = (),
        any_tag: bool = False,
        meta: Mapping[str, object] | None = None,
        recursive: bool = False,
    ) -> AsyncIterator[Asset]:
        """Every matching asset, fetched a page at a time as you iterate: by cursor (each page
        costs the same at any depth, and uploads meanwhile shift nothing), or by offset from a
        service older than cursors (which ignores ``total=false`` and sends no ``nextCursor``)."""
        offset, cursor, given = 0, None, Cursors()
        while True:
            page = await self.assets_page(
                folder_id,
                q=q,
                sort=sort,
                limit=page_size,
                offset=offset,
                visibility=visibility,
                cursor=cursor,
                total=False,
                tags=tags,
                any_tag=any_tag,
                meta=meta,
                recursive=recursive,
            )
            for a in page.assets:
                yield a
            if page.next_cursor is not None:
                cursor = given.next(page.next_cursor, listed=len(page.assets))
                continue
            if page.total is None or not page.assets:
                return  # the last cursor page
            offset += len(page.assets)
            if offset >= page.total:
                return

    async def get_asset(self, asset_id: str) -> Asset:
        return parse(Asset, await self._request("GET", f"/api/assets/{segment(asset_id)}"))

    async def update_asset(
        self,
        asset_id: str,
        *,
        name: str | None = None,
        folder_id: Any = UNSET,
        visibility: str | None = None,
        metadata: Mapping[str, object] | None = None,
        add_tags: Sequence[str] = (),
        remove_tags: Sequence[str] = (),
    ) -> Asset:
        """Rename and/or move (``folder_id=None`` moves to the root); key and URLs stay.
        ``visibility``: ``"private"`` or ``"public"`` (CONTRACT §12). ``metadata`` is merged
        into the asset's (a ``None`` value deletes that key); tags are added and removed."""
        tags = {"add": list(add_tags), "remove": list(remove_tags)} if add_tags or remove_tags else None
        body = patch_body(name, "folderId", folder_id, visibility=visibility, metadata=metadata, tags=tags)
        return parse(Asset, await self._request("PATCH", f"/api/assets/{segment(asset_id)}", json=body))

    async def delete_asset(self, asset_id: str) -> None:
        await self._request("DELETE", f"/api/assets/{segment(asset_id)}")

    async def signed_url(
        self, asset_id: str, expires_in: int | None = None, *, transform: Transform | None = None
    ) -> SignedUrl:
        """A URL that reads the asset without a key until it expires (default 1 h, at most 7 d).
        With ``transform`` it serves a resized, re-encoded image (CONTRACT §10), and the signature
        covers the transform: changing a parameter in the URL makes it answer 403."""
        params: dict[str, Any] = {"expiresIn": expires_in}
        if transform is not None:
            params.update(transform.params())
        r = await self._request("GET", f"/api/assets/{segment(asset_id)}/url", params=params)
        return parse(SignedUrl, r)

    def public_url(self, asset: Asset, *, preset: str | None = None) -> str:
        """The asset's public URL, served as ``preset`` (``thumb``, ``small``, ``medium``, ``large``
        or one of the organization's) when given: public URLs take presets only, free parameters
        need ``signed_url``. A private asset has none: ValueError."""
        if asset.public_url is None:
            raise ValueError(f"{asset.name} is private: it has no public URL (use a signed URL).")
        return asset.public_url if preset is None else Transform(preset=preset).on(asset.public_url)

    # --- image transform presets (CONTRACT §10) -------------------------------------------------

    async def transform_presets(self) -> list[TransformPreset]:
        """The built-in presets, then the organization's own, by name."""
        r = await self._request("GET", "/api/transform-presets")
        return [TransformPreset.model_validate(p) for p in document(r)["presets"]]

    async def get_transform_preset(self, name: str) -> TransformPreset:
        return parse(TransformPreset, await self._request("GET", preset_path(name)))

    async def put_transform_preset(self, name: str, transform: Transform) -> TransformPreset:
        """Create or replace one of the organization's presets (organization keys and owners; at
        most 20). ``transform`` holds free parameters, at least one of ``w``, ``h``, ``fmt``; the
        preset then works as ``preset=NAME`` on public URLs (within 5 s) and in ``signed_url``."""
        return parse(TransformPreset, await self._request("PUT", preset_path(name), json=transform.fields()))

    async def delete_transform_preset(self, name: str) -> None:
        await self._request("DELETE", preset_path(name))

    async def usage(self) -> Usage:
        return parse(Usage, await self._request("GET", "/api/usage"))

    # --- the trash (issue 47) ----------------------------------------------------------------

    async def list_trash(self, *, limit: int = 50, offset: int = 0) -> TrashPage:
        """A page of the trash, newest trashed first."""
        params = {"limit": limit, "offset": offset}
        return parse(TrashPage, await self._request("GET", "/api/trash", params=params))

    async def restore(self, asset_id: str) -> Asset:
        """Restore a trashed asset: the same id, key and URLs (413 if it no longer fits)."""
        return parse(Asset, await self._request("POST", f"/api/trash/{segment(asset_id)}/restore"))

    async def purge(self, asset_id: str) -> None:
        """Delete a trashed asset for good."""
        await self._request("DELETE", f"/api/trash/{segment(asset_id)}")

    async def empty_trash(self) -> int:
        """Delete everything in the trash for good, batch after batch; how many went. A batch
        that purges nothing while some remain is ``bad_response`` (it went round for ever);
        past MAX_EMPTY_ROUNDS batches, ``incomplete``: call it again to go on."""
        purged = 0
        for _ in range(MAX_EMPTY_ROUNDS):
            batch = document(await self._request("DELETE", "/api/trash"))
            went, remaining = int(batch["purged"]), batch["remaining"]
            purged += went
            if remaining == 0:
                return purged
            if went <= 0:
                raise errors.CofferError(
                    f"The service purged nothing from the trash and says {remaining!r} remain"
                    f" ({purged} purged before).",
                    code="bad_response",
                )
        raise errors.CofferError(
            f"Stopped after {MAX_EMPTY_ROUNDS:,} batches ({purged:,} purged): empty it again to go on.",
            code="incomplete",
        )

    async def trash_settings(self) -> TrashSettings:
        return parse(TrashSettings, await self._request("GET", "/api/trash/settings"))

    async def set_trash_retention(self, days: int) -> TrashSettings:
        """Days a deleted asset stays in the trash, 0-90 (organization keys and owners)."""
        body = {"retentionDays": days}
        return parse(TrashSettings, await self._request("PUT", "/api/trash/settings", json=body))

    # --- keys (issue 46) ---------------------------------------------------------------------

    async def key_self(self) -> KeySelf:
        """What this client's key may do: scopes, actions, folder subtree, networks, expiry."""
        return parse(KeySelf, await self._request("GET", "/api/keys/self"))

    async def list_keys(self) -> list[ApiKey]:
        r = await self._request("GET", "/api/keys")
        return [ApiKey.model_validate(k) for k in document(r)["keys"]]

    async def get_key(self, key_id: str) -> ApiKey:
        return parse(ApiKey, await self._request("GET", f"/api/keys/{segment(key_id)}"))

    async def create_key(
        self,
        *,
        name: str = "",
        scopes: list[str] | None = None,
        folder_id: str | None = None,
        networks: list[str] | None = None,
        expires_in: int | None = None,
        kind: str | None = None,
    ) -> CreatedKey:
        """A new key that can do no more than this one (its secret is in ``key``, shown once)."""
        body = clean_params(
            {
                "name": name,
                "scopes": scopes,
                "folderId": folder_id,
                "networks": networks,
                "expiresIn": expires_in,
                "kind": kind,
            }
        )
        return parse(CreatedKey, await self._request("POST", "/api/keys", json=body, replayable=False))

    async def rotate_key(self, key_id: str, *, grace_seconds: int = 0) -> CreatedKey:
        """A new secret with the same scopes; the old one works ``grace_seconds`` more."""
        body = {"graceSeconds": grace_seconds}
        r = await self._request("POST", f"/api/keys/{segment(key_id)}/rotate", json=body, replayable=False)
        return parse(CreatedKey, r)

    async def delete_key(self, key_id: str) -> None:
        """Every edge refuses the key within 5 seconds."""
        await self._request("DELETE", f"/api/keys/{segment(key_id)}")

    async def upload(
        self,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        name: str | None = None,
        folder_id: str | None = None,
        filename: str | None = None,
        content_type: str | None = None,
        progress: ProgressCallback | None = None,
        visibility: str | None = None,
        expires_at: datetime | None = None,
        metadata: Mapping[str, object] | None = None,
        tags: Sequence[str] = (),
    ) -> Asset:
        """Upload a file from a path or a binary file object, streamed: the client holds about one
        chunk (1 MiB) at a time whatever the size. ``progress(sent, total)`` follows the bytes.
        ``visibility``: ``"public"`` or ``"private"``; None: the organization's default.
        ``expires_at`` (timezone-aware): the asset goes to the trash by itself then (issue 47).
        ``metadata`` and ``tags``: the asset's own (issue 50)."""
        fields = {"name": name} if name else {}
        if folder_id:
            fields["folderId"] = folder_id
        if visibility:
            fields["visibility"] = visibility
        if expires_at is not None:
            fields["expiresAt"] = expires_at.isoformat()
        fields.update(describe_fields(metadata, tags))
        return await self._upload(
            "/api/assets", file, fields, filename, content_type, progress, authenticated=True
        )

    async def upload_resumable(
        self,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        name: str | None = None,
        folder_id: str | None = None,
        filename: str | None = None,
        content_type: str | None = None,
        progress: ProgressCallback | None = None,
        visibility: str | None = None,
        upload_url: str | None = None,
        on_created: Callable[[str], None] | None = None,
        chunk_size: int = tus.TUS_CHUNK,
    ) -> Asset:
        """Upload with tus (CONTRACT §9): in chunks of ``chunk_size``, each failure followed by the
        offset the service holds, so a dropped connection costs at most what was in flight.
        ``upload_url``: an upload begun before (by any client), continued from where the
        service stopped (a new one begins if it expired). ``on_created(url)`` gets a new
        upload's URL, to keep for resuming. ``progress(sent, total)`` as for ``upload``."""
        source = source_for(file, filename)
        total = tus.check_resumable(source)
        if total > MAX_FILE_BYTES:
            raise errors.FileTooLarge(
                f"{source.name} is {total} bytes; the limit is {MAX_FILE_BYTES}.",
                status=413,
                code="file_too_large",
            )
        answer: httpx.Response | None = None
        if upload_url is not None:
            upload_url = tus.absolute(self.base_url, upload_url)  # the key goes to this origin only
            with contextlib.suppress(errors.NotFound):
                answer = await self._request("HEAD", upload_url, headers=tus.TUS)
        continued = answer is not None  # (an upload begun before, maybe by another process)
        if answer is None:
            headers = tus.creation_headers(
                source, name=name, folder_id=folder_id, content_type=content_type, visibility=visibility
            )
            answer = await self._request("POST", tus.ENDPOINT, headers=headers)
            upload_url = tus.absolute(self.base_url, answer.headers["location"])
            if on_created is not None:
                on_created(upload_url)
        assert upload_url is not None
        offset, failures = tus.offset_of(answer) if "upload-offset" in answer.headers else 0, 0
        resumed = continued and offset > 0
        if progress is not None:
            progress(offset, total)
        while (asset_id := tus.asset_id_of(answer)) is None:
            length = min(chunk_size, total - offset)
            try:
                body = offload.iterate(tus.chunk_body(source, offset, length, total, progress))
                headers = {**IDENTITY, **auth_headers(self._settings), **tus.patch_headers(offset, length)}
                patch = self._http.build_request("PATCH", upload_url, content=body, headers=headers)
                sent = await self._http.send(patch, stream=True, follow_redirects=False)
                answer = check(await _read_within(sent, self._http.timeout.read))
                if tus.offset_of(answer) <= offset and tus.asset_id_of(answer) is None:
                    raise errors.CofferError(
                        f"The service took a chunk without moving the upload's offset ({offset}).",
                        code="bad_response",
                    )
                offset, failures = tus.offset_of(answer), 0
            except tus.RETRYABLE as exc:
                failures += 1
                if failures >= self.retry.attempts or errors.waits_too_long(exc):
                    if isinstance(exc, httpx.TransportError):
                        raise transport_error(exc, "PATCH", upload_url.split("?")[0]) from exc
                    raise
                await offload.sleep(tus.backoff(self.retry, failures, exc))
                answer = await self._request("HEAD", upload_url, headers=tus.TUS)
                offset = tus.offset_of(answer)
        asset = await self.get_asset(asset_id)
        if resumed:
            await self._stored_as_sent(source, total, asset)
        return asset

    async def _stored_as_sent(self, source: Source, total: int, asset: Asset) -> None:
        """A resumed upload is the bytes an earlier run sent, then this one's: the file must not
        have changed between them. The resume is keyed by its path, size and modification time,
        which a file rewritten in place can keep (``rsync --times``, ``touch -r``, a restore):
        it was stored as neither version and reported done. Read once more to be hashed (0.09 s
        of CPU per 100 MiB), only when an upload resumes."""
        if asset.sha256 is None:
            return  # (a service older than sha256)
        if await offload.run_sync(tus.sha256_of, source, total) == asset.sha256:
            return
        try:
            await self.delete_asset(asset.id)
            fate = "it was deleted; upload the file again"
        except errors.CofferError as exc:
            fate = f"deleting it failed ({exc.message}): delete {asset.id}"
        raise errors.CofferError(
            f"{source.name} changed after its upload began: the stored copy is not the file, and {fate}.",
            code="file_changed",
        )

    async def create_upload_token(
        self,
        *,
        folder_id: str | None = None,
        name: str | None = None,
        max_bytes: int | None = None,
        content_types: list[str] | None = None,
        expires_in: int | None = None,
        visibility: str | None = None,
        asset_expires_at: datetime | None = None,
        metadata: Mapping[str, object] | None = None,
        tags: Sequence[str] | None = None,
        accept_metadata: bool = True,
    ) -> UploadToken:
        """A short-lived, single-use token a browser can upload with, without a key (CONTRACT §8).
        ``asset_expires_at``, ``metadata`` and ``tags`` fix the uploaded asset's (the upload's own
        are ignored); ``accept_metadata=False`` refuses an upload carrying its own (issues 47, 50)."""
        body = clean_params(
            {
                "folderId": folder_id,
                "name": name,
                "maxBytes": max_bytes,
                "contentTypes": content_types,
                "expiresIn": expires_in,
                "visibility": visibility,
                "assetExpiresAt": asset_expires_at.isoformat() if asset_expires_at is not None else None,
                "metadata": dict(metadata) if metadata is not None else None,
                "tags": list(tags) if tags is not None else None,
                "acceptMetadata": None if accept_metadata else False,
            }
        )
        return parse(UploadToken, await self._request("POST", "/api/upload-tokens", json=body))

    async def upload_with_token(
        self,
        token: UploadToken | str,
        file: str | os.PathLike[str] | IO[bytes],
        *,
        name: str | None = None,
        filename: str | None = None,
        content_type: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> Asset:
        """Upload with a token (no key sent): ``token`` is an UploadToken or its ``url``."""
        url = token.url if isinstance(token, UploadToken) else token
        fields = {"name": name} if name else {}
        return await self._upload(url, file, fields, filename, content_type, progress, authenticated=False)

    async def _upload(
        self,
        url: str,
        file: str | os.PathLike[str] | IO[bytes],
        fields: dict[str, str],
        filename: str | None,
        content_type: str | None,
        progress: ProgressCallback | None,
        *,
        authenticated: bool,
    ) -> Asset:
        source = source_for(file, filename)
        if source.size is not None and source.size > MAX_FILE_BYTES:
            # Refused here rather than after sending 100 MiB the service would refuse anyway.
            raise errors.FileTooLarge(
                f"{source.name} is {source.size} bytes; the limit is {MAX_FILE_BYTES}.",
                status=413,
                code="file_too_large",
            )
        mp = Multipart(source, fields, content_type)

        async def body() -> AsyncIterator[bytes]:
            reader = await offload.run_sync(source.open)
            try:
                yield mp.head
                done, total = 0, source.size
                while total is None or done < total:
                    n = CHUNK if total is None else min(CHUNK, total - done)
                    chunk = await offload.run_sync(reader.read, n)
                    if not chunk:
                        if total is not None:
                            raise errors.CofferError(f"{source.name} shrank while it was being uploaded.")
                        break
                    yield chunk
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
                yield mp.tail
            finally:
                if source.close_after:
                    reader.close()

        r = await self._request(
            "POST",
            url,
            body=body,
            headers=mp.headers,
            replayable=source.replayable,
            authenticated=authenticated,
        )
        return parse(Asset, r)

    async def download(
        self,
        asset_id: str,
        dest: str | os.PathLike[str] | IO[bytes],
        *,
        progress: ProgressCallback | None = None,
    ) -> int:
        """Write the asset's bytes to a path (atomically: a temporary file renamed at the end) or to a
        binary stream, through a short-lived signed URL. A dropped connection resumes where it stopped
        (HTTP ranges). Returns the number of bytes written."""
        signed = await self.signed_url(asset_id, expires_in=3600)
        if not isinstance(dest, str | os.PathLike):
            return await self._fetch(signed, dest, progress)
        target = Path(dest)
        fd, tmp = partial_file(target)
        try:
            with os.fdopen(fd, "wb") as out:
                n = await self._fetch(signed, out, progress)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return n

    async def _fetch(self, signed: SignedUrl, out: IO[bytes], progress: ProgressCallback | None) -> int:
        total = signed.asset.size
        written = 0
        try:
            async for attempt in tenacity.AsyncRetrying(
                **retrying_kwargs(self.retry, method="GET", replayable=True)
            ):
                with attempt:
                    headers = {**IDENTITY, **({"range": f"bytes={written}-"} if written else {})}
                    async with self._http.stream("GET", signed.url, headers=headers) as r:
                        if r.is_error:
                            check(await _read_within(r, self._http.timeout.read))
                        if refusal := encoded(r):
                            raise refusal
                        if written and r.status_code != 206:
                            raise errors.CofferError("The CDN did not resume the download.", code="no_range")
                        async for chunk in r.aiter_bytes(CHUNK):
                            if written + len(chunk) > total:  # never more than the asset holds
                                raise errors.CofferError(
                                    f"The CDN sent more than the asset's {total} bytes.", code="bad_response"
                                )
                            await offload.run_sync(out.write, chunk)
                            written += len(chunk)
                            if progress is not None:
                                progress(written, total)
        except httpx.TransportError as exc:
            raise transport_error(exc, "GET", signed.url.split("?")[0]) from exc
        except httpx.InvalidURL as exc:  # the service's signed URL
            raise unsendable(exc, signed.url.split("?")[0]) from None
        if written != total:
            raise errors.CofferError(f"Downloaded {written} bytes of {total}.", code="short_download")
        return written

    # --- paths (what the command line addresses things by) ------------------------------------

    async def resolve_folder(self, path: str) -> Folder | None:
        """The folder at ``/a/b/c`` (None for ``/``); NotFound names the first missing part."""
        folder: Folder | None = None
        parts = split_path(path)
        for i, part in enumerate(parts):
            match = [f for f in await self.list_folders(folder.id if folder else None) if f.name == part]
            if not match:
                where = "/" + "/".join(parts[: i + 1])
                raise errors.NotFound(f"No folder {where}.", status=404, code="not_found")
            folder = match[0]
        return folder

    async def make_folders(
        self, path: str, *, parents: bool = True, expiry_days: int | None = None
    ) -> Folder | None:
        """Create the folder at ``path`` (and, with ``parents``, any missing ancestor); an existing
        folder is returned as it is when ``parents`` is set, else Conflict. ``expiry_days`` is
        the default expiry of the last folder, when this call creates it."""
        parts = split_path(path)
        folder: Folder | None = None
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            parent = folder.id if folder else None
            match = [f for f in await self.list_folders(parent) if f.name == part]
            if match and (parents or not last):
                folder = match[0]
                continue
            if not match and not parents and not last:
                where = "/" + "/".join(parts[: i + 1])
                raise errors.NotFound(f"No folder {where}.", status=404, code="not_found")
            try:
                folder = await self.create_folder(part, parent, expiry_days=expiry_days if last else None)
            except errors.Conflict:
                if not parents:
                    raise
                # Someone else made it meanwhile: use theirs.
                folder = next(f for f in await self.list_folders(parent) if f.name == part)
        return folder

    async def resolve_asset(self, spec: str) -> Asset:
        """An asset by id (``ast_…``) or by ``/folder/path/name``; Conflict when several share the name."""
        if spec.startswith("ast_") and "/" not in spec:
            return await self.get_asset(spec)
        parts = split_path(spec)
        if not parts:
            raise errors.NotFound(f"{spec!r} names no asset.", status=404, code="not_found")
        folder = await self.resolve_folder("/".join(parts[:-1]))
        found = [
            a async for a in self.list_assets(folder.id if folder else "", q=parts[-1]) if a.name == parts[-1]
        ]
        if not found:
            raise errors.NotFound(f"No asset {spec}.", status=404, code="not_found")
        if len(found) > 1:
            ids = ", ".join(a.id for a in found)
            raise errors.Conflict(f"Several assets are named {spec}: {ids}; give an id.", status=409)
        return found[0]


async def _read_within(response: httpx.Response, seconds: float | None) -> httpx.Response:
    """``response`` read whole and closed, unless it is larger than MAX_RESPONSE_BYTES (declared
    or as read) or in a content coding: then ``bad_response``, without holding more than the
    bound. Its body must also end within ``seconds`` (the read timeout, which alone bounds each
    read: a byte every 2 s kept the client waiting as long as the server liked)."""
    started = time.monotonic()
    try:
        if refusal := encoded(response):
            raise refusal
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
            raise too_large(int(declared))
        chunks, read = [], 0
        async for chunk in response.aiter_bytes():
            if seconds is not None and time.monotonic() - started > seconds:
                raise overdue(response, seconds)
            read += len(chunk)
            if read > MAX_RESPONSE_BYTES:
                raise too_large(read)
            chunks.append(chunk)
        response._content = b"".join(chunks)  # what httpx's own read() keeps
    finally:
        await response.aclose()
    return response
