"""What each part of a Coffer request costs on this machine: CPU milliseconds per request.

    uv run --frozen --no-sync python bench/anatomy.py [--seconds 4]

Builds the pieces edge and metadata are made of, one at a time, in small FastAPI apps served
exactly like our services (coffer_kit.serve: uvicorn, one process), and drives each with wrk
(1 and 32 connections). The figure is the serving process's CPU time divided by requests,
so it holds however busy the machine is. Variants:

- ``plain``: an ``async def`` route returning an asset-shaped dict (bench/reference_app.py).
- ``kit``: the same route in ``coffer_kit.app.base_app`` (error envelope, request-id and
  access-log middleware, Prometheus), logging one JSON line per request as the services do.
- ``3 sync deps``: the plain route with three ``def`` dependencies (edge's ``request_id``,
  ``_metadata``, ``_blob``): FastAPI runs each in the thread pool.
- ``3 async deps``: the same three as ``async def``.
- ``sync endpoint + session dep``: a ``def`` route with a ``def`` token dependency and a
  generator dependency (metadata's shape: ``require_internal_token``, ``SessionDep``).
- ``httpx call``: the plain route awaiting one GET to another process through an httpx
  AsyncClient with httpx's own pool (httpcore), as edge's clients were made until 8c448c6.
- ``internal_client call``: the same through ``coffer_kit.internal.internal_client`` as it
  is now (at 8c448c6: the httpx API over httpx-aiohttp's transport; since then a plain
  aiohttp session, called through edge's ``ServiceClient``).
- ``aiohttp call``: the same call through an aiohttp ClientSession (one pooled connector).
- ``kit route calling a kit route``: the asset GET's skeleton with no work in it: a kit app's
  route calling another kit app's through ``coffer_kit.internal``'s client and edge's
  ``ServiceClient``, as edge calls metadata (no authentication, no read). For every call, the
  CPU of both processes per request is given as well.
- ``SQLModel get by id``: a ``def`` route that opens a Session on ``coffer_kit.db.make_engine``
  (SQLite, WAL) and selects one row of metadata's ``assets`` table by id, as metadata does.
- ``SQLAlchemy Core get by id``: the same row through a Core ``select`` on a pooled connection.
- ``4 KiB file, blob's shape``: stat and a sidecar read in one worker-thread call, open in a
  second, then a StreamingResponse whose chunks are read in worker threads (coffer_blob.cdn).
- ``4 KiB file, one read``: stat, sidecar and the bytes in one worker-thread call, sent as
  one ``Response``; and the same read done on the event loop (page-cache reads of a small
  file take microseconds; a cold disk would stall the loop, so only below a size bound).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

ORG = "org_01JD0000000000000000000000"


def _asset(asset_id: str) -> dict[str, Any]:
    key = f"{ORG}/{asset_id}/file-0000.bin"
    return {
        "id": asset_id,
        "organizationId": ORG,
        "folderId": None,
        "key": key,
        "name": "file-0000.bin",
        "mimeType": "application/octet-stream",
        "size": 4096,
        "publicUrl": f"http://127.0.0.1:8090/{key}",
        "createdAt": "2026-11-22T10:15:30.123Z",
    }


def build(kind: str, upstream: str | None):  # type: ignore[no-untyped-def]
    from collections.abc import AsyncIterator, Iterator
    from contextlib import asynccontextmanager

    import httpx
    from fastapi import Depends, FastAPI, Request

    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if upstream:
            import aiohttp

            state["http"] = httpx.AsyncClient(
                base_url=upstream,
                timeout=httpx.Timeout(5.0),
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
            )
            from coffer_edge.clients.base import ServiceClient
            from coffer_kit.internal import internal_client

            state["internal"] = ServiceClient(internal_client(upstream, "anatomy", timeout=5.0))
            state["aiohttp"] = aiohttp.ClientSession(
                base_url=upstream, connector=aiohttp.TCPConnector(limit=200), timeout=aiohttp.ClientTimeout(5)
            )
        yield
        if upstream:
            await state["http"].aclose()
            await state["internal"].http.close()
            await state["aiohttp"].close()

    if kind == "kit":
        from coffer_kit.app import base_app
        from coffer_kit.logs import configure_logging

        configure_logging("anatomy", "INFO")
        app = base_app("anatomy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    else:
        app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    def sync_a(request: Request) -> str:
        return "a"

    def sync_b(request: Request) -> str:
        return "b"

    def sync_c(request: Request) -> str:
        return "c"

    async def async_a(request: Request) -> str:
        return "a"

    async def async_b(request: Request) -> str:
        return "b"

    async def async_c(request: Request) -> str:
        return "c"

    def token(request: Request) -> None:
        request.headers.get("x-token", "")

    def session() -> Iterator[str]:
        yield "session"

    @app.get("/plain/{asset_id}")
    async def plain(asset_id: str) -> dict[str, Any]:
        return _asset(asset_id)

    @app.get("/sync-deps/{asset_id}")
    async def sync_deps(
        asset_id: str,
        a: Annotated[str, Depends(sync_a)],
        b: Annotated[str, Depends(sync_b)],
        c: Annotated[str, Depends(sync_c)],
    ) -> dict[str, Any]:
        return _asset(asset_id)

    @app.get("/async-deps/{asset_id}")
    async def async_deps(
        asset_id: str,
        a: Annotated[str, Depends(async_a)],
        b: Annotated[str, Depends(async_b)],
        c: Annotated[str, Depends(async_c)],
    ) -> dict[str, Any]:
        return _asset(asset_id)

    @app.get("/sync-endpoint/{asset_id}", dependencies=[Depends(token)])
    def sync_endpoint(asset_id: str, s: Annotated[str, Depends(session)]) -> dict[str, Any]:
        return _asset(asset_id)

    @app.get("/httpx/{asset_id}")
    async def via_httpx(asset_id: str) -> Any:
        response = await state["http"].get(f"/plain/{asset_id}")
        return response.json()

    @app.get("/internal/{asset_id}")
    async def via_internal_client(asset_id: str) -> Any:
        return await state["internal"].json("GET", f"/plain/{asset_id}")

    @app.get("/aiohttp/{asset_id}")
    async def via_aiohttp(asset_id: str) -> Any:
        async with state["aiohttp"].get(f"/plain/{asset_id}") as response:
            return await response.json()

    if os.environ.get("ANATOMY_DB"):
        from sqlmodel import Session, SQLModel, select

        from coffer_kit.db import make_engine
        from coffer_metadata.models import TABLES, Asset

        engine = make_engine(os.environ["ANATOMY_DB"])
        SQLModel.metadata.create_all(engine, tables=TABLES)
        with Session(engine) as s:
            if s.get(Asset, "ast_x") is None:
                import datetime as dt

                s.add(
                    Asset(
                        id="ast_x",
                        organization_id=ORG,
                        key=f"{ORG}/ast_x/file.bin",
                        name="file.bin",
                        mime_type="application/octet-stream",
                        size=4096,
                        sha256="0" * 64,
                        created_at=dt.datetime.now(dt.UTC),
                        updated_at=dt.datetime.now(dt.UTC),
                        name_key="file.bin",
                    )
                )
                s.commit()
        table = Asset.__table__  # type: ignore[attr-defined]

        @app.get("/orm/{asset_id}")
        def orm(asset_id: str) -> dict[str, Any]:
            with Session(engine, expire_on_commit=False) as s:
                row = s.exec(select(Asset).where(Asset.organization_id == ORG, Asset.id == asset_id)).first()
                s.commit()
            assert row is not None
            return _asset(row.id)

        @app.get("/core/{asset_id}")
        def core(asset_id: str) -> dict[str, Any]:
            with engine.connect() as conn:
                row = conn.execute(
                    select(table).where(table.c.organization_id == ORG, table.c.id == asset_id)
                ).first()
            assert row is not None
            return _asset(row.id)

    if os.environ.get("ANATOMY_FILES"):
        import json as _json
        from collections.abc import Iterator as _Iterator

        from fastapi import Response
        from fastapi.responses import StreamingResponse
        from starlette.concurrency import run_in_threadpool

        files = Path(os.environ["ANATOMY_FILES"])
        files.mkdir(parents=True, exist_ok=True)
        (files / "small.bin").write_bytes(os.urandom(4096))
        (files / "small.bin.meta").write_text(_json.dumps({"sha256": "0" * 64, "contentType": "image/png"}))

        def stat(name: str) -> tuple[int, dict[str, str]]:
            st = (files / name).stat()
            return st.st_size, _json.loads((files / f"{name}.meta").read_bytes())

        def chunks(fh: Any) -> _Iterator[bytes]:
            while data := fh.read(64 * 1024):
                yield data

        @app.get("/file-blob-shape/{name}")
        async def file_blob_shape(name: str) -> Response:
            size, meta = await run_in_threadpool(stat, name)
            fh = await run_in_threadpool((files / name).open, "rb")
            iterator = chunks(fh)

            async def body() -> Any:
                try:
                    while (chunk := await run_in_threadpool(next, iterator, None)) is not None:
                        yield chunk
                finally:
                    fh.close()

            headers = {"content-length": str(size), "etag": f'"{meta["sha256"]}"'}
            return StreamingResponse(body(), media_type=meta["contentType"], headers=headers)

        def read_all(name: str) -> tuple[bytes, dict[str, str]]:
            _size, meta = stat(name)
            return (files / name).read_bytes(), meta

        @app.get("/file-one-read/{name}")
        async def file_one_read(name: str) -> Response:
            data, meta = await run_in_threadpool(read_all, name)
            return Response(data, media_type=meta["contentType"], headers={"etag": f'"{meta["sha256"]}"'})

        @app.get("/file-inline/{name}")
        async def file_inline(name: str) -> Response:
            data, meta = read_all(name)
            return Response(data, media_type=meta["contentType"], headers={"etag": f'"{meta["sha256"]}"'})

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def serve(kind: str, port: int, upstream: str | None) -> None:
    from coffer_kit.serve import Listener
    from coffer_kit.serve import serve as run

    run([Listener(build(kind, upstream), "127.0.0.1", port)], graceful_seconds=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/anatomy.py", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "anatomy.md",
        help="'' for none",
    )
    parser.add_argument("--serve", nargs=3, metavar=("KIND", "PORT", "UPSTREAM"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        kind, port, upstream = args.serve
        serve(kind, int(port), None if upstream == "-" else upstream)
        return 0

    from load import Wrk
    from servers import ensure_tools

    from coffer_testkit.testing import free_port, wait_healthy

    _, wrk_bin = ensure_tools()
    root = Path(tempfile.mkdtemp(prefix="coffer-anatomy-"))
    wrk = Wrk(wrk_bin, root)
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}

    def start(name: str, kind: str, upstream: str | None, env: dict[str, str] | None = None) -> str:
        port = free_port()
        log = open(root / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, str(port), upstream or "-"],
            stdout=log,
            stderr=log,
            env={**os.environ, **(env or {})},
        )
        procs[name] = (proc, port)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url + "/healthz", timeout=30)
        return url

    rows: list[tuple[str, str, float, float, float | None, float, float]] = []
    try:
        upstream = start("upstream", "plain", None)
        plain = start("plain", "plain", upstream)
        kit = start("kit", "kit", None)
        db = start("db", "plain", None, {"ANATOMY_DB": f"sqlite:///{root / 'anatomy.db'}"})
        files = start("files", "plain", None, {"ANATOMY_FILES": str(root / "files")})
        # The asset GET's skeleton: a kit app calling a kit app through edge's client, with no
        # work on either side (no authentication, no read): two served requests and one call.
        kit_upstream = start("kit-upstream", "kit", None)
        skeleton = start("skeleton", "kit", kit_upstream)
        # (label, serving process, URL, the process it calls or None)
        cases: list[tuple[str, str, str, str | None]] = [
            ("plain async route", "plain", plain + "/plain/ast_x", None),
            ("kit base_app (middleware, access log, metrics)", "kit", kit + "/plain/ast_x", None),
            ("3 sync deps (thread pool)", "plain", plain + "/sync-deps/ast_x", None),
            ("3 async deps", "plain", plain + "/async-deps/ast_x", None),
            ("sync endpoint + token dep + session dep", "plain", plain + "/sync-endpoint/ast_x", None),
            ("httpx call to another process", "plain", plain + "/httpx/ast_x", "upstream"),
            ("coffer_kit internal_client call (as now)", "plain", plain + "/internal/ast_x", "upstream"),
            ("aiohttp call to another process", "plain", plain + "/aiohttp/ast_x", "upstream"),
            (
                "kit route calling a kit route (internal client)",
                "skeleton",
                skeleton + "/internal/ast_x",
                "kit-upstream",
            ),
            ("SQLModel session, get by id (SQLite)", "db", db + "/orm/ast_x", None),
            ("SQLAlchemy Core, get by id (SQLite)", "db", db + "/core/ast_x", None),
            (
                "4 KiB file, blob's shape (4 thread hops, streamed)",
                "files",
                files + "/file-blob-shape/small.bin",
                None,
            ),
            (
                "4 KiB file, one read in one thread hop, Response",
                "files",
                files + "/file-one-read/small.bin",
                None,
            ),
            (
                "4 KiB file, one read on the event loop, Response",
                "files",
                files + "/file-inline/small.bin",
                None,
            ),
        ]
        for label, name, url, called in cases:
            pids = {"server": [procs[name][0].pid], "upstream": [procs[called or "upstream"][0].pid]}
            wrk.run(url, connections=8, seconds=1, servers=pids)  # warm-up
            for connections in (1, 32):
                s = wrk.run(url, connections=connections, seconds=args.seconds, servers=pids)
                both = s.server_cpu["server"] + s.server_cpu["upstream"]
                rows.append(
                    (
                        label,
                        str(connections),
                        s.rate,
                        1000 * s.server_cpu["server"] / s.rate,
                        1000 * both / s.rate if called else None,
                        s.p99_ms,
                        s.others_cpu,
                    )
                )
                print(
                    f"{label:48s} c={connections:<3d} {s.rate:8.0f} req/s  "
                    f"{1000 * s.server_cpu['server'] / s.rate:6.3f} CPU ms/req  p99 {s.p99_ms:6.1f} ms  "
                    f"(other jobs {s.others_cpu:.2f} cores)",
                    flush=True,
                )
    finally:
        for proc, _ in procs.values():
            proc.terminate()
        for proc, _ in procs.values():
            proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)
    from datetime import UTC, datetime

    from run import commit, machine

    lines = [
        "# What each part of a request costs (bench/anatomy.py)",
        "",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}",
        f"- commit: `{commit()}`",
        f"- machine: {machine()}",
        f"- wrk runs of {args.seconds}s after a 1s warm-up; CPU is the serving process's, and for a",
        "  call to another process also that process's and the serving one's together",
        "",
        "| part | connections | req/s | server CPU ms per request | with the called process | p99 ms "
        "| other jobs (cores) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, connections, rate, cpu, pair, p99, others in rows:
        both = "" if pair is None else f"{pair:.3f}"
        lines.append(
            f"| {label} | {connections} | {rate:,.0f} | {cpu:.3f} | {both} | {p99:.1f} | {others:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if args.out:
        args.out.write_text(text)
        print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
