"""A key confined to a folder subtree (issue 46): metadata answers such a call as if the
subtree's folder were the organization's root, in one place.

edge sends the folder with every call it makes for such a key (``coffer-subtree``). A folder
or asset outside the subtree is 404, as an unknown id is; "the root" (no parent, no folder)
means the subtree's folder; the folder itself cannot be renamed, moved or deleted (403).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session, col, select

from coffer_kit.contract.errors import forbidden, not_found
from coffer_kit.contract.ids import is_folder_id
from coffer_kit.contract.wire import SUBTREE_HEADER
from coffer_metadata.folders import repository
from coffer_metadata.models import Asset


def of_request(request: Request) -> str | None:
    """The subtree's folder the call is confined to, or None."""
    return request.headers.get(SUBTREE_HEADER) or None


SubtreeDep = Annotated[str | None, Depends(of_request)]


def inside(session: Session, *, org_id: str, root: str, folder_id: str) -> bool:
    """Whether a folder of the organization is ``root`` or lies below it."""
    if not is_folder_id(folder_id):
        return False
    return any(i == root for i, _ in repository.ancestry(session, org_id=org_id, folder_id=folder_id))


def in_turn(session: Session, *, org_id: str, root: str | None) -> None:
    """Before a subtree key's change is checked against its subtree: take the organization's
    tree lock (``repository.lock_tree``), which every move takes, so that the check and the
    change see the tree as it is when they write. Checked before the lock, on PostgreSQL a
    move out of the subtree that committed in between went unseen: the key deleted, or
    pulled back in, a folder or an asset the organization had just taken away from it."""
    if root is not None:
        repository.lock_tree(session, org_id=org_id)


def require_inside(session: Session, *, org_id: str, root: str | None, folder_id: str) -> None:
    """404 for a folder outside the subtree (nothing outside exists for the key)."""
    if root is not None and not inside(session, org_id=org_id, root=root, folder_id=folder_id):
        raise not_found(f"Folder {folder_id} does not exist.")


def folder_or_root(session: Session, *, org_id: str, root: str | None, folder_id: str | None) -> str | None:
    """Where "no folder" means the subtree's folder; a folder outside it is 404."""
    if root is None:
        return folder_id
    if folder_id is None:
        return root
    require_inside(session, org_id=org_id, root=root, folder_id=folder_id)
    return folder_id


def require_not_root(root: str | None, folder_id: str) -> None:
    """The key's own root folder can be read and filled, never renamed, moved or deleted."""
    if root is not None and folder_id == root:
        raise forbidden("This key's root folder cannot be renamed, moved or deleted by it.")


def require_asset_inside(session: Session, *, org_id: str, root: str | None, asset_id: str) -> None:
    """404 for an asset outside the subtree (at the organization's root, or in another folder);
    an unknown asset is left to the caller's own 404."""
    if root is None:
        return
    found = session.exec(
        select(Asset.folder_id).where(col(Asset.organization_id) == org_id, col(Asset.id) == asset_id)
    ).first()
    folder_id = found if isinstance(found, str) or found is None else None
    if folder_id is None or not inside(session, org_id=org_id, root=root, folder_id=folder_id):
        raise not_found(f"Asset {asset_id} does not exist.")
