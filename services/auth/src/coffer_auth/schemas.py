"""The dashboard's internal API: request bodies (JSON in camelCase). The responses live in
``coffer_kit.contract.accounts``, shared with edge's client; ``services/auth/INTERNAL_API.md``
describes both."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from coffer_kit.contract.accounts import (  # re-exported: auth's modules import them from here
    ActorType,
    AuditEventOut,
    AuditPageOut,
    Camel,
    CurrentOut,
    InvitationCreatedOut,
    InvitationOut,
    InvitationPreviewOut,
    InvitationsOut,
    InvitationStatus,
    KeyCreatedOut,
    KeyKindName,
    KeyOut,
    KeyRotatedOut,
    KeysOut,
    LoginOut,
    MemberOut,
    MembersOut,
    OrgOut,
    PasswordChangedOut,
    ResetDoneOut,
    ResetPreviewOut,
    RevokedOut,
    RoleName,
    SessionOut,
    SessionsOut,
    SuccessOut,
    Timestamp,
    UserOut,
    UserRef,
)
from coffer_kit.contract.scopes import MAX_SCOPE_CHARS, MAX_SCOPES

# Audit actions edge may record through POST /orgs/{org}/audit (the file browser's).
EdgeAuditAction = Literal[
    "folder.created",
    "folder.renamed",
    "folder.moved",
    "folder.deleted",
    "asset.uploaded",
    "asset.renamed",
    "asset.moved",
    "asset.deleted",
    "asset.visibility_changed",
    "signed_url.created",
]


# --- requests ---------------------------------------------------------------------------


class ClientInfo(Camel):
    """Who is at the browser, as edge saw them (for the session row and the audit log)."""

    ip: str | None = None
    user_agent: str | None = None

    @field_validator("ip", "user_agent", mode="after")
    @classmethod
    def _bounded(cls, value: str | None) -> str | None:
        # Descriptive only: cut to what is stored rather than refuse a sign-in over a long header.
        return value[:255] if value else None


class RegisterIn(ClientInfo):
    email: str = Field(max_length=320)
    password: str = Field(max_length=1024)
    # Carried from an invite link: required when sign-up is "invite"; the email must match.
    invitation_token_hash: str | None = Field(default=None, min_length=64, max_length=64)


class LoginIn(ClientInfo):
    email: str = Field(max_length=320)
    password: str = Field(max_length=1024)
    # The browser's device token (its cookie), if it has one: a browser the account knows
    # counts only its own failures (``coffer_auth.devices``).
    device_token: str | None = Field(default=None, max_length=128)


class ReauthIn(Camel):
    password: str = Field(max_length=1024)


class PasswordChangeIn(Camel):
    current: str = Field(max_length=1024)
    new: str = Field(max_length=1024)
    revoke_others: bool = True


class OrgIn(Camel):
    name: str = Field(max_length=1024)


class DefaultVisibilityIn(Camel):
    default_visibility: Literal["public", "private"]


class IngestIn(Camel):
    """Issue 48: an organization's ingest rules (checked by ``orgs.set_ingest``)."""

    ingest_mode: str = Field(max_length=16)
    # Comma-separated media ranges; empty: any type.
    allowed_types: str = Field(default="", max_length=4096)
    scan_mode: str = Field(max_length=16)


class RoleIn(Camel):
    role: RoleName


class InvitationIn(Camel):
    email: str = Field(max_length=320)
    role: RoleName = "member"


class AcceptIn(Camel):
    token_hash: str = Field(min_length=64, max_length=64)


class KeyIn(Camel):
    kind: KeyKindName
    name: str = Field(default="", max_length=255)
    # Seconds from now; null means "No expiry".
    expires_in: int | None = None
    # Issue 46: actions and bundles (default full), and the folder subtree (checked by edge).
    scopes: list[Annotated[str, Field(max_length=MAX_SCOPE_CHARS)]] | None = Field(
        default=None, max_length=MAX_SCOPES
    )
    folder_id: str | None = Field(default=None, max_length=64)


class RotateIn(Camel):
    # How long the old key keeps working: 0 (at once) to 7 days.
    grace_seconds: int = Field(ge=0, le=604800)


class AuditIn(Camel):
    action: EdgeAuditAction
    target_type: str | None = Field(default=None, max_length=32)
    target_id: str | None = Field(default=None, max_length=128)
    target_label: str | None = Field(default=None, max_length=1024)
    details: dict[str, Any] | None = None


class ResetConsumeIn(Camel):
    token_hash: str = Field(min_length=64, max_length=64)
    password: str = Field(max_length=1024)


__all__ = [
    "ActorType",
    "AuditEventOut",
    "AuditPageOut",
    "Camel",
    "CurrentOut",
    "InvitationCreatedOut",
    "InvitationOut",
    "InvitationPreviewOut",
    "InvitationStatus",
    "InvitationsOut",
    "KeyCreatedOut",
    "KeyKindName",
    "KeyOut",
    "KeyRotatedOut",
    "KeysOut",
    "LoginOut",
    "MemberOut",
    "MembersOut",
    "OrgOut",
    "PasswordChangedOut",
    "ResetDoneOut",
    "ResetPreviewOut",
    "RevokedOut",
    "RoleName",
    "SessionOut",
    "SessionsOut",
    "SuccessOut",
    "Timestamp",
    "UserOut",
    "UserRef",
]
