"""Concurrent folder moves on SQLite and PostgreSQL: never a cycle, never an orphan."""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.limits import MAX_FOLDER_DEPTH
from coffer_kit.contract.wire import SYSTEM
from coffer_kit.db import writer
from coffer_metadata.folders import repository, service
from coffer_metadata.models import Folder

MOVES = 200


def assert_a_forest(engine: Engine, org: str) -> None:
    with Session(engine) as s:
        parents = {f.id: f.parent_id for f in s.exec(select(Folder).where(Folder.organization_id == org))}
    for start in parents:
        seen: set[str] = set()
        node: str | None = start
        while node is not None:
            assert node in parents, f"{start}: parent {node} is missing (an orphan)"
            assert node not in seen, f"{start}: a cycle through {node}"
            seen.add(node)
            node = parents[node]


def test_racing_moves_never_make_a_cycle(engine: Engine) -> None:
    org = new_id("org")
    with Session(writer(engine)) as s:
        made = [service.create(s, org_id=org, name=f"f{i}", parent_id=None, actor=SYSTEM) for i in range(12)]
        ids = [f.id for f in made]
        s.commit()
    rng = random.Random(14)
    # Pairs in both directions, so that many moves would close a cycle if two passed together.
    pairs = [tuple(rng.sample(ids, 2)) for _ in range(MOVES // 2)]
    moves = [p for a, b in pairs for p in ((a, b), (b, a))]
    outcomes: list[str] = []

    def move(pair: tuple[str, str]) -> None:
        folder_id, parent_id = pair
        try:
            with Session(writer(engine)) as s:
                move = {"folder_id": folder_id, "name": None, "parent_id": parent_id}
                service.update(s, org_id=org, actor=SYSTEM, **move)
                s.commit()
            outcomes.append("moved")
        except CofferError as exc:
            outcomes.append(exc.code)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(move, moves))
    assert len(outcomes) == MOVES
    assert set(outcomes) <= {"moved", "folder_cycle"}, set(outcomes)
    assert outcomes.count("moved") > 0 and outcomes.count("folder_cycle") > 0
    assert_a_forest(engine, org)


def test_folders_nest_at_most_max_folder_depth(engine: Engine) -> None:
    """A chain past metadata's walk up the parent links (10,000) let a move of its top under its
    bottom pass the cycle check: a loop with no root, the whole tree gone from every listing.
    Folders now nest at most MAX_FOLDER_DEPTH deep, by creation and by move (409)."""
    org = new_id("org")
    chain: list[str] = []
    with Session(writer(engine)) as s:
        for depth in range(1, MAX_FOLDER_DEPTH + 1):
            parent = chain[-1] if chain else None
            chain.append(service.create(s, org_id=org, name=f"d{depth}", parent_id=parent, actor=SYSTEM).id)
        other = service.create(s, org_id=org, name="other", parent_id=None, actor=SYSTEM).id
        service.create(s, org_id=org, name="child", parent_id=other, actor=SYSTEM)  # (2 high)
        s.commit()

    def refusal(change: Callable[[Session], object]) -> str | None:
        with Session(writer(engine)) as s:
            try:
                change(s)
            except CofferError as exc:
                return exc.code
            s.commit()
        return None

    assert (
        refusal(lambda s: service.create(s, org_id=org, name="x", parent_id=chain[-1], actor=SYSTEM))
        == "conflict"
    )
    move = {"org_id": org, "folder_id": other, "name": None, "actor": SYSTEM}
    assert refusal(lambda s: service.update(s, parent_id=chain[-2], **move)) == "conflict"
    assert refusal(lambda s: service.update(s, parent_id=chain[-3], **move)) is None  # exactly at the bound
    assert (
        refusal(
            lambda s: service.update(
                s, org_id=org, folder_id=chain[0], name=None, parent_id=other, actor=SYSTEM
            )
        )
        == "folder_cycle"
    )
    assert_a_forest(engine, org)


def test_a_cycle_left_in_the_tree_ends_every_walk_down(engine: Engine) -> None:
    """Should a cycle be in the database (moves refuse to make one), a walk down a folder's
    subtree (a delete, its counts, a recursive listing) ends rather than loop for ever."""
    org = new_id("org")
    with Session(writer(engine)) as s:
        a = service.create(s, org_id=org, name="a", parent_id=None, actor=SYSTEM).id
        b = service.create(s, org_id=org, name="b", parent_id=a, actor=SYSTEM).id
        s.commit()
    with engine.begin() as c:
        c.execute(text("UPDATE folders SET parent_id = :b WHERE id = :a"), {"a": a, "b": b})
    with Session(engine) as s:
        assert repository.subtree_counts(s, org_id=org, folder_id=a) == (1, 0)
        assert sorted(f.id for f in repository.subtree(s, org_id=org, folder_id=a)) == sorted([a, b])


def test_a_create_beside_a_move_never_nests_past_the_bound(engine: Engine) -> None:
    """A create measured its parent's depth outside the tree lock that moves take: beside a
    move that lowered the parent, both passed and made a folder MAX_FOLDER_DEPTH + 1 deep."""
    org = new_id("org")
    chain: list[str] = []
    with Session(writer(engine)) as s:
        for depth in range(1, MAX_FOLDER_DEPTH - 1):  # the deepest at MAX_FOLDER_DEPTH - 2
            parent = chain[-1] if chain else None
            chain.append(service.create(s, org_id=org, name=f"d{depth}", parent_id=parent, actor=SYSTEM).id)
        s.commit()

    def attempt(barrier: threading.Barrier, change: Callable[[Session], object]) -> str:
        barrier.wait()
        with Session(writer(engine)) as s:
            try:
                change(s)
            except CofferError as exc:
                return exc.code
            s.commit()
        return "done"

    for round_ in range(12):
        with Session(writer(engine)) as s:
            top = service.create(s, org_id=org, name=f"x{round_}", parent_id=None, actor=SYSTEM).id
            below = service.create(s, org_id=org, name="y", parent_id=top, actor=SYSTEM).id
            s.commit()
        barrier = threading.Barrier(2)
        move = {"org_id": org, "folder_id": top, "name": None, "parent_id": chain[-1], "actor": SYSTEM}
        with ThreadPoolExecutor(2) as pool:  # (y then at the bound)
            moved = pool.submit(attempt, barrier, functools.partial(service.update, **move))
            create = {"org_id": org, "name": "z", "parent_id": below, "actor": SYSTEM}
            made = pool.submit(attempt, barrier, functools.partial(service.create, **create))
            outcome = sorted((moved.result(), made.result()))
        assert outcome == ["conflict", "done"], f"round {round_}: {outcome}"  # one of the two, never both
    with Session(engine) as s:
        parents = {f.id: f.parent_id for f in s.exec(select(Folder).where(Folder.organization_id == org))}
    for start in parents:
        depth, node = 0, start
        while node is not None:
            depth, node = depth + 1, parents[node]
        assert depth <= MAX_FOLDER_DEPTH, start
