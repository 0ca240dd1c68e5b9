"""auth clients: API keys to principals (cached), and the dashboard's accounts API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from cachetools import TLRUCache, TTLCache

from coffer_edge.clients.base import ServiceClient, deadline_cache, reuse_seconds
from coffer_edge.metrics import AUTH_CACHE
from coffer_kit.contract import accounts as schemas
from coffer_kit.contract import wire
from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.resources import Visibility
from coffer_kit.contract.scopes import ALL, DEFAULT_SCOPES, Network, networks_of
from coffer_kit.contract.wire import Ingest
from coffer_kit.internal import InternalClient

CacheKey = tuple[str, str | None]


def _seg(value: str) -> str:
    """A caller-supplied id as one path segment (never a path of its own)."""
    return quote(value, safe="")


@dataclass(frozen=True, slots=True)
class Principal:
    organization_id: str
    key_id: str
    key_kind: str
    user_id: str | None
    quota_bytes: int
    key_expires_at: float | None  # unix seconds
    # CONTRACT §12: what uploads that do not say become (cached with the rest, ≤ 5 s).
    default_visibility: Visibility = "public"
    # A user key's role in the organization (owner, member); None for an organization key.
    role: str | None = None
    # Issue 48: the organization's ingest rules (cached with the rest, ≤ 5 s).
    ingest: Ingest = field(default_factory=Ingest)
    # Issue 46: the scopes as given, the actions they allow (checked on every request by
    # deps.authenticate), the folder subtree the key is confined to, and its client networks
    # (parsed once, when the answer is cached).
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    actions: frozenset[str] = ALL
    folder_id: str | None = None
    # The folders of the keys that made this one (``subtree.confine``).
    folder_within: tuple[str, ...] = ()
    networks: tuple[Network, ...] = ()
    # Issue 47: days a deleted asset stays in the trash (0: deletes are final).
    trash_retention_days: int = 0


class AuthClient(ServiceClient):
    service = "auth"

    def __init__(
        self, http: InternalClient, *, cache_seconds: float, cache_size: int, negative_seconds: float = 0.0
    ) -> None:
        super().__init__(http)
        self.cache_seconds = cache_seconds
        # Keys auth refused (401), not asked again for a moment: a flood of made-up keys costs
        # auth one lookup per key and interval, not one per request.
        self._refused: TTLCache[CacheKey, CofferError] | None = (
            TTLCache(maxsize=cache_size, ttl=negative_seconds, timer=time.monotonic)
            if negative_seconds > 0
            else None
        )
        # Per-entry deadline: never longer than cache_seconds, never past the key's own expiry.
        self._cache: TLRUCache[CacheKey, tuple[Principal, float]] = deadline_cache(cache_size)
        # Lookups on their way to auth: concurrent misses for one key wait for the same call.
        self._pending: dict[CacheKey, asyncio.Task[Principal]] = {}
        # Organizations' ingest rules, as old as a principal's may be (docs/api.md: edge learns a
        # change within 5 s): a resumable upload's completion asks for them, and a burst of small
        # uploads asked auth once each.
        self._ingest: TTLCache[str, Ingest] | None = None
        if cache_seconds > 0:
            self._ingest = TTLCache(maxsize=cache_size, ttl=cache_seconds, timer=time.monotonic)

    async def ingest(self, org_id: str, *, request_id: str, fresh: bool = False) -> Ingest:
        """An organization's ingest rules (issue 48), asked at a resumable upload's completion;
        ``fresh``: asked of auth whatever the cache holds (the scan relay's holds)."""
        if not fresh and self._ingest is not None and (known := self._ingest.get(org_id)) is not None:
            return known
        rules = await self.call(Ingest, "GET", f"/internal/v1/orgs/{org_id}/ingest", request_id=request_id)
        if self._ingest is not None:
            self._ingest[org_id] = rules
        return rules

    async def set_trash_retention(
        self, org_id: str, days: int, actor: wire.Actor | None, *, request_id: str
    ) -> int:
        """Issue 47: an organization's trash retention (edge checked the caller may set it)."""
        body = wire.TrashRetentionIn(trash_retention_days=days, actor=actor)
        path = f"/internal/v1/orgs/{_seg(org_id)}/trash/retention"
        out = await self.call(
            wire.TrashRetentionIn, "PUT", path, json=body.model_dump(by_alias=True), request_id=request_id
        )
        return out.trash_retention_days

    async def trash_retentions(self, org_ids: list[str]) -> wire.TrashRetentions:
        """Issue 47: organizations' trash retentions and quotas (the expiry sweeper asks)."""
        body = wire.TrashRetentions(organization_ids=org_ids).model_dump(by_alias=True)
        return await self.call(wire.TrashRetentions, "POST", "/internal/v1/orgs/trash-retentions", json=body)

    async def claim_scan_syncs(self, *, settle_seconds: float, lease_seconds: float) -> list[wire.ScanSync]:
        """Issue 48: organizations whose scan mode changed at least ``settle_seconds`` ago."""
        body = wire.ScanSyncClaim(settle_seconds=settle_seconds, lease_seconds=lease_seconds)
        path = "/internal/v1/scan-syncs/claim"
        return (await self.call(wire.ScanSyncs, "POST", path, json=body.model_dump(by_alias=True))).syncs

    async def end_scan_sync(self, job: wire.ScanSync) -> bool:
        """False: the mode changed meanwhile, and the sync is due again."""
        done = wire.ScanSyncDone(generation=job.generation, leased_until=job.leased_until)
        path = f"/internal/v1/orgs/{_seg(job.organization_id)}/scan-sync/ended"
        body = done.model_dump(by_alias=True, mode="json")
        return (await self.call(wire.ScanSyncEnded, "POST", path, json=body)).ended

    async def grant_revocations(self, *, limit: int) -> wire.GrantRevocations:
        """The authorities that stopped acting, oldest first, not yet relayed to blob."""
        return await self.call(wire.GrantRevocations, "GET", f"/internal/v1/grant-revocations?limit={limit}")

    async def revocations_relayed(self, seqs: list[int]) -> None:
        """blob has stored these: auth forgets them."""
        body = wire.RelayedRevocations(seqs=seqs).model_dump(by_alias=True)
        await self.request("POST", "/internal/v1/grant-revocations/relayed", json=body)

    async def record_changes(self, events: list[dict[str, Any]]) -> None:
        """Record metadata's change events in the audit log (each once, however often sent)."""
        await self.request("POST", "/internal/v1/audit/changes", json={"events": events})

    # The key API (issue 46): never cached, each answered by auth for the calling key.

    def _keys(self, org_id: str, key_id: str = "") -> str:
        return f"/internal/v1/orgs/{_seg(org_id)}/api-keys" + (f"/{_seg(key_id)}" if key_id else "")

    async def list_keys(self, org_id: str, caller_key_id: str, *, request_id: str) -> schemas.KeysOut:
        headers = {"x-caller-key-id": caller_key_id}
        return await self.call(
            schemas.KeysOut, "GET", self._keys(org_id), headers=headers, request_id=request_id
        )

    async def get_key(
        self, org_id: str, caller_key_id: str, key_id: str, *, request_id: str
    ) -> schemas.KeyOut:
        headers = {"x-caller-key-id": caller_key_id}
        path = self._keys(org_id, key_id)
        return await self.call(schemas.KeyOut, "GET", path, headers=headers, request_id=request_id)

    async def create_key(
        self, org_id: str, caller_key_id: str, body: wire.KeyCreate, *, request_id: str
    ) -> schemas.KeyCreatedOut:
        return await self.call(
            schemas.KeyCreatedOut,
            "POST",
            self._keys(org_id),
            headers={"x-caller-key-id": caller_key_id},
            json=body.model_dump(by_alias=True),
            request_id=request_id,
        )

    async def delete_key(self, org_id: str, caller_key_id: str, key_id: str, *, request_id: str) -> None:
        headers = {"x-caller-key-id": caller_key_id}
        await self.request("DELETE", self._keys(org_id, key_id), headers=headers, request_id=request_id)

    async def rotate_key(
        self, org_id: str, caller_key_id: str, key_id: str, body: wire.KeyRotate, *, request_id: str
    ) -> schemas.KeyRotatedOut:
        return await self.call(
            schemas.KeyRotatedOut,
            "POST",
            self._keys(org_id, key_id) + "/rotate",
            headers={"x-caller-key-id": caller_key_id},
            json=body.model_dump(by_alias=True),
            request_id=request_id,
        )

    async def principal(
        self, key_hash: str, organization_id: str | None, *, request_id: str | None
    ) -> Principal:
        """The principal for a key (hash) and optional organization header; raises §2 refusals."""
        cache_key = (key_hash, organization_id)
        hit = self._cache.get(cache_key)
        if hit is not None:
            AUTH_CACHE.labels("hit").inc()
            return hit[0]
        refused = self._refused.get(cache_key) if self._refused is not None else None
        if refused is not None:
            AUTH_CACHE.labels("refused").inc()
            raise CofferError(refused.status, refused.code, refused.message)
        call = self._pending.get(cache_key)
        if call is None or call.done():
            AUTH_CACHE.labels("miss").inc()
            # A task of its own, so a waiter that is cancelled (its client went away) does not
            # cancel the call for the others; it carries the first waiter's request id.
            call = asyncio.create_task(self._fetch(cache_key, request_id=request_id))
            self._pending[cache_key] = call
            call.add_done_callback(lambda done: self._settled(cache_key, done))
        else:
            AUTH_CACHE.labels("shared").inc()
        # Every waiter gets this call's answer or its error; a failure is not kept for later.
        return await asyncio.shield(call)

    def _settled(self, cache_key: CacheKey, call: asyncio.Task[Principal]) -> None:
        if self._pending.get(cache_key) is call:
            del self._pending[cache_key]
        if not call.cancelled():
            call.exception()  # retrieved, even when every waiter was cancelled

    async def _fetch(self, cache_key: CacheKey, *, request_id: str | None) -> Principal:
        """Ask auth, and cache a principal it answers."""
        key_hash, organization_id = cache_key
        headers = {"x-key-hash": key_hash}
        if organization_id is not None:
            headers["x-organization-id"] = organization_id
        try:
            body = await self.call(
                wire.Principal, "GET", "/internal/v1/principal", headers=headers, request_id=request_id
            )
        except CofferError as exc:
            if exc.status == 401 and self._refused is not None:
                self._refused[cache_key] = exc
            raise
        expires = body.key_expires_at
        expires_unix = datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp() if expires else None
        principal = Principal(
            **body.model_dump(
                exclude={"key_expires_at", "ingest", "scopes", "actions", "folder_within", "networks"}
            ),
            key_expires_at=expires_unix,
            folder_within=tuple(body.folder_within),
            ingest=body.ingest,
            scopes=tuple(body.scopes),
            actions=frozenset(body.actions),
            networks=networks_of(body.networks),
        )
        ttl = reuse_seconds(self.cache_seconds, expires_unix)
        if ttl > 0:
            self._cache[cache_key] = (principal, time.monotonic() + ttl)
        return principal


@dataclass(frozen=True, slots=True)
class Caller:
    """A dashboard request as auth needs to see it: the session (hashed) and the browser."""

    session_hash: str | None
    ip: str | None
    user_agent: str | None
    request_id: str | None

    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.session_hash:
            headers["x-session-hash"] = self.session_hash
        if self.ip:
            headers["x-client-ip"] = self.ip
        if self.user_agent:
            # Latin-1 safe and bounded: auth keeps at most 255 characters of it.
            headers["x-client-user-agent"] = (
                self.user_agent[:1024].encode("latin-1", "replace").decode("latin-1")
            )
        return headers


SessionKey = tuple[str, str | None]


class AccountsClient(ServiceClient):
    """auth's dashboard API (services/auth/INTERNAL_API.md): sessions, orgs, members, keys, audit.

    Sessions are resolved like keys: by hash, the answer reused for at most ``cache_seconds``
    (5 s, so a revoked session stops within the bound keys have); this edge's own sign-outs and
    changes drop the entry at once.
    """

    service = "auth"

    def __init__(self, http: InternalClient, *, cache_seconds: float, cache_size: int) -> None:
        super().__init__(http)
        self._cache: TLRUCache[SessionKey, tuple[schemas.CurrentOut, float]] = deadline_cache(cache_size)
        self.cache_seconds = cache_seconds

    async def _call(
        self,
        method: str,
        path: str,
        caller: Caller,
        *,
        json: Any = None,
        params: Mapping[str, str | int] | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> Any:
        headers = caller.headers()
        if extra:
            headers.update(extra)
        return await self.json(
            method,
            "/internal/v1" + path,
            headers=headers,
            json=json,
            params=params,
            request_id=caller.request_id,
        )

    def forget(self, session_hash: str) -> None:
        """Drop every cached answer for a session (after a sign-out or a change it made)."""
        for key in [k for k in list(self._cache.keys()) if k[0] == session_hash]:
            self._cache.pop(key, None)

    # Sessions and accounts
    async def current(
        self, caller: Caller, organization_id: str | None = None, *, fresh: bool = False
    ) -> schemas.CurrentOut:
        """The signed-in user, their orgs and (with ``organization_id``) their role there;
        ``fresh`` asks auth even when a cached answer is young enough."""
        assert caller.session_hash is not None
        key = (caller.session_hash, organization_id)
        hit = None if fresh else self._cache.get(key)
        if hit is not None:
            AUTH_CACHE.labels("hit").inc()
            return hit[0]
        AUTH_CACHE.labels("miss").inc()
        extra = {"x-organization-id": organization_id} if organization_id else None
        body = await self._call("GET", "/sessions/current", caller, extra=extra)
        current = schemas.CurrentOut.model_validate(body)
        self._cache[key] = (current, time.monotonic() + self.cache_seconds)
        return current

    async def register(
        self, caller: Caller, *, email: str, password: str, invitation_token_hash: str | None
    ) -> schemas.LoginOut:
        body = {
            "email": email,
            "password": password,
            "invitationTokenHash": invitation_token_hash,
            "ip": caller.ip,
            "userAgent": caller.user_agent,
        }
        return schemas.LoginOut.model_validate(await self._call("POST", "/users", caller, json=body))

    async def login(
        self, caller: Caller, *, email: str, password: str, device_token: str | None = None
    ) -> schemas.LoginOut:
        body = {
            "email": email,
            "password": password,
            "ip": caller.ip,
            "userAgent": caller.user_agent,
            # Only a plausible one is sent on (auth bounds it too, as a 400 the form would show).
            "deviceToken": device_token if device_token and len(device_token) <= 128 else None,
        }
        answer = schemas.LoginOut.model_validate(await self._call("POST", "/sessions", caller, json=body))
        if caller.session_hash:
            self.forget(caller.session_hash)
        return answer

    async def reauth(self, caller: Caller, *, password: str) -> schemas.LoginOut:
        body = {"password": password}
        answer = schemas.LoginOut.model_validate(
            await self._call("POST", "/sessions/current/reauth", caller, json=body)
        )
        if caller.session_hash:
            self.forget(caller.session_hash)
        return answer

    async def logout(self, caller: Caller) -> None:
        if caller.session_hash:
            self.forget(caller.session_hash)
        await self._call("DELETE", "/sessions/current", caller)

    async def sessions(self, caller: Caller) -> list[schemas.SessionOut]:
        return schemas.SessionsOut.model_validate(
            await self._call("GET", "/users/me/sessions", caller)
        ).sessions

    async def revoke_session(self, caller: Caller, session_id: str) -> None:
        await self._call("DELETE", f"/users/me/sessions/{_seg(session_id)}", caller)

    async def revoke_other_sessions(self, caller: Caller) -> int:
        body = await self._call("DELETE", "/users/me/sessions", caller, params={"others": "true"})
        return schemas.RevokedOut.model_validate(body).revoked

    async def change_password(
        self, caller: Caller, *, current: str, new: str, revoke_others: bool
    ) -> schemas.PasswordChangedOut:
        """The new password; the session that changed it is replaced by the one answered."""
        body = {"current": current, "new": new, "revokeOthers": revoke_others}
        answer = await self._call("POST", "/users/me/password", caller, json=body)
        return schemas.PasswordChangedOut.model_validate(answer)

    async def my_keys(self, caller: Caller) -> list[schemas.KeyOut]:
        return schemas.KeysOut.model_validate(await self._call("GET", "/users/me/keys", caller)).keys

    async def reset_preview(self, caller: Caller, token_hash: str) -> schemas.ResetPreviewOut:
        body = await self._call("GET", f"/password-resets/{_seg(token_hash)}", caller)
        return schemas.ResetPreviewOut.model_validate(body)

    async def reset_consume(self, caller: Caller, *, token_hash: str, password: str) -> schemas.ResetDoneOut:
        body = {"tokenHash": token_hash, "password": password}
        answer = await self._call("POST", "/password-resets/consume", caller, json=body)
        return schemas.ResetDoneOut.model_validate(answer)

    # Organizations and members
    async def create_org(self, caller: Caller, name: str) -> schemas.OrgOut:
        return schemas.OrgOut.model_validate(await self._call("POST", "/orgs", caller, json={"name": name}))

    async def rename_org(self, caller: Caller, org_id: str, name: str) -> schemas.OrgOut:
        body = await self._call("PATCH", f"/orgs/{_seg(org_id)}", caller, json={"name": name})
        return schemas.OrgOut.model_validate(body)

    async def set_default_visibility(self, caller: Caller, org_id: str, visibility: str) -> schemas.OrgOut:
        path = f"/orgs/{_seg(org_id)}/default-visibility"
        body = await self._call("PUT", path, caller, json={"defaultVisibility": visibility})
        return schemas.OrgOut.model_validate(body)

    async def set_trash_retention(self, caller: Caller, org_id: str, days: int) -> schemas.OrgOut:
        """Issue 47: days a deleted asset stays in the trash (owners; auth checks the range)."""
        path = f"/orgs/{_seg(org_id)}/trash-retention"
        body = await self._call("PUT", path, caller, json={"trashRetentionDays": days})
        if caller.session_hash is not None:
            self.forget(caller.session_hash)  # the next page shows the new retention
        return schemas.OrgOut.model_validate(body)

    async def set_ingest(
        self, caller: Caller, org_id: str, *, mode: str, allowed_types: str, scan: str
    ) -> schemas.OrgOut:
        """Issue 48: the organization's ingest rules (owners; auth checks every value)."""
        body = {"ingestMode": mode, "allowedTypes": allowed_types, "scanMode": scan}
        answer = await self._call("PUT", f"/orgs/{_seg(org_id)}/ingest", caller, json=body)
        return schemas.OrgOut.model_validate(answer)

    async def members(self, caller: Caller, org_id: str) -> list[schemas.MemberOut]:
        body = await self._call("GET", f"/orgs/{_seg(org_id)}/members", caller)
        return schemas.MembersOut.model_validate(body).members

    async def set_role(self, caller: Caller, org_id: str, user_id: str, role: str) -> schemas.MemberOut:
        path = f"/orgs/{_seg(org_id)}/members/{_seg(user_id)}"
        return schemas.MemberOut.model_validate(await self._call("PATCH", path, caller, json={"role": role}))

    async def remove_member(self, caller: Caller, org_id: str, user_id: str) -> None:
        await self._call("DELETE", f"/orgs/{_seg(org_id)}/members/{_seg(user_id)}", caller)

    # Invitations
    async def invite(
        self, caller: Caller, org_id: str, *, email: str, role: str
    ) -> schemas.InvitationCreatedOut:
        body = await self._call(
            "POST", f"/orgs/{_seg(org_id)}/invitations", caller, json={"email": email, "role": role}
        )
        return schemas.InvitationCreatedOut.model_validate(body)

    async def renew_invitation(
        self, caller: Caller, org_id: str, invitation_id: str
    ) -> schemas.InvitationCreatedOut:
        path = f"/orgs/{_seg(org_id)}/invitations/{_seg(invitation_id)}/renew"
        return schemas.InvitationCreatedOut.model_validate(await self._call("POST", path, caller))

    async def invitations(self, caller: Caller, org_id: str) -> list[schemas.InvitationOut]:
        body = await self._call("GET", f"/orgs/{_seg(org_id)}/invitations", caller)
        return schemas.InvitationsOut.model_validate(body).invitations

    async def revoke_invitation(self, caller: Caller, org_id: str, invitation_id: str) -> None:
        await self._call("DELETE", f"/orgs/{_seg(org_id)}/invitations/{_seg(invitation_id)}", caller)

    async def invitation_preview(self, caller: Caller, token_hash: str) -> schemas.InvitationPreviewOut:
        body = await self._call("GET", f"/invitations/{_seg(token_hash)}", caller)
        return schemas.InvitationPreviewOut.model_validate(body)

    async def accept_invitation(self, caller: Caller, token_hash: str) -> schemas.OrgOut:
        body = await self._call("POST", "/invitations/accept", caller, json={"tokenHash": token_hash})
        return schemas.OrgOut.model_validate(body)

    # API keys
    async def keys(self, caller: Caller, org_id: str) -> list[schemas.KeyOut]:
        return schemas.KeysOut.model_validate(
            await self._call("GET", f"/orgs/{_seg(org_id)}/keys", caller)
        ).keys

    async def create_key(
        self,
        caller: Caller,
        org_id: str,
        *,
        kind: str,
        name: str,
        expires_in: int | None,
        scopes: list[str] | None = None,
        folder_id: str | None = None,
    ) -> schemas.KeyCreatedOut:
        body = {"kind": kind, "name": name, "expiresIn": expires_in, "scopes": scopes, "folderId": folder_id}
        answer = await self._call("POST", f"/orgs/{_seg(org_id)}/keys", caller, json=body)
        return schemas.KeyCreatedOut.model_validate(answer)

    async def delete_key(self, caller: Caller, org_id: str, key_id: str) -> None:
        await self._call("DELETE", f"/orgs/{_seg(org_id)}/keys/{_seg(key_id)}", caller)

    async def rotate_key(
        self, caller: Caller, org_id: str, key_id: str, grace_seconds: int
    ) -> schemas.KeyRotatedOut:
        path = f"/orgs/{_seg(org_id)}/keys/{_seg(key_id)}/rotate"
        answer = await self._call("POST", path, caller, json={"graceSeconds": grace_seconds})
        return schemas.KeyRotatedOut.model_validate(answer)

    # Audit log
    async def audit(
        self, caller: Caller, org_id: str, params: Mapping[str, str | int]
    ) -> schemas.AuditPageOut:
        body = await self._call("GET", f"/orgs/{_seg(org_id)}/audit", caller, params=params)
        return schemas.AuditPageOut.model_validate(body)

    async def record(
        self,
        caller: Caller,
        org_id: str,
        action: str,
        *,
        target_type: str,
        target_id: str,
        target_label: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Record a file-browser action (edge did it with metadata and blob; auth keeps the log)."""
        body = {
            "action": action,
            "targetType": target_type,
            "targetId": target_id,
            "targetLabel": target_label,
            "details": details,
        }
        await self._call("POST", f"/orgs/{_seg(org_id)}/audit", caller, json=body)
