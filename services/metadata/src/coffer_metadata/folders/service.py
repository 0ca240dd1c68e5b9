"""Folder operations (CONTRACT §4–5)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from coffer_kit.errors import CofferError, forbidden, not_found
from coffer_kit.ids import new_id
from coffer_kit.timeutil import isoformat, utcnow
from coffer_metadata.folders import repository
from coffer_metadata.models import Folder
from coffer_metadata.names import normalize_name


def view(folder: Folder) -> dict[str, Any]:
    """A folder as the contract writes it."""
    return {
        "id": folder.id,
        "organizationId": folder.organization_id,
        "parentId": folder.parent_id,
        "name": folder.name,
        "createdAt": isoformat(folder.created_at),
    }


def require_folder(session: Session, *, org_id: str, folder_id: str, field: str) -> Folder:
    """The organization's folder ``folder_id``; 403 if it is another's, 404 if none."""
    folder = repository.get(session, org_id=org_id, folder_id=folder_id)
    if folder is not None:
        return folder
    if repository.owner_of(session, folder_id) is not None:
        raise forbidden(f"Folder {folder_id} belongs to another organization.")
    raise not_found(f"Folder {folder_id} does not exist.")


def list_children(session: Session, *, org_id: str, parent_id: str | None) -> list[Folder]:
    """Children of a folder, or root folders."""
    if parent_id is not None:
        require_folder(session, org_id=org_id, folder_id=parent_id, field="parentId")
    return repository.children(session, org_id=org_id, parent_id=parent_id)


def create(session: Session, *, org_id: str, name: str, parent_id: str | None) -> Folder:
    """Create a folder; 409 if a sibling has the same name."""
    name = normalize_name(name)
    if parent_id is not None:
        require_folder(session, org_id=org_id, folder_id=parent_id, field="parentId")

    def conflict() -> CofferError:
        return CofferError(409, "conflict", f"A folder named '{name}' already exists here.")

    if repository.sibling_named(session, org_id=org_id, parent_id=parent_id, name=name):
        raise conflict()
    folder = Folder(
        id=new_id("fld"), organization_id=org_id, parent_id=parent_id, name=name, created_at=utcnow()
    )
    try:
        with session.begin_nested():
            session.add(folder)
    except IntegrityError:
        # A concurrent request created the same name, or deleted the parent, in between.
        if parent_id is not None and repository.get(session, org_id=org_id, folder_id=parent_id) is None:
            raise not_found(f"Folder {parent_id} does not exist.") from None
        raise conflict() from None
    return folder


def delete_tree(session: Session, *, org_id: str, folder_id: str) -> None:
    """Delete a folder and its subfolders in this transaction; their assets move to root."""
    require_folder(session, org_id=org_id, folder_id=folder_id, field="id")
    repository.delete_tree(session, org_id=org_id, folder_id=folder_id)
