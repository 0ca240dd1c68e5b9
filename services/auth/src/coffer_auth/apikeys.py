"""API keys as the dashboard and the CLI manage them: who may see, create, delete and rotate
which keys, with an audit event for each change. Resolving a key stays in ``service``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import func, or_, update
from sqlalchemy.orm import aliased
from sqlmodel import Session, col, select

from coffer_auth import audit, grants
from coffer_auth.audit import Actor
from coffer_auth.keys import display_prefix, generate_key, hash_key
from coffer_auth.models import MAX_LINEAGE, ApiKey, KeyKind, KeyUse, Membership, Organization, Role, User
from coffer_auth.schemas import KeyKindName, KeyOut, UserRef
from coffer_kit.contract import scopes
from coffer_kit.contract.errors import conflict, forbidden, invalid, not_found
from coffer_kit.contract.ids import KEY, new_id
from coffer_kit.contract.limits import MAX_KEY_LIFETIME_DAYS, MAX_KEYS_PER_ORG
from coffer_kit.contract.timeutil import as_utc, isoformat, utcnow


def _ref(user: User | None) -> UserRef | None:
    return UserRef(id=user.id, email=user.email) if user else None


def view(row: ApiKey, org: Organization, owner: User | None, creator: User | None) -> KeyOut:
    return KeyOut(
        id=row.id,
        name=row.name,
        kind=cast(KeyKindName, row.kind),
        prefix=row.prefix,
        organization_id=row.organization_id,
        organization_name=org.name,
        user=_ref(owner),
        created_at=row.created_at,
        created_by=_ref(creator),
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        scopes=row.scopes.split(),
        actions=scopes.ordered(scopes.expand(row.scopes.split())),
        folder_id=row.folder_id,
        networks=row.networks.split(),
        description=scopes.describe(
            scopes.expand(row.scopes.split()), folder=row.folder_id, networks=row.networks.split()
        ),
    )


def makers_folders(session: Session, key: ApiKey) -> list[str]:
    """The folders of the keys that made ``key`` (its maker's, then that key's maker's...),
    nearest first, each once: a key made by a subtree key reaches its own folder only while
    that folder lies in each of these (docs/api.md, "Keys made by keys"). A folder moved out of
    a maker's subtree is the maker's no longer, nor any key it made."""
    folders: list[str] = []
    seen = {key.id}
    parent_id = key.parent_key_id
    while parent_id is not None and parent_id not in seen:  # (a tree; bounded all the same)
        seen.add(parent_id)
        parent = session.get(ApiKey, parent_id)
        if parent is None:
            break
        if (
            parent.folder_id is not None
            and parent.folder_id not in folders
            and parent.folder_id != key.folder_id
        ):
            folders.append(parent.folder_id)
        parent_id = parent.parent_key_id
    return folders


def _details(row: ApiKey) -> dict[str, Any]:
    return {
        "kind": row.kind,
        "prefix": row.prefix,
        "name": row.name,
        "expiresAt": isoformat(row.expires_at) if row.expires_at else None,
        "scopes": row.scopes.split(),
        "folderId": row.folder_id,
        "networks": row.networks.split(),
    }


def _query() -> Any:
    owner, creator = aliased(User), aliased(User)
    return (
        select(ApiKey, Organization, owner, creator)
        .join(Organization, col(Organization.id) == ApiKey.organization_id)
        .outerjoin(owner, col(owner.id) == ApiKey.user_id)
        .outerjoin(creator, col(creator.id) == ApiKey.created_by_user_id)
        .order_by(col(ApiKey.created_at).desc(), col(ApiKey.id).desc())
    )


def org_keys(session: Session, *, org_id: str, viewer_id: str, viewer_role: str) -> list[KeyOut]:
    """Every key that can act in an organization, with its last use there: the organization's
    keys and its members' personal keys, wherever they were made (a personal key acts in every
    organization of its user). Owners see them all; members the organization keys and their own."""
    members = select(Membership.user_id).where(Membership.organization_id == org_id)
    org_key = (col(ApiKey.kind) == KeyKind.organization.value) & (col(ApiKey.organization_id) == org_id)
    personal = (col(ApiKey.kind) == KeyKind.user.value) & col(ApiKey.user_id).in_(members)
    if viewer_role != Role.owner:
        personal = personal & (col(ApiKey.user_id) == viewer_id)
    query = (
        _query()
        .add_columns(KeyUse.last_used_at)
        .outerjoin(KeyUse, (col(KeyUse.key_id) == ApiKey.id) & (col(KeyUse.organization_id) == org_id))
        .where(or_(org_key, personal))
    )
    here = session.get(Organization, org_id)
    # lastUsedAt on an organization's page is the use made in it.
    return [
        as_seen_in(view(row, org, owner, creator), row, here, viewer_id).model_copy(
            update={"last_used_at": used_here}
        )
        for row, org, owner, creator, used_here in session.exec(query)
    ]


def as_seen_in(out: KeyOut, row: ApiKey, here: Organization | None, viewer_id: str) -> KeyOut:
    """Another member's personal key made in another of their organizations shows as made in
    ``here``: which other organizations a member belongs to is not this one's owners' to learn."""
    if here is None or row.organization_id == here.id or row.user_id == viewer_id:
        return out
    return out.model_copy(update={"organization_id": here.id, "organization_name": here.name})


def user_keys(session: Session, *, user_id: str) -> list[KeyOut]:
    """A user's personal keys in every organization."""
    query = _query().where(ApiKey.user_id == user_id, ApiKey.kind == KeyKind.user.value)
    return [view(*row) for row in session.exec(query)]


def create(
    session: Session,
    actor: Actor,
    *,
    org: Organization,
    kind: KeyKind,
    user_id: str | None,
    name: str,
    expires_in: int | None,
    created_by: str | None,
    scope_names: Sequence[str] | None = None,
    folder_id: str | None = None,
    networks: Sequence[str] | None = None,
    parent: ApiKey | None = None,
) -> tuple[ApiKey, str]:
    """A new key and its secret (returned once; only the SHA-256 is kept), with its scopes
    (issue 46; default ``full``), which never change afterwards; made by the key ``parent``
    (the key API), it dies with that key."""
    stored_scopes = scopes.normalize(scope_names)
    stored_networks = scopes.parse_networks(networks)
    if expires_in is not None and expires_in <= 0:
        raise invalid("The expiry must be in the future (expiresIn > 0).", field="expiresIn")
    if expires_in is not None and expires_in > MAX_KEY_LIFETIME_DAYS * 86400:
        raise invalid(f"The expiry must be within {MAX_KEY_LIFETIME_DAYS} days.", field="expiresIn")
    if kind == KeyKind.user:
        if user_id is None:
            raise invalid("A personal key needs its user.", field="user")
        member = session.exec(
            select(Membership).where(Membership.organization_id == org.id, Membership.user_id == user_id)
        ).first()
        if member is None:
            raise invalid(f"User {user_id} is not a member of {org.id}.", field="user")
    else:
        user_id = None
    name = name.strip()
    if len(name) > 255:
        raise invalid("The name must be at most 255 characters.", field="name")
    require_room(session, org)
    secret = generate_key(kind.value)
    now = utcnow()
    row = ApiKey(
        id=new_id(KEY),
        key_hash=hash_key(secret),
        prefix=display_prefix(secret),
        kind=kind.value,
        name=name,
        organization_id=org.id,
        user_id=user_id,
        created_at=now,
        expires_at=now + timedelta(seconds=expires_in) if expires_in else None,
        created_by_user_id=created_by,
        scopes=" ".join(stored_scopes),
        folder_id=folder_id,
        networks=" ".join(stored_networks),
        parent_key_id=parent.id if parent is not None else None,
    )
    session.add(row)
    session.flush()
    _audit(session, actor, "key.created", row, _details(row))
    return row, secret


def get(session: Session, *, org_id: str, key_id: str) -> ApiKey:
    """A key that can act in the organization: one of its organization keys, or a personal key
    of one of its members; anything else is 404."""
    row = session.get(ApiKey, key_id)
    if row is not None and row.kind == KeyKind.organization and row.organization_id == org_id:
        return row
    if row is not None and row.kind == KeyKind.user:
        member = session.exec(
            select(Membership).where(Membership.organization_id == org_id, Membership.user_id == row.user_id)
        ).first()
        if member is not None:
            return row
    raise not_found(f"Key {key_id} does not exist.")


def require_manage(row: ApiKey, *, user_id: str, role: str) -> None:
    """Owners manage their organization's keys; a personal key is managed by its own user only.

    A personal key acts in every organization of its user, so an owner of one organization
    who could rotate it would be handed a key to the others (issue 23). An owner cuts a
    member's access by removing the member: their personal keys stop acting here."""
    if row.kind == KeyKind.user:
        if row.user_id == user_id:
            return
        if role == Role.owner:
            raise forbidden(
                "A personal key is managed by its own user only; remove the member to cut their access."
            )
        raise not_found(f"Key {row.id} does not exist.")  # another member's key: not theirs to see
    if role != Role.owner:
        raise forbidden("Only an owner can change organization keys.")


def _audit(session: Session, actor: Actor, action: str, key: ApiKey, details: dict[str, Any]) -> None:
    """A change of ``key``, in the audit log of the key's own organization (whichever
    organization's page made it)."""
    audit.record(
        session,
        actor,
        action,
        organization_id=key.organization_id,
        target_type="key",
        target_id=key.id,
        target_label=key.name or key.prefix,
        details=details,
    )


def delete(session: Session, actor: Actor, *, row: ApiKey, because: dict[str, Any] | None = None) -> None:
    """Delete a key, and the keys it made (and theirs), each audited (with ``because``, when
    it is not the caller's choice); edges stop accepting them within their cache bound (5 s),
    blob the URLs signed under them once edge relays their revocations (``grants``)."""
    doomed, frontier = [row], [row.id]
    while frontier:  # (a tree: each key made by one key, before it)
        made = list(session.exec(select(ApiKey).where(col(ApiKey.parent_key_id).in_(frontier))))
        doomed += made
        frontier = [key.id for key in made]
    grants.keys_deleted(session, doomed)
    for key in reversed(doomed):  # the youngest first: no key is left whose parent is gone
        details = {**_details(key), **(because or {})}
        if key is not row:
            details["parentKeyId"] = key.parent_key_id  # deleted with the key that made it
        session.delete(key)
        session.flush()
        _audit(session, actor, "key.deleted", key, details)


def made_by_personal_keys(session: Session, *, user_id: str, org_id: str) -> list[ApiKey]:
    """The organization keys of ``org_id`` that a personal key of ``user_id`` made through the
    key API, which only an owner's key may. A personal key makes personal keys of its own user
    and an organization key only keys of its organization, so these are the organization's
    keys whose makers lead to that user, less the keys they made (deleting them takes those)."""
    personal = select(ApiKey.id).where(ApiKey.user_id == user_id, ApiKey.kind == KeyKind.user.value)
    return list(
        session.exec(
            select(ApiKey).where(
                ApiKey.kind == KeyKind.organization.value,
                ApiKey.organization_id == org_id,
                col(ApiKey.parent_key_id).in_(personal),
            )
        )
    )


def ancestors(session: Session, key: ApiKey) -> set[str]:
    """The ids of the keys that made ``key``: its maker, that key's maker, and so on, each with
    the keys it replaced (one still in its grace is the same authority)."""
    found: set[str] = set()
    parent_id = key.parent_key_id
    while parent_id is not None and parent_id not in found and parent_id != key.id:  # (a tree)
        found.add(parent_id)
        parent = session.get(ApiKey, parent_id)
        if parent is None:
            break
        found.update(parent.lineage())
        parent_id = parent.parent_key_id
    return found


def require_room(session: Session, org: Organization) -> None:
    """409 at the organization's bound of keys, however the key is made (the key API, the
    dashboard, the operator's CLI). Its row is locked first, so that keys made at once are
    counted one after another (PostgreSQL; SQLite writes one at a time anyway)."""
    session.exec(select(Organization).where(Organization.id == org.id).with_for_update()).first()
    # A personal key counts while its user is a member: one who left keeps keys nobody here
    # can see or delete (they act nowhere here), which must not fill the organization's room.
    member = (
        select(Membership.user_id)
        .where(Membership.organization_id == org.id, Membership.user_id == ApiKey.user_id)
        .exists()
    )
    count = session.exec(
        select(func.count())
        .select_from(ApiKey)
        .where(ApiKey.organization_id == org.id, or_(col(ApiKey.user_id).is_(None), member))
    ).one()
    if count >= MAX_KEYS_PER_ORG:
        raise conflict(f"An organization has at most {MAX_KEYS_PER_ORG} keys; delete one first.")


def rotate(
    session: Session,
    actor: Actor,
    *,
    org: Organization,
    row: ApiKey,
    grace_seconds: int,
    created_by: str | None,
) -> tuple[ApiKey, str, ApiKey | None]:
    """A replacement key (same kind, name, owner and lifetime) and the old one ending after
    the grace: (new row, its secret, the old row or None when it was deleted at once)."""
    if not 0 <= grace_seconds <= 604800:
        raise invalid("graceSeconds must be 0 to 604800.", field="graceSeconds")
    home = org if org.id == row.organization_id else session.get(Organization, row.organization_id)
    assert home is not None  # (a key's organization is never deleted)
    if grace_seconds > 0:  # the old key stays for its grace: one key more meanwhile, in its own
        require_room(session, home)  # organization, whichever organization's page rotates it
    lifetime: int | None = None
    if row.expires_at is not None:
        lifetime = max(1, int((as_utc(row.expires_at) - as_utc(row.created_at)).total_seconds()))
    now = utcnow()
    new, secret = _replacement(session, old=row, lifetime=lifetime, created_by=created_by, now=now)
    # The keys it made follow it: a rotation replaces a key's secret, it ends no authority.
    session.exec(update(ApiKey).where(col(ApiKey.parent_key_id) == row.id).values(parent_key_id=new.id))
    old_details = _details(row)
    previous: ApiKey | None
    if grace_seconds == 0:
        session.delete(row)
        previous = None
    else:
        end: datetime = now + timedelta(seconds=grace_seconds)
        if row.expires_at is None or as_utc(row.expires_at) > end:
            row.expires_at = end
        session.add(row)
        previous = row
    session.flush()
    details = {
        **old_details,
        "graceSeconds": grace_seconds,
        "oldExpiresAt": isoformat(row.expires_at) if previous and row.expires_at else None,
        "newKeyId": new.id,
        "newPrefix": new.prefix,
    }
    _audit(session, actor, "key.rotated", row, details)
    return new, secret, previous


def _replacement(
    session: Session,
    *,
    old: ApiKey,
    lifetime: int | None,
    created_by: str | None,
    now: datetime,
) -> tuple[ApiKey, str]:
    secret = generate_key(old.kind)
    new = ApiKey(
        id=new_id(KEY),
        key_hash=hash_key(secret),
        prefix=display_prefix(secret),
        kind=old.kind,
        name=old.name,
        organization_id=old.organization_id,
        user_id=old.user_id,
        created_at=now,
        expires_at=now + timedelta(seconds=lifetime) if lifetime else None,
        created_by_user_id=created_by,
        # A rotation keeps the scopes (issue 46): the new key can do what the old one could.
        scopes=old.scopes,
        folder_id=old.folder_id,
        networks=old.networks,
        parent_key_id=old.parent_key_id,  # (made by a key, it still dies with that key)
        rotated_from_key_id=old.id,  # (its upload tokens and uploads follow it here)
        replaced_key_ids=" ".join(old.lineage()[:MAX_LINEAGE]),  # (their signed URLs too)
    )
    session.add(new)
    session.flush()
    return new, secret


def view_of(
    session: Session, row: ApiKey, *, here: Organization | None = None, viewer_id: str = ""
) -> KeyOut:
    org = session.get(Organization, row.organization_id)
    assert org is not None
    owner = session.get(User, row.user_id) if row.user_id else None
    creator = session.get(User, row.created_by_user_id) if row.created_by_user_id else None
    return as_seen_in(view(row, org, owner, creator), row, here, viewer_id)
