"""Folder queries. Every query that reads or writes data is scoped by organization."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import func, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, delete, select

from coffer_kit.contract.limits import MAX_FOLDER_DEPTH
from coffer_kit.db import take_turns
from coffer_metadata.models import Asset, Folder

# Deeper than any real tree; bounds the walks up and down the parent links.
MAX_DEPTH = 10_000


_folders = Folder.__table__  # type: ignore[attr-defined]
# Built once: an upload into a folder asks this inside its commit, where an ORM query and
# the Folder it loads cost more than the rest of the commit's statements together.
_EXISTS = sa_select(sa.literal(1)).where(
    _folders.c.organization_id == sa.bindparam("p_org"), _folders.c.id == sa.bindparam("p_id")
)


def exists(session: Session, *, org_id: str, folder_id: str) -> bool:
    """Whether the organization has the folder ``folder_id``."""
    params = {"p_org": org_id, "p_id": folder_id}
    return session.connection().execute(_EXISTS, params).first() is not None


def owner_of(session: Session, folder_id: str) -> str | None:
    """The organization a folder belongs to, if it exists: tells 403 from 404, reads nothing else."""
    return session.exec(select(Folder.organization_id).where(Folder.id == folder_id)).first()


def get(session: Session, *, org_id: str, folder_id: str) -> Folder | None:
    return session.exec(
        select(Folder).where(col(Folder.organization_id) == org_id, col(Folder.id) == folder_id)
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


def height(session: Session, *, org_id: str, folder_id: str) -> int:
    """Levels from the folder down to its deepest descendant, the folder's own counted (1: it
    has no subfolder); at most ``MAX_FOLDER_DEPTH`` + 1, where the walk stops."""
    down = (
        sa_select(col(Folder.id), sa.literal(1).label("level"))
        .where(col(Folder.organization_id) == org_id, col(Folder.id) == folder_id)
        .cte("down", recursive=True)
    )
    down = down.union_all(
        sa_select(col(Folder.id), (down.c.level + 1).label("level")).where(
            col(Folder.organization_id) == org_id,
            col(Folder.parent_id) == down.c.id,
            down.c.level <= MAX_FOLDER_DEPTH,
        )
    )
    found = session.connection().execute(sa_select(sa.func.max(down.c.level))).scalar()
    return int(found or 0)


def ancestry(session: Session, *, org_id: str, folder_id: str) -> list[tuple[str, str]]:
    """``(id, name)`` of the folder and its ancestors, from the root folder down to it."""
    return ancestries(session, org_id=org_id, folder_ids=[folder_id]).get(folder_id, [])


def ancestries(session: Session, *, org_id: str, folder_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
    """``ancestry`` of each folder (a folder that does not exist is left out), in one recursive
    query up the parent links; the depth bound stops a (never expected) cycle from looping forever.
    """
    if not folder_ids:
        return {}
    up = (
        sa_select(
            col(Folder.id).label("start"),
            col(Folder.id),
            col(Folder.name),
            col(Folder.parent_id),
            sa.literal(0).label("depth"),
        )
        .where(col(Folder.organization_id) == org_id, col(Folder.id).in_(folder_ids))
        .cte("up", recursive=True)
    )
    up = up.union_all(
        sa_select(
            up.c.start,
            col(Folder.id),
            col(Folder.name),
            col(Folder.parent_id),
            (up.c.depth + 1).label("depth"),
        ).where(
            col(Folder.organization_id) == org_id, col(Folder.id) == up.c.parent_id, up.c.depth < MAX_DEPTH
        )
    )
    query = sa_select(up.c.start, up.c.id, up.c.name).order_by(up.c.start, up.c.depth.desc())
    found: dict[str, list[tuple[str, str]]] = {}
    for row in session.connection().execute(query):
        found.setdefault(row.start, []).append((row.id, row.name))
    return found


def child_count(session: Session, *, org_id: str, parent_id: str | None) -> int:
    """How many folders ``parent_id`` (None: the root) holds."""
    parent = col(Folder.parent_id).is_(None) if parent_id is None else Folder.parent_id == parent_id
    query = select(func.count()).select_from(Folder).where(Folder.organization_id == org_id, parent)
    return int(session.exec(query).one())


def sibling_named(
    session: Session, *, org_id: str, parent_id: str | None, name: str, other_than: str | None = None
) -> bool:
    parent = col(Folder.parent_id).is_(None) if parent_id is None else Folder.parent_id == parent_id
    query = select(Folder.id).where(Folder.organization_id == org_id, parent, Folder.name == name)
    if other_than is not None:
        query = query.where(Folder.id != other_than)
    return session.exec(query).first() is not None


def lock_tree(session: Session, *, org_id: str) -> None:
    """Serialize the organization's tree changes (moves, deletes) until this transaction ends.

    A move checks "the destination is not inside me" and then writes: two moves that each pass
    that check alone (A into B, B into A) would together make a cycle. On PostgreSQL a
    transaction-scoped advisory lock per organization makes them take turns; on SQLite every
    write transaction holds the database's single write lock from BEGIN IMMEDIATE already.
    Without it, the 200-move race of tests/test_folder_moves.py leaves cycles on PostgreSQL.
    """
    take_turns(session.connection(), f"coffer-folders-{org_id}")


def tree_ids(org_id: str, folder_id: str) -> sa.Select[tuple[str]]:
    """The ids of a folder and all its descendants (one recursive query). UNION, not UNION ALL:
    a folder met again (a cycle, which moves refuse but nothing else could undo) ends the walk
    rather than loop for ever holding the write lock."""
    tree = (
        sa_select(col(Folder.id))
        .where(col(Folder.organization_id) == org_id, col(Folder.id) == folder_id)
        .cte("tree", recursive=True)
    )
    tree = tree.union(
        sa_select(col(Folder.id)).where(
            col(Folder.organization_id) == org_id, col(Folder.parent_id) == tree.c.id
        )
    )
    return sa_select(tree.c.id)


def subtree(session: Session, *, org_id: str, folder_id: str) -> list[Folder]:
    """A folder and all its descendants."""
    ids = tree_ids(org_id, folder_id)
    return list(
        session.exec(select(Folder).where(col(Folder.organization_id) == org_id, col(Folder.id).in_(ids)))
    )


def subtree_counts(session: Session, *, org_id: str, folder_id: str) -> tuple[int, int]:
    """(folders below the folder, assets in it and below): what deleting it touches."""
    ids = tree_ids(org_id, folder_id)
    folders = session.execute(sa_select(sa.func.count()).select_from(ids.subquery())).scalar_one()
    assets = session.execute(
        sa_select(sa.func.count())
        .select_from(Asset)
        .where(col(Asset.organization_id) == org_id, col(Asset.folder_id).in_(ids))
    ).scalar_one()
    return max(0, int(folders) - 1), int(assets)


def delete_tree(session: Session, *, org_id: str, folder_id: str, assets_to: str | None = None) -> None:
    """Delete a folder and all its descendants; their assets move to root (or ``assets_to``)."""
    ids = tree_ids(org_id, folder_id)
    session.exec(
        update(Asset)
        .where(col(Asset.organization_id) == org_id, col(Asset.folder_id).in_(ids))
        .values(folder_id=assets_to)
    )
    session.exec(delete(Folder).where(col(Folder.organization_id) == org_id, col(Folder.id).in_(ids)))
