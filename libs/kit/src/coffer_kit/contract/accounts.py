"""auth's dashboard API responses (JSON in camelCase): one definition, for auth that answers
and for edge that reads them (``services/auth/INTERNAL_API.md`` describes the endpoints)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from coffer_kit.contract.timeutil import isoformat

# The contract's timestamps: ISO 8601 UTC with milliseconds and Z (SQLite hands back naive UTC).
Timestamp = Annotated[datetime, PlainSerializer(isoformat, return_type=str)]

RoleName = Literal["owner", "member"]
KeyKindName = Literal["organization", "user"]
InvitationStatus = Literal["pending", "expired", "accepted", "revoked"]
ActorType = Literal["user", "operator", "key", "token", "system"]


class Camel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class UserOut(Camel):
    id: str
    email: str
    created_at: Timestamp
    email_verified_at: Timestamp | None
    password_changed_at: Timestamp | None


class UserRef(Camel):
    id: str
    email: str


class OrgOut(Camel):
    """An organization as the caller sees it: with the caller's role."""

    id: str
    name: str
    role: RoleName
    quota_bytes: int
    created_at: Timestamp
    member_count: int
    # CONTRACT §12: what uploads that do not say become.
    default_visibility: Literal["public", "private"] = "public"
    # Safe ingest (issue 48): detected types recorded or enforced, the allowed list, scanning.
    ingest_mode: Literal["record", "enforce"] = "record"
    allowed_types: list[str] | None = None
    scan_mode: Literal["off", "async", "block"] = "off"
    # Issue 47: days a deleted asset stays in the trash (0: deletes are final).
    trash_retention_days: int = 0


class SessionOut(Camel):
    id: str
    created_at: Timestamp
    last_seen_at: Timestamp
    authenticated_at: Timestamp
    # The absolute end; the idle end is lastSeenAt + idleSeconds (lastSeenAt moves once a minute).
    expires_at: Timestamp
    idle_expires_at: Timestamp
    # Until then the session may mint keys, change credentials, roles and sessions.
    reauth_until: Timestamp
    ip: str | None
    user_agent: str | None
    last_org_id: str | None
    current: bool


class LoginOut(Camel):
    """A new session. ``token`` is the cookie value: returned here once, stored only hashed."""

    token: str
    csrf_token: str
    session: SessionOut
    user: UserOut
    # A sign-in from a browser the account did not know: the token its device cookie keeps
    # (returned once; None when the browser's cookie stays as it is).
    device_token: str | None = None


class CurrentOut(Camel):
    session: SessionOut
    csrf_token: str
    user: UserOut
    organizations: list[OrgOut]
    # Present when x-organization-id was sent (and the user is a member of it).
    organization: OrgOut | None


class SessionsOut(Camel):
    sessions: list[SessionOut]


class RevokedOut(Camel):
    revoked: int


class PasswordChangedOut(LoginOut):
    """A password change re-authenticates: a new session replaces the one that made it."""

    revoked: int


class SuccessOut(Camel):
    success: bool = True


class MemberOut(Camel):
    user_id: str
    email: str
    role: RoleName
    joined_at: Timestamp


class MembersOut(Camel):
    members: list[MemberOut]


class InvitationOut(Camel):
    id: str
    organization_id: str
    email: str
    role: RoleName
    status: InvitationStatus
    created_at: Timestamp
    expires_at: Timestamp
    accepted_at: Timestamp | None
    revoked_at: Timestamp | None
    invited_by: UserRef | None
    accepted_by: UserRef | None


class InvitationsOut(Camel):
    invitations: list[InvitationOut]


class InvitationCreatedOut(Camel):
    """The link is returned once; only the token's SHA-256 is stored."""

    token: str
    url: str
    invitation: InvitationOut


class InvitationPreviewOut(Camel):
    """What the invite page shows before the invitee acts."""

    id: str
    organization_id: str
    organization_name: str
    email: str
    role: RoleName
    status: InvitationStatus
    expires_at: Timestamp
    invited_by: UserRef | None


class KeyOut(Camel):
    id: str
    name: str
    kind: KeyKindName
    prefix: str
    organization_id: str
    organization_name: str
    user: UserRef | None  # the owner of a personal key
    created_at: Timestamp
    created_by: UserRef | None  # who made it (null: the operator, or a deleted user)
    expires_at: Timestamp | None
    last_used_at: Timestamp | None
    # Issue 46: as given, the actions they allow, the subtree, the networks, and all in words.
    scopes: list[str] = Field(default_factory=lambda: ["full"])
    actions: list[str] = Field(default_factory=list)
    folder_id: str | None = None
    networks: list[str] = Field(default_factory=list)
    description: str = ""


class KeysOut(Camel):
    keys: list[KeyOut]


class KeyCreatedOut(Camel):
    """The full key is returned once; only its SHA-256 is stored."""

    key: str
    api_key: KeyOut


class KeyRotatedOut(Camel):
    key: str
    api_key: KeyOut
    # The old key with its new expiry, or null when the grace was 0 (deleted at once).
    previous: KeyOut | None


class AuditEventOut(Camel):
    id: int
    organization_id: str | None
    actor_type: ActorType
    actor_id: str | None
    actor_label: str | None
    action: str
    target_type: str | None
    target_id: str | None
    target_label: str | None
    ip: str | None
    user_agent: str | None
    request_id: str | None
    details: dict[str, Any] | None
    created_at: Timestamp


class AuditPageOut(Camel):
    events: list[AuditEventOut]
    # Pass as ``before`` for the next (older) page; null on the last page.
    next_before: str | None


class ResetPreviewOut(Camel):
    email: str
    expires_at: Timestamp


class ResetDoneOut(Camel):
    user_id: str
    email: str
    revoked_sessions: int
