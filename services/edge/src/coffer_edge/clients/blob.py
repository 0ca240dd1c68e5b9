"""blob client: streams upload bytes, deletes objects, signs CDN URLs, keeps transform presets."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from coffer_edge.clients.base import ServiceClient
from coffer_kit.contract.wire import (
    Deleted,
    GrantRevocations,
    HeldIn,
    HoldReason,
    ImageFactsOut,
    RevocationsStored,
    ScanOutcome,
    SignIn,
    SignOut,
    Stored,
    TransformFields,
    TransformPresets,
    TusAppended,
    VisibilityIn,
    VisibilityOut,
)


class BlobClient(ServiceClient):
    service = "blob"

    async def upload(
        self,
        org_id: str,
        asset_id: str,
        body: AsyncIterator[bytes],
        content_type: str,
        *,
        request_id: str,
        visibility: str = "public",
        fixed: bool = False,
        content_length: int | None = None,
        allow: list[str] | None = None,
        held: bool = False,
    ) -> Stored:
        """Stream a multipart body to blob; answers what it stored, and the form fields.

        ``visibility`` is what the object becomes unless the form's ``visibility`` field says
        otherwise; ``fixed``: whatever the form says. With ``content_length`` (the client's,
        which the server enforced on the body) the body goes with it rather than chunked:
        each piece is sent as it is, where chunked framing joined every piece with its size
        line into a new buffer (Python 3.11's ``writelines``), and blob reads no framing."""
        headers = {"content-type": content_type}
        if content_length is not None:
            headers["content-length"] = str(content_length)
        return await self.call(
            Stored,
            "POST",
            f"/internal/v1/uploads/{org_id}/{asset_id}",
            params=[
                ("visibility", visibility),
                ("fixed", "true" if fixed else "false"),
                # Lists of media ranges the detected type must match (an enforcing organization's).
                *(("allow", ranges) for ranges in allow or ()),
                # Stored held back from downloads until its scan passes (issue 48, ``block``).
                ("held", "true" if held else "false"),
            ],
            content=body,
            headers=headers,
            request_id=request_id,
        )

    async def tus_append(
        self,
        upload_id: str,
        body: AsyncIterator[bytes],
        *,
        org_id: str,
        asset_id: str,
        key: str,
        offset: int,
        length: int,
        media_type: str,
        private: bool,
        resume: dict[str, Any] | None,
        checksum: str | None,
        request_id: str,
        held: bool = False,
    ) -> TusAppended:
        """Stream a chunk of a resumable upload to blob, to be written at ``offset``; ``held``:
        a last byte publishes the object held back (issue 48's scan=block)."""
        headers = {"content-type": "application/offset+octet-stream"}
        if resume is not None:
            headers["coffer-tus-state"] = json.dumps(resume, separators=(",", ":"))
        if checksum is not None:
            headers["coffer-tus-checksum"] = checksum
        params: dict[str, str | int] = {
            "key": key,
            "offset": offset,
            "length": length,
            "mediaType": media_type,
            "private": "true" if private else "false",
            "held": "true" if held else "false",
        }
        return await self.call(
            TusAppended,
            "PUT",
            f"/internal/v1/tus/{org_id}/{asset_id}/{upload_id}",
            params=params,
            headers=headers,
            content=body,
            request_id=request_id,
        )

    async def delete_object(self, key: str, *, request_id: str | None = None) -> None:
        await self.call(
            Deleted, "DELETE", f"/internal/v1/objects/{quote(key, safe='/')}", request_id=request_id
        )

    async def delete_prefix(self, org_id: str, asset_id: str, *, request_id: str | None = None) -> None:
        await self.call(
            Deleted, "DELETE", f"/internal/v1/prefixes/{org_id}/{asset_id}", request_id=request_id
        )

    async def set_visibility(self, key: str, visibility: str, *, request_id: str) -> None:
        """Make the object private or public at the CDN (its next read sees it)."""
        await self.call(
            VisibilityOut,
            "PUT",
            f"/internal/v1/visibility/{quote(key, safe='/')}",
            json=VisibilityIn.model_validate({"visibility": visibility}).model_dump(by_alias=True),
            request_id=request_id,
        )

    async def scan(self, key: str, *, timeout: float) -> ScanOutcome:
        """Have blob stream the object to clamd (issue 48); it holds an infected one, releases
        a clean one. 503 ``scanner_unavailable`` if clamd cannot answer."""
        return await self.call(
            ScanOutcome, "POST", f"/internal/v1/scan/{quote(key, safe='/')}", timeout=timeout
        )

    async def image_facts(self, key: str, *, timeout: float) -> ImageFactsOut:
        """An image's facts, read on a transform worker (issue 50); nulls for a non-image."""
        return await self.call(
            ImageFactsOut, "POST", f"/internal/v1/facts/{quote(key, safe='/')}", timeout=timeout
        )

    async def set_held(self, key: str, held: bool, *, request_id: str, reason: HoldReason = "scan") -> None:
        """Hold the object back from every download, or release it, for its scan (until it
        passes) or the trash (until a restore): two holds of their own."""
        await self.call(
            HeldIn,
            "PUT",
            f"/internal/v1/held/{quote(key, safe='/')}",
            json=HeldIn(held=held, reason=reason).model_dump(by_alias=True),
            request_id=request_id,
        )

    async def sign(
        self,
        key: str,
        expires_in: int,
        *,
        request_id: str,
        preset: str | None = None,
        transform: TransformFields | None = None,
        by: str | None,
    ) -> str:
        """A signed CDN URL; with ``preset`` or ``transform``, the signature covers it (CONTRACT §10).
        ``by`` is the authority it is made under (``key:…``, ``user:…``): the URL dies with it."""
        body = SignIn(key=key, expires_in=expires_in, preset=preset, transform=transform, by=by)
        signed = await self.call(
            SignOut,
            "POST",
            "/internal/v1/sign",
            json=body.model_dump(by_alias=True, exclude_none=True),
            request_id=request_id,
        )
        return signed.url

    async def store_revocations(self, revocations: GrantRevocations) -> int:
        """Have the CDN refuse the signed URLs made under these authorities before they ended."""
        body = revocations.model_dump(by_alias=True)
        stored = await self.call(RevocationsStored, "POST", "/internal/v1/grant-revocations", json=body)
        return stored.stored

    async def transform_presets(self, org_id: str, *, request_id: str) -> TransformPresets:
        """The organization's own transform presets (built-in ones are not stored)."""
        return await self.call(
            TransformPresets, "GET", f"/internal/v1/transform-presets/{org_id}", request_id=request_id
        )

    async def put_transform_preset(
        self, org_id: str, name: str, fields: TransformFields, *, request_id: str
    ) -> TransformFields:
        return await self.call(
            TransformFields,
            "PUT",
            f"/internal/v1/transform-presets/{org_id}/{quote(name, safe='')}",
            json=fields.model_dump(by_alias=True),
            request_id=request_id,
        )

    async def delete_transform_preset(self, org_id: str, name: str, *, request_id: str) -> None:
        await self.call(
            Deleted,
            "DELETE",
            f"/internal/v1/transform-presets/{org_id}/{quote(name, safe='')}",
            request_id=request_id,
        )
