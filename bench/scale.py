"""``make bench-scale``: Coffer's per-request figures at 1,000,000 assets against 10,000 (issue 49).

One run, on fresh PostgreSQL databases and a moto S3 server (or, with ``--sqlite``, the embedded
stack on SQLite):

1. An organization of ``--baseline`` (10,000) assets in folders of 100 is seeded with ``COPY``
   (SQLite: batched inserts) and measured alone: the baseline.
2. Then, with the stack stopped, one organization of ``--assets`` (1,000,000) assets in
   ``--assets / 100`` (10,000) folders, ``--orgs`` (1,000) organizations of ``--org-assets``
   (5,000), one event (dispatched, audited) and one audit entry per asset of the large
   organization and per asset of the first ``--org-assets`` of every other, and one webhook
   delivery with its attempt per event of the large organization. Secondary indexes are
   dropped during the COPY and built again after it (PostgreSQL), then ``VACUUM ANALYZE``.
3. The stack starts again (no plan cached on the small tables survives) and the same figures
   are measured on the large organization; the 10,000-asset organization is measured again
   too, now beside 6,000,000 other assets.

Each per-request figure is the median of ``--reps`` sequential requests from one client
(after a warm-up), edge included; the ratio is the large organization's over the baseline.
Subtree operations are compared per asset: a folder of 100,000 assets (10 top-level folders
of 1,000 subfolders, 100 assets each) against one of 1,000 in the baseline. Writes
bench/results/scale[-sqlite].{md,json} and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import DEFAULT_POSTGRES, WEBHOOK_ENV, Receiver, commit, log, machine
from seed import seed_name
from servers import Production, auth_cli, coffer_stack
from ulid import ULID

from coffer_kit import pagination
from coffer_kit.contract.names import search_key
from coffer_metadata.assets.service import Where
from coffer_testkit.testing import free_port

REPO = Path(__file__).resolve().parent.parent
PER_FOLDER = 100
TOP_FOLDERS = 10
GOAL = 1.5
ASSET_COLUMNS = (
    "id",
    "organization_id",
    "folder_id",
    "key",
    "name",
    "name_key",
    "mime_type",
    "size",
    "sha256",
    "created_at",
    "updated_at",
    "visibility",
)
SIZE = 4096


@dataclass
class Org:
    id: str
    key: str
    assets: int
    tops: list[str] = field(default_factory=list)  # top-level folders, each a tenth of the org
    sample_ids: list[str] = field(default_factory=list)
    hook_port: int = 0
    hook_secret: str = ""


def shape(
    org_id: str, assets: int, newest: datetime
) -> tuple[list[tuple[Any, ...]], Iterator[tuple[Any, ...]]]:
    """Folders (``TOP_FOLDERS`` top-level ones, the rest their children) and asset rows, one a
    second, oldest first, ``PER_FOLDER`` per folder; every tenth asset private."""
    folders_n = max(TOP_FOLDERS, assets // PER_FOLDER)
    tops = [f"fld_{ULID()}" for _ in range(TOP_FOLDERS)]
    folders: list[tuple[Any, ...]] = [
        (fid, org_id, None, f"top-{n}", newest, newest) for n, fid in enumerate(tops)
    ]
    per_top = folders_n // TOP_FOLDERS - 1
    for n in range(TOP_FOLDERS * per_top):
        folders.append((f"fld_{ULID()}", org_id, tops[n % TOP_FOLDERS], f"sub-{n:06d}", newest, newest))
    # Assets of folder k: the folders in the order top-0…top-9, then the children.
    ids_by_index = [f[0] for f in folders]

    def assets_rows() -> Iterator[tuple[Any, ...]]:
        for i in range(assets):
            created = newest - timedelta(seconds=assets - i)
            asset_id = f"ast_{ULID.from_datetime(created)}"
            name = seed_name(i)
            folder = ids_by_index[(i // PER_FOLDER) % len(ids_by_index)]
            yield (
                asset_id,
                org_id,
                folder,
                f"{org_id}/{asset_id}/{name}",
                name,
                search_key(name),
                "application/octet-stream",
                SIZE,
                "0" * 64,
                created,
                created,
                "private" if i % 10 == 9 else "public",
            )

    return folders, assets_rows()


def _sqlite_time(value: datetime) -> str:
    """As SQLAlchemy stores a DateTime in SQLite: naive UTC, always with microseconds."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


class Seeder:
    """Rows into metadata's (and auth's) database: COPY on PostgreSQL, batched inserts on SQLite."""

    def __init__(self, metadata_url: str, auth_url: str) -> None:
        self.metadata_url, self.auth_url = metadata_url, auth_url
        self.postgres = metadata_url.startswith("postgresql")

    def _pg(self, url: str) -> Any:
        import psycopg

        return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)

    def rows(
        self,
        table: str,
        columns: tuple[str, ...],
        rows: Iterator[tuple[Any, ...]] | list[tuple[Any, ...]],
        *,
        auth: bool = False,
    ) -> int:
        url = self.auth_url if auth else self.metadata_url
        count = 0
        if self.postgres:
            with self._pg(url) as conn:
                conn.execute("SET synchronous_commit = off")
                with (
                    conn.cursor() as cur,
                    cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
                ):
                    for row in rows:
                        copy.write_row(row)
                        count += 1
            return count
        import sqlite3

        path = url.split("sqlite:///", 1)[1]
        conn = sqlite3.connect(path)
        try:
            marks = ", ".join("?" for _ in columns)
            statement = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
            batch: list[tuple[Any, ...]] = []
            for row in rows:
                batch.append(tuple(_sqlite_time(v) if isinstance(v, datetime) else v for v in row))
                if len(batch) >= 5000:
                    conn.executemany(statement, batch)
                    count += len(batch)
                    batch = []
            conn.executemany(statement, batch)
            count += len(batch)
            conn.commit()
        finally:
            conn.close()
        return count

    def execute(self, sql: str, *, auth: bool = False) -> list[tuple[Any, ...]]:
        url = self.auth_url if auth else self.metadata_url
        if self.postgres:
            with self._pg(url) as conn:
                cur = conn.execute(sql)
                return list(cur.fetchall()) if cur.description else []
        import sqlite3

        conn = sqlite3.connect(url.split("sqlite:///", 1)[1])
        try:
            cur = conn.execute(sql)
            out = list(cur.fetchall())
            conn.commit()
            return out
        finally:
            conn.close()

    def drop_indexes(self, table: str) -> list[str]:
        """PostgreSQL: drop the table's secondary indexes (not its keys); their definitions."""
        if not self.postgres:
            return []
        found = self.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = '"
            + table
            + "' AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint)"
        )
        for name, _ in found:
            self.execute(f'DROP INDEX "{name}"')
        return [d for _, d in found]

    def build(self, definitions: list[str]) -> None:
        if not definitions:
            return
        with self._pg(self.metadata_url) as conn:
            conn.execute("SET maintenance_work_mem = '512MB'")
            for definition in definitions:
                conn.execute(definition)

    def seed_orgs(
        self, orgs: list[Org], *, newest: datetime, events_per_org: int | None, endpoints: dict[str, str]
    ) -> None:
        """Every organization's folders, assets and usage row, then events and audit entries for
        the first ``events_per_org`` assets of each (None: all), and a delivery with its attempt
        per event of the organizations in ``endpoints``: one COPY per table."""
        shapes = [shape(org.id, org.assets, newest) for org in orgs]
        for org, (folders, _) in zip(orgs, shapes, strict=True):
            org.tops = [f[0] for f in folders[:TOP_FOLDERS]]
        self.rows(
            "folders",
            ("id", "organization_id", "parent_id", "name", "created_at", "updated_at"),
            (f for folders, _ in shapes for f in folders),
        )
        kept: list[tuple[str, str, datetime]] = []

        def assets() -> Iterator[tuple[Any, ...]]:
            for _, rows in shapes:
                for n, row in enumerate(rows):
                    if events_per_org is None or n < events_per_org:
                        kept.append((row[1], row[0], row[9]))
                    yield row

        self.rows("assets", ASSET_COLUMNS, assets())
        self.rows(
            "usage",
            ("organization_id", "used_bytes", "asset_count"),
            [(org.id, org.assets * SIZE, org.assets) for org in orgs],
        )
        self.events(kept, endpoints)

    def events(self, assets: list[tuple[str, str, datetime]], endpoints: dict[str, str]) -> None:
        event_ids = [f"evt_{ULID.from_datetime(at)}" for _, _, at in assets]
        self.rows(
            "events",
            ("id", "organization_id", "type", "created_at", "data", "actor", "audited", "dispatched"),
            (
                (
                    eid,
                    org,
                    "asset.created",
                    at,
                    '{"asset":{"id":"' + aid + '"}}',
                    '{"type":"key"}',
                    True,
                    True,
                )
                for eid, (org, aid, at) in zip(event_ids, assets, strict=True)
            ),
        )
        self.rows(
            "audit_events",
            (
                "organization_id",
                "actor_type",
                "action",
                "target_type",
                "target_id",
                "created_at",
                "source_id",
            ),
            (
                (org, "key", "asset.created", "asset", aid, at, eid)
                for eid, (org, aid, at) in zip(event_ids, assets, strict=True)
            ),
            auth=True,
        )
        hooked = [
            (eid, org, at) for eid, (org, _, at) in zip(event_ids, assets, strict=True) if org in endpoints
        ]
        delivery_ids = [f"whd_{ULID.from_datetime(at)}" for _, _, at in hooked]
        self.rows(
            "webhook_deliveries",
            (
                "id",
                "endpoint_id",
                "organization_id",
                "event_id",
                "event_type",
                "body",
                "status",
                "attempts",
                "retry_until",
                "created_at",
            ),
            (
                (
                    did,
                    endpoints[org],
                    org,
                    eid,
                    "asset.created",
                    "{}",
                    "succeeded",
                    1,
                    at + timedelta(days=3),
                    at,
                )
                for did, (eid, org, at) in zip(delivery_ids, hooked, strict=True)
            ),
        )
        self.rows(
            "webhook_attempts",
            (
                "id",
                "delivery_id",
                "endpoint_id",
                "attempt",
                "result",
                "response_status",
                "latency_ms",
                "created_at",
            ),
            (
                (f"wha_{did[4:]}", did, endpoints[org], 1, "succeeded", 200, 12, at)
                for did, (_, org, at) in zip(delivery_ids, hooked, strict=True)
            ),
        )

    # At scale on PostgreSQL the rows are generated in the server (INSERT … SELECT over
    # generate_series): on this shared machine a client writing rows for COPY managed about
    # 6,000 a second, which would have taken hours for 13 million. Same columns, same shapes
    # as ``shape``; ids are valid ids (decimal digits are Crockford base32 digits), ordered by
    # time like real ones.
    _ORG = "coalesce(CAST(%(org)s AS text), 'org_01' || lpad(o::text, 24, '0'))"
    _TS = "CAST(%(newest)s AS timestamptz) - make_interval(secs => CAST(%(n)s AS int) - i)"
    _SECONDS = "lpad((extract(epoch from ts)::bigint %% 100000000)::text, 8, '0')"
    _ROWS = (
        "FROM generate_series(CAST(%(o0)s AS int), CAST(%(o1)s AS int)) AS o,"
        " generate_series(0, CAST(%(n)s AS int) - 1) AS i,"
        " LATERAL (SELECT " + _TS + " AS ts) AS t"
    )

    def generated(
        self,
        *,
        o0: int,
        o1: int,
        assets: int,
        newest: datetime,
        org: str | None,
        events: int,
        endpoint: str | None,
    ) -> None:
        """Organizations number o0 to o1 (or the one ``org``, numbered o0) of ``assets`` each,
        in folders of 100 (ten top-level ones, the rest their children), events and audit
        entries for the first ``events`` assets of each, deliveries and attempts for those with
        an ``endpoint``."""
        folders = max(TOP_FOLDERS, assets // PER_FOLDER)
        p = {
            "org": org,
            "o0": o0,
            "o1": o1,
            "n": assets,
            "newest": newest,
            "folders": folders,
            "endpoint": endpoint,
        }
        folder_of = "'fld_01' || lpad(o::text, 6, '0') || lpad(({k})::text, 18, '0')"
        with self._pg(self.metadata_url) as conn:
            conn.execute("SET synchronous_commit = off")
            conn.execute(
                "INSERT INTO folders (id, organization_id, parent_id, name, created_at, updated_at) "
                f"SELECT {folder_of.format(k='k')}, {self._ORG}, "
                f"CASE WHEN k < {TOP_FOLDERS} THEN NULL "
                f"ELSE {folder_of.format(k=f'k %% {TOP_FOLDERS}')} END, "
                f"CASE WHEN k < {TOP_FOLDERS} THEN 'top-' || k ELSE 'sub-' || lpad(k::text, 6, '0') END, "
                "%(newest)s, %(newest)s "
                "FROM generate_series(CAST(%(o0)s AS int), CAST(%(o1)s AS int)) AS o,"
                " generate_series(0, CAST(%(folders)s AS int) - 1) AS k ORDER BY o, k",
                p,
            )
            conn.execute(
                "INSERT INTO assets (" + ", ".join(ASSET_COLUMNS) + ") "
                "SELECT aid, org, fid, org || '/' || aid || '/' || nm, nm, nm, 'application/octet-stream', "
                f"{SIZE}, repeat('0', 64), ts, ts,"
                " CASE WHEN i %% 10 = 9 THEN 'private' ELSE 'public' END FROM ("
                f"SELECT i, ts, {self._ORG} AS org, "
                f"'ast_01' || {self._SECONDS} || lpad(o::text, 6, '0') || lpad(i::text, 10, '0') AS aid, "
                f"{folder_of.format(k='(i / 100) %% %(folders)s')} AS fid, "
                "(ARRAY['invoice','photo','report','holiday','contract','scan','draft','logo'])[i %% 8 + 1] "
                "|| '-' || lpad(i::text, 6, '0') || '.'"
                " || (ARRAY['pdf','jpg','png','docx'])[(i / 8) %% 4 + 1] AS nm " + self._ROWS + ") AS s",
                p,
            )
            conn.execute(
                f"INSERT INTO usage (organization_id, used_bytes, asset_count) SELECT {self._ORG}, "
                f"{SIZE} * CAST(%(n)s AS bigint), %(n)s"
                " FROM generate_series(CAST(%(o0)s AS int), CAST(%(o1)s AS int)) AS o",
                p,
            )
            pe = {**p, "n": assets}
            events_rows = self._ROWS + " WHERE i < %(events)s"
            pe["events"] = events
            conn.execute(
                "INSERT INTO events"
                " (id, organization_id, type, created_at, data, actor, audited, dispatched) "
                f"SELECT 'evt_01' || {self._SECONDS} || lpad(o::text, 6, '0') || lpad(i::text, 10, '0'), "
                f"{self._ORG}, 'asset.created', ts, '{{}}', '{{\"type\":\"key\"}}', true, true "
                + events_rows,
                pe,
            )
            if endpoint is not None:
                conn.execute(
                    "INSERT INTO webhook_deliveries"
                    " (id, endpoint_id, organization_id, event_id, event_type, body, "
                    "status, attempts, retry_until, created_at) "
                    f"SELECT 'whd_01' || {self._SECONDS} || lpad(o::text, 6, '0') || lpad(i::text, 10, '0'), "
                    f"%(endpoint)s, {self._ORG}, "
                    f"'evt_01' || {self._SECONDS} || lpad(o::text, 6, '0') || lpad(i::text, 10, '0'), "
                    "'asset.created', '{}', 'succeeded', 1, ts + interval '3 days', ts " + events_rows,
                    pe,
                )
                conn.execute(
                    "INSERT INTO webhook_attempts"
                    " (id, delivery_id, endpoint_id, attempt, result, response_status, "
                    "latency_ms, created_at) "
                    f"SELECT 'wha_01' || {self._SECONDS} || lpad(o::text, 6, '0') || lpad(i::text, 10, '0'), "
                    f"'whd_01' || {self._SECONDS} || lpad(o::text, 6, '0') || lpad(i::text, 10, '0'), "
                    "%(endpoint)s, 1, 'succeeded', 200, 12, ts " + events_rows,
                    pe,
                )
        with self._pg(self.auth_url) as conn:
            conn.execute("SET synchronous_commit = off")
            conn.execute(
                "INSERT INTO audit_events"
                " (organization_id, actor_type, action, target_type, target_id, created_at, "
                f"source_id) SELECT {self._ORG}, 'key', 'asset.created', 'asset', "
                f"'ast_01' || {self._SECONDS} || lpad(o::text, 6, '0') || lpad(i::text, 10, '0'), ts, "
                f"'evt_01' || {self._SECONDS} || lpad(o::text, 6, '0') || lpad(i::text, 10, '0') "
                + events_rows,
                pe,
            )

    def tops(self, org_id: str) -> list[str]:
        rows = self.execute(
            f"SELECT id FROM folders WHERE organization_id = '{org_id}' AND parent_id IS NULL ORDER BY name"
        )
        return [r[0] for r in rows]

    def vacuum(self) -> None:
        if self.postgres:
            with self._pg(self.metadata_url) as conn:
                conn.execute("VACUUM ANALYZE")
            with self._pg(self.auth_url) as conn:
                conn.execute("VACUUM ANALYZE audit_events")
        else:
            self.execute("ANALYZE")


@dataclass
class Measure:
    name: str
    unit: str = "ms"
    per_asset: bool = False  # subtree operations: compared per asset of the subtree
    base: float | None = None
    big: float | None = None
    small_at_scale: float | None = None
    note: str = ""


def median_ms(call: Callable[[], httpx.Response], reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        call().raise_for_status()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        answer = call()
        times.append((time.perf_counter() - started) * 1000)
        if answer.status_code >= 400:
            raise RuntimeError(f"{answer.request.url} answered {answer.status_code}: {answer.text[:300]}")
    return statistics.median(times)


class Scale:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args, self.root = args, root
        self.production = None if args.sqlite else Production(args.database_url)
        self.stack: Any = None
        self.env: dict[str, str] = {}
        self.figures: dict[str, Measure] = {}
        self.seconds: dict[str, float] = {}

    def figure(self, name: str, **kw: Any) -> Measure:
        return self.figures.setdefault(name, Measure(name, **kw))

    def start(self) -> Seeder:
        (self.root / "logs").mkdir(exist_ok=True)
        if self.production:
            self.env = self.production.start(self.root / "logs" / "moto.log")
        self.env.update(WEBHOOK_ENV)
        self.stack = coffer_stack(self.root, self.env)
        self.stack.migrate()
        data = self.stack.data_dir
        metadata = self.env.get("COFFER_METADATA_DATABASE_URL") or f"sqlite:///{data / 'metadata.db'}"
        auth = self.env.get("COFFER_AUTH_DATABASE_URL") or f"sqlite:///{data / 'auth.db'}"
        return Seeder(metadata, auth)

    def new_org(self, name: str, assets: int) -> Org:
        org = auth_cli(self.stack, "create-org", "--name", name, "--quota-bytes", str(2**50))
        for attempt in range(3):  # the shared PostgreSQL may be out of connections for a moment
            try:
                key = str(auth_cli(self.stack, "create-key", "--org", str(org["id"]))["key"])
                break
            except subprocess.CalledProcessError as exc:
                log(f"create-key failed ({exc.stderr[-300:] if exc.stderr else exc}); again")
                if attempt == 2:
                    raise
        return Org(str(org["id"]), key, assets)

    def endpoint(self, org: Org) -> str:
        """A webhook endpoint (asset.created) for ``org``, to a receiver started when measured."""
        org.hook_port = free_port()
        made = httpx.post(
            self.stack.edge_url + "/api/webhooks",
            headers={"x-api-key": org.key},
            json={"url": f"http://127.0.0.1:{org.hook_port}/coffer-hook", "events": ["asset.created"]},
            timeout=30,
        )
        made.raise_for_status()
        org.hook_secret = made.json()["secret"]
        return str(made.json()["id"])

    def run(self) -> None:
        seeder = self.start()
        started = time.perf_counter()
        small = self.new_org("scale-10k", self.args.baseline)
        big = self.new_org("scale-1m", self.args.assets)
        newest = datetime.now(UTC) - timedelta(minutes=5)
        self.stack.start(timeout=600)
        small_hook = self.endpoint(small)
        big_hook = self.endpoint(big)
        self.stack.stop()
        seeder.seed_orgs([small], newest=newest, events_per_org=None, endpoints={small.id: small_hook})
        seeder.vacuum()
        self.seconds["seed baseline"] = time.perf_counter() - started
        self.stack.start(timeout=600)
        log(f"baseline: {small.assets:,} assets seeded; measuring")
        self.measure(small, "base")
        self.stack.stop()
        log("seeding at scale")
        started = time.perf_counter()
        dropped = [seeder.drop_indexes(t) for t in ("assets", "folders", "events", "webhook_attempts")]
        if seeder.postgres:
            seeder.generated(
                o0=999_999,
                o1=999_999,
                assets=big.assets,
                newest=newest,
                org=big.id,
                events=big.assets,
                endpoint=big_hook,
            )
            big.tops = seeder.tops(big.id)
            log(f"large organization seeded, {time.perf_counter() - started:.0f}s")
            if self.args.orgs:
                seeder.generated(
                    o0=0,
                    o1=self.args.orgs - 1,
                    assets=self.args.org_assets,
                    newest=newest,
                    org=None,
                    events=self.args.org_events,
                    endpoint=None,
                )
        else:
            seeder.seed_orgs([big], newest=newest, events_per_org=None, endpoints={big.id: big_hook})
            log(f"large organization seeded, {time.perf_counter() - started:.0f}s")
            others = [Org(f"org_{ULID()}", "", self.args.org_assets) for _ in range(self.args.orgs)]
            seeder.seed_orgs(others, newest=newest, events_per_org=self.args.org_events, endpoints={})
        self.seconds["copy"] = time.perf_counter() - started
        seeder.build([d for group in dropped for d in group])
        self.seconds["indexes"] = time.perf_counter() - started - self.seconds["copy"]
        seeder.vacuum()
        self.seconds["seed at scale"] = time.perf_counter() - started
        log(f"seeded at scale in {self.seconds['seed at scale']:.0f}s; measuring")
        self.stack.start(timeout=600)
        self.measure(big, "big")
        self.measure(small, "small_at_scale", subtree=False)
        self.stack.stop()

    def measure(self, org: Org, column: str, *, subtree: bool = True) -> None:
        reps = self.args.reps
        seeder_rows = self.deep_position(org)
        with httpx.Client(
            base_url=self.stack.edge_url, headers={"x-api-key": org.key}, timeout=120
        ) as client:
            ids = [
                a["id"]
                for a in client.get("/api/assets", params={"limit": 100, "total": "false"}).json()["assets"]
            ]

            def put(name: str, value: float, **kw: Any) -> None:
                setattr(self.figure(name, **kw), column, value)

            put("get an asset by id", median_ms(lambda: client.get(f"/api/assets/{ids[7]}"), reps))
            put(
                "first page of 50, newest first, cursor (total=false)",
                median_ms(lambda: client.get("/api/assets", params={"total": "false"}), reps),
            )
            put(
                "first page of 50, newest first, with total (an existing client)",
                median_ms(lambda: client.get("/api/assets"), reps),
            )
            put(
                "page of 50 in the middle of the listing, by cursor",
                median_ms(lambda: client.get("/api/assets", params={"cursor": seeder_rows}), reps),
            )
            folder_page = client.get("/api/folders", params={"parentId": org.tops[1]}).json()["folders"]
            leaf = folder_page[len(folder_page) // 2]["id"] if folder_page else org.tops[1]
            put(
                "first page of a folder's assets (cursor)",
                median_ms(
                    lambda: client.get("/api/assets", params={"folderId": leaf, "total": "false"}), reps
                ),
            )
            term = f"-{org.assets // 3:06d}."
            put(
                "name search matching one asset (cursor)",
                median_ms(lambda: client.get("/api/assets", params={"q": term, "total": "false"}), reps),
            )
            put(
                "name search matching one asset, with total",
                median_ms(lambda: client.get("/api/assets", params={"q": term}), reps),
            )
            put(
                "filter visibility=private, first page (cursor)",
                median_ms(
                    lambda: client.get("/api/assets", params={"visibility": "private", "total": "false"}),
                    reps,
                ),
            )
            put(
                "sort by name, first page (cursor)",
                median_ms(lambda: client.get("/api/assets", params={"sort": "name", "total": "false"}), reps),
            )
            put("usage", median_ms(lambda: client.get("/api/usage"), reps))
            body = os.urandom(SIZE)
            put(
                "upload a 4 KiB file",
                median_ms(
                    lambda: client.post(
                        "/api/assets", files={"file": ("u.bin", body, "application/octet-stream")}
                    ),
                    max(10, reps // 2),
                ),
            )
            put("webhook: an upload's 201 → its verified delivery", self.fan_out(client, org))
            if subtree:
                try:
                    self.subtree_ops(client, org, column, put)
                except httpx.HTTPError as exc:  # recorded, so the other figures are still reported
                    name = "delete a folder of a tenth of the organization, per 1,000 assets of it"
                    self.figure(name, per_asset=True).note += f"{column}: failed, {exc}; "

    def fan_out(self, client: httpx.Client, org: Org) -> float:
        receiver = Receiver(
            org.hook_port, org.hook_secret, self.root / "logs" / f"receiver-{org.hook_port}.log"
        )
        try:
            latencies = []
            for _ in range(max(10, self.args.reps // 2)):
                answer = client.post(
                    "/api/assets", files={"file": ("h.bin", b"hook", "application/octet-stream")}
                )
                at = time.monotonic()
                answer.raise_for_status()
                asset = answer.json()["id"]
                missing = receiver.wait_for_ids({asset}, 60)
                if missing:
                    raise RuntimeError("a delivery did not arrive within 60 s")
                latencies.append((receiver.arrived[asset] - at) * 1000)
            return statistics.median(latencies)
        finally:
            receiver.stop()

    def subtree_ops(self, client: httpx.Client, org: Org, column: str, put: Callable[..., None]) -> None:
        """Move a top-level folder (a tenth of the organization) under another and back, then
        delete one; per asset of the subtree."""
        subtree_assets = org.assets // TOP_FOLDERS
        moved, under = org.tops[2], org.tops[3]
        times = []
        for _ in range(3):
            for parent in (under, None):
                started = time.perf_counter()
                client.patch(f"/api/folders/{moved}", json={"parentId": parent}).raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
        put("move a folder of a tenth of the organization (whole, ms)", statistics.median(times))
        started = time.perf_counter()
        # Edge gives metadata 300 s for a folder delete (its time grows with the subtree).
        client.delete(f"/api/folders/{org.tops[4]}", timeout=330).raise_for_status()
        took = (time.perf_counter() - started) * 1000
        put(
            "delete a folder of a tenth of the organization, per 1,000 assets of it",
            took / subtree_assets * 1000,
            per_asset=True,
            note="",
        )
        self.figure(
            "delete a folder of a tenth of the organization, per 1,000 assets of it"
        ).note += f"{column}: {took:.0f} ms for {subtree_assets:,} assets; "

    def deep_position(self, org: Org) -> str:
        """The cursor after the middle asset of the organization's newest-first listing."""
        seeder = Seeder(
            self.env.get("COFFER_METADATA_DATABASE_URL")
            or f"sqlite:///{self.stack.data_dir / 'metadata.db'}",
            "",
        )
        row = seeder.execute(
            f"SELECT created_at, id FROM assets WHERE organization_id = '{org.id}' "
            f"ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET {org.assets // 2}"
        )[0]
        created = row[0] if isinstance(row[0], datetime) else datetime.fromisoformat(row[0])
        # The scope metadata binds a cursor of the unfiltered listing to (its own ``Where``).
        scope = Where(org_id=org.id, folder=None, root_only=False, q=None, visibility=None, within=None)
        return pagination.encode("assets:-createdAt", scope.scope(), created, row[1])

    def stop(self) -> None:
        for thing in (self.stack, self.production):
            if thing is not None:
                try:
                    thing.stop()
                except Exception as exc:  # noqa: BLE001 - best effort at exit
                    log(f"stopping: {exc}")

    def report(self) -> str:
        a = self.args
        where = "embedded (SQLite)" if a.sqlite else "production (PostgreSQL + moto S3)"
        lines = [
            f"# Scale: {self.args.assets:,} assets against {self.args.baseline:,} ({where})",
            "",
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, {machine()}. "
            f"`python bench/scale.py {' '.join(sys.argv[1:])}`. Seeded: one organization of "
            f"{a.assets:,} assets in {a.assets // PER_FOLDER:,} folders, {a.orgs:,} of {a.org_assets:,} "
            f"assets; one event and one audit entry per asset of the two measured organizations and "
            f"for {a.org_events:,} assets of each other one; one webhook delivery and its attempt per "
            "event of the measured organizations; "
            + ", ".join(f"{k} {v:.0f} s" for k, v in self.seconds.items())
            + f". Median of {a.reps} sequential requests (uploads and webhooks: half as many), "
            "edge included.",
            "",
            f"| Figure | {a.baseline:,} assets (alone) | {a.assets:,} assets | ratio | goal | "
            f"{a.baseline:,} assets beside the others |",
            "|---|---:|---:|---:|---|---:|",
        ]
        for m in self.figures.values():
            ratio = m.big / m.base if m.big is not None and m.base else None
            goal = f"≤ {GOAL}×" + (" (per asset: linear in the subtree)" if m.per_asset else "")
            met = "" if ratio is None else (" ✓" if ratio <= GOAL else " ✗")
            cells = [
                m.name,
                "–" if m.base is None else f"{m.base:.2f}",
                "–" if m.big is None else f"{m.big:.2f}",
                "–" if ratio is None else f"{ratio:.2f}×{met}",
                goal,
                "–" if m.small_at_scale is None else f"{m.small_at_scale:.2f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        notes = [f"- {m.name}: {m.note}" for m in self.figures.values() if m.note]
        return "\n".join(lines + (["", *notes] if notes else [])) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--assets", type=int, default=1_000_000)
    parser.add_argument("--baseline", type=int, default=10_000)
    parser.add_argument("--orgs", type=int, default=1000)
    parser.add_argument("--org-assets", type=int, default=5000)
    parser.add_argument(
        "--org-events", type=int, default=1000, help="events and audit entries per other organization"
    )
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--sqlite", action="store_true", help="the embedded stack (SQLite)")
    parser.add_argument(
        "--database-url", default=os.environ.get("COFFER_BENCH_DATABASE_URL", DEFAULT_POSTGRES)
    )
    parser.add_argument("--out", default="", help="results file stem (default bench/results/scale[-sqlite])")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coffer-scale-") as tmp:
        scale = Scale(args, Path(tmp))
        try:
            scale.run()
        finally:
            scale.stop()
            write(scale, args)  # what was measured, even when a later step failed


def write(scale: Scale, args: argparse.Namespace) -> None:
    text = scale.report()
    stem = (
        Path(args.out)
        if args.out
        else REPO / "bench" / "results" / ("scale-sqlite" if args.sqlite else "scale")
    )
    stem.with_suffix(".md").write_text(text)
    figures = [vars(m) for m in scale.figures.values()]
    stem.with_suffix(".json").write_text(
        json.dumps({"args": vars(args), "seconds": scale.seconds, "figures": figures}, indent=1)
    )
    print(text)


if __name__ == "__main__":
    main()
