"""Name search beside other organizations holding the same names (issue 49), on both databases:
the same rows whichever way SQLite finds them, and on SQLite a cost that does not grow with
what the other organizations hold."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session

from coffer_kit.contract.names import search_key
from coffer_metadata.assets import repository
from coffer_metadata.models import Asset, Usage

_assets = Asset.__table__  # type: ignore[attr-defined]
_usage = Usage.__table__  # type: ignore[attr-defined]
_WORDS = ("photo", "invoice", "scan", "draft")
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _name(i: int) -> str:
    return f"{_WORDS[i % len(_WORDS)]}-{i:06d}.JPG"


def _seed(engine: Engine, orgs: dict[str, list[str]], *, first: int = 0) -> None:
    """Each organization's names as its assets, and its usage row counting them, in one
    transaction."""
    with engine.begin() as conn:
        for org, names in orgs.items():
            rows = [
                {
                    "id": f"ast_{org}_{first + i:06d}",
                    "organization_id": org,
                    "key": f"{org}/{first + i}",
                    "name": name,
                    "name_key": search_key(name),
                    "mime_type": "image/jpeg",
                    "size": 1,
                    "sha256": "0" * 64,
                    "created_at": _EPOCH + timedelta(seconds=first + i),
                    "updated_at": _EPOCH,
                }
                for i, name in enumerate(names)
            ]
            conn.execute(sa.insert(_assets), rows)
            counted = conn.execute(
                sa.update(_usage)
                .where(_usage.c.organization_id == org)
                .values(asset_count=_usage.c.asset_count + len(rows))
            )
            if counted.rowcount == 0:
                conn.execute(
                    sa.insert(_usage).values(organization_id=org, used_bytes=len(rows), asset_count=len(rows))
                )


def _merge_trigram_segments(engine: Engine) -> None:
    """SQLite: the trigram index merged into one segment, so that what a search costs does not
    depend on how the index was written (FTS5 reads every segment; its own merges bound how many
    there are, not how they fall)."""
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO assets_name_search(assets_name_search) VALUES ('optimize')"))


@contextmanager
def _statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL the engine runs meanwhile."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)


# How SQLite found the rows (repository._SQLITE_TRIGRAMS, _SQLITE_MATCHES).
_TRIGRAMS = "assets.rowid IN (SELECT value FROM json_each("
_ORG_INDEX = "assets.rowid IN (SELECT rowid FROM assets INDEXED BY ix_assets_org_name_key "


def _search(engine: Engine, org: str, q: str) -> tuple[list[str], int, list[str], int]:
    """The ids of every match by name (a page with its total, a cursor page, the count alone),
    as the listing would find them."""
    q_key = search_key(q)
    common: dict[str, Any] = {"org_id": org, "folder_id": None, "root_only": False, "q_key": q_key}
    with Session(engine) as session:
        page, total = repository.search_page(session, sort="name", limit=2000, offset=0, **common)
        walked = repository.cursor_page(session, sort="name", limit=2000, position=None, **common)
        counted = repository.search_count(session, **common)
    return [r.id for r in page], total or 0, [r.id for r in walked], counted


# The small organization: 1,200 assets, so a search of it reads its own name index once the
# trigram index holds ten candidates or more (repository._ROWS_PER_CANDIDATE).
_SMALL = [_name(i) for i in range(1200)]


def test_a_search_beside_others_holding_its_names_finds_its_own(engine: Engine) -> None:
    _seed(engine, {"org_small": _SMALL})
    # Every other organization holds the first 20 names, and three of them one more.
    _seed(engine, {f"org_{o:03d}": [_name(i) for i in range(20)] for o in range(40)})
    _seed(engine, {f"org_{o:03d}": [_name(300)] for o in range(3)}, first=20)
    sqlite = engine.dialect.name == "sqlite"
    # (term, how SQLite should find it): 10 of its names and 400 of the others'; 300, 304 and
    # 308 and 3 of the others' (fewer than ten candidates); 1,001 of its names and 803 others'.
    for q, found_by in (("-00001", _ORG_INDEX), ("PHOTO-00030", _TRIGRAMS), ("000", _ORG_INDEX)):
        expected = sorted(
            (n, f"ast_org_small_{i:06d}") for i, n in enumerate(_SMALL) if search_key(q) in search_key(n)
        )
        ids = [i for _, i in expected]
        with _statements(engine) as seen:
            page, total, walked, counted = _search(engine, "org_small", q)
        assert (page, total, walked, counted) == (ids, len(ids), ids, len(ids)), q
        if sqlite:
            searched = [
                s for s in seen if s.lstrip().upper().startswith("SELECT ASSETS.ID") or "count(*) AS" in s
            ]
            assert searched and all(found_by in s for s in searched), (q, seen)
    assert _search(engine, "org_000", "photo-000300")[1] == 1
    assert _search(engine, "org_none", "photo")[1] == 0


def _vm_steps(engine: Engine, org: str, q: str) -> int:
    """SQLite's virtual-machine instructions for one search (page and total), every statement
    of it: what it reads, whatever the machine's speed."""
    with Session(engine) as session:
        driver = session.connection().connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        steps = 0

        def step() -> int:
            nonlocal steps
            steps += 1
            return 0

        driver.set_progress_handler(step, 1)
        try:
            page, total = repository.search_page(
                session,
                org_id=org,
                folder_id=None,
                root_only=False,
                q_key=search_key(q),
                sort="name",
                limit=50,
                offset=0,
            )
        finally:
            driver.set_progress_handler(None, 1)
    assert total == 1 and len(page) == 1
    return steps


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True, scope="session")
def test_a_search_costs_no_more_beside_others_holding_its_term(engine: Engine) -> None:
    """A small organization's search for a term in one of its names, alone and then beside 300
    and 900 organizations holding it: every match the trigram index finds elsewhere was found
    and refused one by one, so the search cost grew with them (34 ms beside 1,000 against 2.3
    alone, docs/performance.md, "Scale"). Now it costs at most reading the organization's own
    name index, whatever the others hold."""
    small = [_name(i) for i in range(240)]
    _seed(engine, {"org_small": small})
    _merge_trigram_segments(engine)
    alone = _vm_steps(engine, "org_small", "-000123.")
    _seed(engine, {f"org_{o:03d}": [_name(123)] for o in range(300)})
    _merge_trigram_segments(engine)
    beside = _vm_steps(engine, "org_small", "-000123.")
    _seed(engine, {f"org_{o:03d}": [_name(123)] for o in range(300, 900)})
    _merge_trigram_segments(engine)
    beside_more = _vm_steps(engine, "org_small", "-000123.")
    # Beside them it reads the organization's own index (about 5 steps an entry) ...
    assert beside <= alone + 10 * len(small), (alone, beside, beside_more)
    # ... and what more organizations hold costs it nothing more.
    assert beside_more <= beside * 1.1, (alone, beside, beside_more)
