"""Folder operations (docs/contract.md §4–5)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from coffer_kit.contract.errors import CofferError, conflict, folder_cycle, forbidden, not_found
from coffer_kit.contract.ids import FOLDER, is_folder_id, new_id
from coffer_kit.contract.limits import MAX_FOLDER_CHILDREN, MAX_FOLDER_DEPTH
from coffer_kit.contract.names import normalize_name
from coffer_kit.contract.timeutil import isoformat, utcnow
from coffer_kit.contract.wire import Actor
from coffer_metadata import events
from coffer_metadata.folders import repository
from coffer_metadata.models import Folder


class Unset:
    """A field the request did not send (``parentId`` absent, unlike ``parentId: null``)."""


UNSET = Unset()


def view(folder: Folder) -> dict[str, Any]:
    """A folder as the contract writes it."""
    return {
        "id": folder.id,
        "organizationId": folder.organization_id,
        "parentId": folder.parent_id,
        "name": folder.name,
        "createdAt": isoformat(folder.created_at),
        "updatedAt": isoformat(folder.updated_at),
        "expiryDays": folder.expiry_days,
    }


def require_folder(session: Session, *, org_id: str, folder_id: str) -> Folder:
    """The organization's folder ``folder_id``; 403 if it is another's, 404 if none."""
    if not is_folder_id(folder_id):
        raise not_found(f"Folder {folder_id!r} does not exist.")
    folder = repository.get(session, org_id=org_id, folder_id=folder_id)
    if folder is not None:
        return folder
    raise missing_folder(folder_id, owner=repository.owner_of(session, folder_id))


def missing_folder(folder_id: str, *, owner: str | None) -> CofferError:
    """Why an organization has no folder ``folder_id``: 403 if ``owner`` (another) has it, 404 if none."""
    if owner is not None:
        return forbidden(f"Folder {folder_id} belongs to another organization.")
    return not_found(f"Folder {folder_id} does not exist.")


def check_folder(session: Session, *, org_id: str, folder_id: str) -> None:
    """``require_folder`` without loading the folder: for callers that only need it to exist."""
    if not (is_folder_id(folder_id) and repository.exists(session, org_id=org_id, folder_id=folder_id)):
        require_folder(session, org_id=org_id, folder_id=folder_id)


def get_with_path(session: Session, *, org_id: str, folder_id: str) -> dict[str, Any]:
    """The folder as the contract writes it, plus ``path``: root folder first, this one last."""
    folder = require_folder(session, org_id=org_id, folder_id=folder_id)
    path = repository.ancestry(session, org_id=org_id, folder_id=folder.id)
    return {**view(folder), "path": [{"id": i, "name": n} for i, n in path]}


def list_children(session: Session, *, org_id: str, parent_id: str | None) -> list[Folder]:
    """Children of a folder, or root folders."""
    if parent_id is not None:
        check_folder(session, org_id=org_id, folder_id=parent_id)
    return repository.children(session, org_id=org_id, parent_id=parent_id)


def create(
    session: Session,
    *,
    org_id: str,
    name: str,
    parent_id: str | None,
    actor: Actor,
    expiry_days: int | None = None,
) -> Folder:
    """Create a folder (with its event); 409 if a sibling has the same name."""
    name = normalize_name(name)
    if parent_id is not None:
        # In turns with moves: a move measures the moved subtree's height under this lock, and
        # a create beside it that measured its parent's depth outside it made a folder 101 deep.
        repository.lock_tree(session, org_id=org_id)
        check_folder(session, org_id=org_id, folder_id=parent_id)
        _fits(len(repository.ancestry(session, org_id=org_id, folder_id=parent_id)) + 1)

    def duplicate() -> CofferError:
        return conflict(f"A folder named '{name}' already exists here.")

    if repository.sibling_named(session, org_id=org_id, parent_id=parent_id, name=name):
        raise duplicate()
    _has_room(session, org_id=org_id, parent_id=parent_id)
    now = utcnow()
    folder = Folder(
        id=new_id(FOLDER),
        organization_id=org_id,
        parent_id=parent_id,
        name=name,
        created_at=now,
        updated_at=now,
        expiry_days=expiry_days,
    )
    try:
        with session.begin_nested():
            session.add(folder)
    except IntegrityError:
        # A concurrent request created the same name, or deleted the parent, in between.
        if parent_id is not None and repository.get(session, org_id=org_id, folder_id=parent_id) is None:
            raise not_found(f"Folder {parent_id} does not exist.") from None
        raise duplicate() from None
    events.record(session, org_id=org_id, type="folder.created", data=view(folder), actor=actor, now=now)
    return folder


def _has_room(session: Session, *, org_id: str, parent_id: str | None) -> None:
    """409 when the parent already holds MAX_FOLDER_CHILDREN folders (its listing answers them
    all at once). Two creates at once may each pass: the bound is meant for the size of one
    answer, which one more folder does not change."""
    if repository.child_count(session, org_id=org_id, parent_id=parent_id) >= MAX_FOLDER_CHILDREN:
        where = "The root" if parent_id is None else f"Folder {parent_id}"
        raise conflict(f"{where} holds {MAX_FOLDER_CHILDREN:,} folders, the most one folder may hold.")


def _fits(depth: int) -> None:
    """409 for a folder, or a folder's deepest subfolder, that would be past the bound."""
    if depth > MAX_FOLDER_DEPTH:
        raise conflict(f"Folders nest at most {MAX_FOLDER_DEPTH} deep; this would make {depth}.")


def _conflict(name: str) -> CofferError:
    return conflict(f"A folder named '{name}' already exists here.")


def update(
    session: Session,
    *,
    org_id: str,
    folder_id: str,
    name: str | None,
    parent_id: str | Unset | None,
    actor: Actor,
    expiry_days: int | Unset | None = UNSET,
) -> Folder:
    """Rename and/or move a folder, and/or change its default expiry, in this transaction (with
    its event); a move into its own subtree is 409."""
    moving = not isinstance(parent_id, Unset)
    if moving:
        repository.lock_tree(session, org_id=org_id)
    folder = require_folder(session, org_id=org_id, folder_id=folder_id)
    new_name = normalize_name(name) if name is not None else folder.name
    new_parent = parent_id if not isinstance(parent_id, Unset) else folder.parent_id
    if moving and new_parent is not None:
        check_folder(session, org_id=org_id, folder_id=new_parent)
        path = repository.ancestry(session, org_id=org_id, folder_id=new_parent)
        if folder.id in {i for i, _ in path}:
            raise folder_cycle(f"Folder {folder.id} cannot move into itself or one of its subfolders.")
        if new_parent != folder.parent_id:  # (the walk up is whole only within the bound)
            _fits(len(path) + repository.height(session, org_id=org_id, folder_id=folder.id))
    if moving and new_parent != folder.parent_id:
        _has_room(session, org_id=org_id, parent_id=new_parent)
    new_days = folder.expiry_days if isinstance(expiry_days, Unset) else expiry_days
    changes = {
        field: old
        for field, new, old in (
            ("name", new_name, folder.name),
            ("parentId", new_parent, folder.parent_id),
            ("expiryDays", new_days, folder.expiry_days),
        )
        if new != old
    }
    if not changes:
        return folder
    if repository.sibling_named(
        session, org_id=org_id, parent_id=new_parent, name=new_name, other_than=folder.id
    ):
        raise _conflict(new_name)
    folder.name, folder.parent_id, folder.updated_at = new_name, new_parent, utcnow()
    folder.expiry_days = new_days
    try:
        with session.begin_nested():
            session.add(folder)
    except IntegrityError:
        # A concurrent rename or create took the name in between (a move's parent cannot vanish:
        # deletes take the same lock).
        raise _conflict(new_name) from None
    if "parentId" in changes:
        from coffer_metadata.webhooks import service as webhooks  # (it checks folders: imported late)

        # Who reaches the webhooks limited to the moved subtree moves with it: what they sent
        # before is not for the keys that reach them now.
        webhooks.rescope(session, org_id=org_id, folder_ids=repository.tree_ids(org_id, folder.id))
    _updated(session, org_id=org_id, folder=folder, actor=actor, changes=changes)
    return folder


def _updated(session: Session, *, org_id: str, folder: Folder, actor: Actor, changes: dict[str, Any]) -> None:
    events.record(
        session,
        org_id=org_id,
        type="folder.updated",
        data=view(folder),
        actor=actor,
        changes=changes,
        now=folder.updated_at,
    )


def delete_tree(
    session: Session, *, org_id: str, folder_id: str, actor: Actor, assets_to: str | None = None
) -> None:
    """Delete a folder and its subfolders in this transaction, one event each; their assets
    move to root, or to ``assets_to`` (without an event each: ``folder.deleted`` says so for
    all of them)."""
    repository.lock_tree(session, org_id=org_id)
    check_folder(session, org_id=org_id, folder_id=folder_id)
    now = utcnow()
    for folder in repository.subtree(session, org_id=org_id, folder_id=folder_id):
        events.record(session, org_id=org_id, type="folder.deleted", data=view(folder), actor=actor, now=now)
    repository.delete_tree(session, org_id=org_id, folder_id=folder_id, assets_to=assets_to)
