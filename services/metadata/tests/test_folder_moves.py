"""Concurrent folder moves on SQLite and PostgreSQL: never a cycle, never an orphan."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from coffer_kit.contract.errors import CofferError
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.wire import SYSTEM
from coffer_kit.db import writer
from coffer_metadata.folders import service
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
