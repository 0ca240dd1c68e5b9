"""SQLite: a trigram full-text index of the case-folded names, for name search

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 21:40:00.000000

An FTS5 table with the trigram tokenizer over ``assets.name_key`` (external content: it
stores the index, not the names), kept up to date by triggers and filled here from the
existing rows. It narrows a search to the rows holding every trigram of the query in order;
the query still checks ``name_key LIKE`` on those rows, so what matches is unchanged
(CONTRACT §8). PostgreSQL has its trigram index since 0002: nothing to do there.

The index is keyed by the rowid of ``assets``, which has no INTEGER PRIMARY KEY: a later
migration that rebuilds ``assets`` (``batch_alter_table`` on SQLite copies the table) or a
``VACUUM`` may renumber rowids and must end with
``INSERT INTO assets_name_search(assets_name_search) VALUES ('rebuild')`` (and recreate the
triggers, which a table copy drops).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATEMENTS = (
    "CREATE VIRTUAL TABLE assets_name_search USING fts5("
    "name_key, content='assets', content_rowid='rowid', tokenize='trigram')",
    "CREATE TRIGGER assets_name_search_insert AFTER INSERT ON assets BEGIN"
    " INSERT INTO assets_name_search(rowid, name_key) VALUES (new.rowid, new.name_key); END",
    "CREATE TRIGGER assets_name_search_delete AFTER DELETE ON assets BEGIN"
    " INSERT INTO assets_name_search(assets_name_search, rowid, name_key)"
    " VALUES ('delete', old.rowid, old.name_key); END",
    "CREATE TRIGGER assets_name_search_update AFTER UPDATE OF name_key ON assets BEGIN"
    " INSERT INTO assets_name_search(assets_name_search, rowid, name_key)"
    " VALUES ('delete', old.rowid, old.name_key);"
    " INSERT INTO assets_name_search(rowid, name_key) VALUES (new.rowid, new.name_key); END",
    "INSERT INTO assets_name_search(assets_name_search) VALUES ('rebuild')",
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for statement in _STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for trigger in ("insert", "delete", "update"):
        op.execute(f"DROP TRIGGER assets_name_search_{trigger}")
    op.execute("DROP TABLE assets_name_search")
