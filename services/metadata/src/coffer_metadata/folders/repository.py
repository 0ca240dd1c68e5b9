"""Folder queries. Every query that reads or writes data is scoped by organization."""

from __future__ import annotations

from sqlalchemy import select as sa_select
from sqlalchemy import update
from sqlmodel import Session, col, delete, select

from coffer_metadata.models import Asset, Folder


def owner_of(session: Session, folder_id: str) -> str | None:
    """The organization a folder belongs to, if it exists: tells 403 from 404, reads nothing else."""
    return session.exec(select(Folder.organization_id).where(Folder.id == folder_id)).first()


def get(session: Session, *, org_id: str, folder_id: str) -> Folder | None:
    return session.exec(
        select(Folder).where(Folder.organization_id == org_id, Folder.id == folder_id)
    ).first()


def children(session: Session, *, org_id: str, parent_id: str | None) -> list[Folder]:
    """Direct children of ``parent_id`` (root when None), by name then id."""
    parent = col(Folder.parent_id).is_(None) if parent_id is None else Folder.parent_id == parent_id
    return list(
        session.exec(
            select(Folder)
            .where(Folder.organization_id == org_id, parent)
            .order_by(col(Folder.name), col(Folder.id))
        )
    )


def sibling_named(session: Session, *, org_id: str, parent_id: str | None, name: str) -> bool:
    parent = col(Folder.parent_id).is_(None) if parent_id is None else Folder.parent_id == parent_id
    found = session.exec(
        select(Folder.id).where(Folder.organization_id == org_id, parent, Folder.name == name)
    ).first()
    return found is not None


def delete_tree(session: Session, *, org_id: str, folder_id: str) -> None:
    """Delete a folder and all its descendants; their assets move to root."""
    tree = (
        sa_select(col(Folder.id))
        .where(Folder.organization_id == org_id, Folder.id == folder_id)
        .cte("tree", recursive=True)
    )
    tree = tree.union_all(
        sa_select(col(Folder.id)).where(Folder.organization_id == org_id, Folder.parent_id == tree.c.id)
    )
    ids = sa_select(tree.c.id)
    session.exec(  # type: ignore[call-overload]
        update(Asset)
        .where(col(Asset.organization_id) == org_id, col(Asset.folder_id).in_(ids))
        .values(folder_id=None)
    )
    session.exec(  # type: ignore[call-overload]
        delete(Folder).where(col(Folder.organization_id) == org_id, col(Folder.id).in_(ids))
    )
