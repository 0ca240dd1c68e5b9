"""Issue 50's figures: GET /api/assets filtered by tag and metadata over 100,000 assets, and a
recursive listing under a folder with 1,000 subfolders, through the real stack (embedded, or
``--production``: PostgreSQL and S3). The rows are seeded straight into metadata's database
(no uploads: only the listing reads them); requests are sequential, one at a time, after a
warm-up, and each figure is the latency the client measured, p50 and p99.

    uv run python bench/metadata_filters.py [--production] [--requests 300]

Appends its rows to bench/results/issue50.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from seed import BATCH, seed_name
from servers import Production, auth_cli, coffer_stack
from sqlalchemy import create_engine, insert
from ulid import ULID

from coffer_kit.contract.names import search_key
from coffer_metadata.models import Asset, Folder, Usage

ASSETS = 100_000
SUBFOLDERS = 1_000
ANY_OF_TWO: dict[str, str | list[str]] = {
    "tag": ["t1", "t2"],
    "tagMatch": "any",
    "meta[live]": "true",
    "mediaType": "image/*",
}
RESULTS = Path(__file__).resolve().parent / "results" / "issue50.md"


def seed(url: str, org_id: str) -> tuple[str, float]:
    """100,000 assets with tags and metadata; a folder with 1,000 subfolders holding 5 each."""
    started = time.perf_counter()
    engine = create_engine(url)
    newest = datetime.now(UTC) - timedelta(minutes=5)
    top = f"fld_{ULID()}"
    subs = [f"fld_{ULID()}" for _ in range(SUBFOLDERS)]
    try:
        with engine.begin() as conn:
            folders = [{"id": top, "parent_id": None, "name": "customers"}] + [
                {"id": fid, "parent_id": top, "name": f"customer-{n:04d}"} for n, fid in enumerate(subs)
            ]
            conn.execute(
                insert(Folder.__table__),  # type: ignore[attr-defined]
                [
                    {**f, "organization_id": org_id, "created_at": newest, "updated_at": newest}
                    for f in folders
                ],
            )
            for first in range(0, ASSETS, BATCH):
                rows = []
                for i in range(first, min(first + BATCH, ASSETS)):
                    created = newest - timedelta(seconds=ASSETS - i)
                    asset_id = f"ast_{ULID.from_datetime(created)}"
                    name = seed_name(i)
                    rows.append(
                        {
                            "id": asset_id,
                            "organization_id": org_id,
                            "folder_id": subs[i % SUBFOLDERS] if i < SUBFOLDERS * 5 else None,
                            "key": f"{org_id}/{asset_id}/{name}",
                            "name": name,
                            "name_key": search_key(name),
                            "mime_type": "image/jpeg" if i % 4 else "application/pdf",
                            "size": 1000 + i % 5000,
                            "sha256": "0" * 64,
                            "created_at": created,
                            "updated_at": created,
                            "custom_metadata": {
                                "product": f"p{i % 1000}",
                                "rank": i % 100,
                                "live": i % 2 == 0,
                            },
                            "tags": sorted({f"t{i % 50}", f"color-{i % 7}"}),
                        }
                    )
                conn.execute(insert(Asset.__table__), rows)  # type: ignore[attr-defined]
            conn.execute(
                insert(Usage.__table__).values(  # type: ignore[attr-defined]
                    organization_id=org_id, used_bytes=ASSETS * 3000, asset_count=ASSETS
                )
            )
        if engine.dialect.name == "postgresql":
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql("VACUUM ANALYZE assets")
        else:
            with engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()
    return top, time.perf_counter() - started


def timed(
    client: httpx.Client, params: dict[str, str | list[str]], requests: int
) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, total matches) of ``requests`` sequential listings, after 20 unmeasured."""
    for _ in range(20):
        client.get("/api/assets", params=params).raise_for_status()
    took = []
    total = 0
    for _ in range(requests):
        started = time.perf_counter()
        answer = client.get("/api/assets", params=params)
        took.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
        total = int(answer.json()["total"])
    took.sort()
    return statistics.median(took), took[min(len(took) - 1, int(len(took) * 0.99))], total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--production", action="store_true", help="PostgreSQL and S3 instead of SQLite")
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="coffer-bench-issue50-"))
    (root / "logs").mkdir()
    production = Production(args.admin_url) if args.production else None
    extra = production.start(root / "logs" / "moto.log") if production else {}
    stack = coffer_stack(root, extra)
    try:
        stack.migrate()
        org = auth_cli(stack, "create-org", "--name", "bench-issue50", "--quota-bytes", str(2**40))
        key = str(auth_cli(stack, "create-key", "--org", str(org["id"]))["key"])
        url = extra.get("COFFER_METADATA_DATABASE_URL") or f"sqlite:///{stack.data_dir / 'metadata.db'}"
        top, seconds = seed(url, str(org["id"]))
        print(f"seeded {ASSETS:,} assets and {SUBFOLDERS:,} subfolders in {seconds:.1f} s", file=sys.stderr)
        stack.start(timeout=600)  # (a loaded machine starts slowly)
        figures: list[tuple[str, dict[str, str | list[str]]]] = [
            ("tag + meta, ~100 match", {"tag": "t7", "meta[product]": "p7"}),
            ("tag + meta, ~140 match", {"tag": "color-3", "meta[rank]": "42"}),
            ("2 tags (any) + meta + mediaType", ANY_OF_TWO),
            ("tag alone, 1/7 match", {"tag": "color-5"}),
            ("recursive, 1,000 subfolders", {"folderId": top, "recursive": "true"}),
        ]
        mode = "production (PostgreSQL, S3)" if production else "embedded (SQLite)"
        lines = [
            f"\n## {mode}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {ASSETS:,} assets, "
            f"{args.requests} requests each\n",
            "| query | matches | p50 ms | p99 ms |",
            "|---|---|---|---|",
        ]
        with httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=30) as client:
            for label, params in figures:
                p50, p99, total = timed(client, params, args.requests)
                lines.append(f"| {label} | {total:,} | {p50:.1f} | {p99:.1f} |")
                print(lines[-1], file=sys.stderr)
        with RESULTS.open("a") as out:
            out.write("\n".join(lines) + "\n")
    finally:
        stack.stop()
        if production:
            production.stop()


if __name__ == "__main__":
    main()
