"""Where the time goes: py-spy on Coffer's processes while one benchmark load runs.

    uv run --frozen --no-sync python bench/profile.py SCENARIO [--seconds 15] [--production]

Starts the same stack as bench/run.py, drives one load from a separate process, samples the
named services with py-spy (``uvx py-spy``; nothing is added to the project's dependencies)
and prints, per service, the functions holding the most samples: "self" where the thread was
when sampled, "total" where it was below. Collapsed stacks (gzip; flamegraph input: one
stack and its sample count per line) and summaries go to bench/results/profiles/.

py-spy samples wall time of threads that are not asleep: a thread waiting for a CPU or for
the GIL counts where it waits (often right after waking another thread: ``Condition.notify``,
``_write_to_self``, socket ``write``). On a loaded two-core machine read those frames as
"hand-offs", and take CPU cost per request from bench/anatomy.py and the harness instead;
``--gil`` samples only the thread holding the GIL, which is closer to where Python spends CPU
(time in C with the GIL released, such as SQLite's fsync, is then not seen at all).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import python_client
from run import BIG, DEFAULT_POSTGRES, REPO, SMALL, Bench, log, multipart_body
from servers import ensure_tools

# scenario: (services to sample, what the load is)
SCENARIOS: dict[str, tuple[list[str], str]] = {
    "asset-get": (["edge", "metadata"], "wrk, 32 connections: GET /api/assets/:id"),
    "cdn-small": (["blob"], "wrk, 32 connections: public GET of a 4 KiB file"),
    "upload-small": (["edge", "metadata", "blob"], "wrk, 16 connections: POST /api/assets, 4 KiB"),
    "list": (["edge", "metadata"], "wrk, 1 connection: GET /api/assets?limit=50 at 100k assets"),
    "upload-big": (["edge", "blob"], "bench/client.py: 100 MiB uploads, one after another"),
    "upload-tus": (
        ["edge", "blob", "metadata"],
        "bench/client.py: 100 MiB uploads through tus in 5 MiB chunks, one after another",
    ),
    "webhooks": (
        ["metadata", "dispatcher"],
        "wrk, 16 connections: POST /api/assets, 4 KiB, into an organization with one webhook "
        "endpoint (bench/webhook_receiver.py)",
    ),
}


def py_spy() -> list[str]:
    found = shutil.which("py-spy")
    return [found] if found else ["uvx", "py-spy"]


# Leaf frames of a thread that waits rather than runs: left out, so shares are of busy time.
IDLE = ("Condition.wait (threading.py", "EpollSelector.select (selectors.py", "Event.wait (threading.py")


def summarize(collapsed: Path, top: int) -> str:
    """Self and total shares of busy samples per function, from py-spy's collapsed output."""
    own: Counter[str] = Counter()
    below: Counter[str] = Counter()
    total = idle = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        # The first frame is the process/thread label py-spy adds; skip it in the totals.
        frames = [f for f in frames if not f.startswith(("process ", "thread "))] or frames
        if frames[-1].startswith(IDLE):
            idle += n
            continue
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            below[frame] += n
    if not total:
        return "(no samples)\n"
    lines = [f"{total} busy samples ({idle} idle ones left out)", "", "self%  total%  function"]
    for frame, n in own.most_common(top):
        lines.append(f"{100 * n / total:5.1f}  {100 * below[frame] / total:6.1f}  {frame}")
    lines += ["", "total%  function (inclusive, top)"]
    for frame, n in below.most_common(top * 2):
        lines.append(f"{100 * n / total:6.1f}  {frame}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/profile.py", description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--connections", type=int, default=None, help="wrk connections (default: the figure's)"
    )
    parser.add_argument(
        "--gil",
        action="store_true",
        help="sample only the thread holding the GIL: where Python spends CPU, not where it waits",
    )
    parser.add_argument("--production", action="store_true")
    parser.add_argument(
        "--database-url", default=os.environ.get("COFFER_BENCH_DATABASE_URL", DEFAULT_POSTGRES)
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "profiles")
    parser.add_argument(
        "--stack-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for Coffer's services (e.g. OTEL_EXPORTER_OTLP_ENDPOINT to profile tracing)",
    )
    args = parser.parse_args(argv)
    # The 100,000 seeded assets only for the listing.
    args.reps, args.warmup, args.only = 1, 2.0, (None if args.scenario == "list" else {args.scenario})
    args.seconds_load = args.seconds

    nginx_bin, wrk_bin = ensure_tools()
    root = Path(tempfile.mkdtemp(prefix="coffer-profile-"))
    os.chmod(root, 0o755)
    bench = Bench(args, nginx_bin, wrk_bin, root)
    services, load = SCENARIOS[args.scenario]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.scenario + (f"-c{args.connections}" if args.connections else "")
    stem += "-production" if args.production else ""
    stem += "-env" if args.stack_env else ""
    stem += "-gil" if args.gil else ""
    cleanup = contextlib.ExitStack()
    try:
        bench.start()
        asset = bench.upload_one(SMALL)  # also fills edge's auth cache for the key
        bench.warm_auth()
        pids = bench.coffer_pids()
        load_seconds = args.seconds + 4
        run_load = _load(bench, args.scenario, asset, pids, args.connections, cleanup)
        run_load(2)  # warm-up
        log(f"profiling {', '.join(services)} under: {load}")
        result: dict[str, Any] = {}
        loader = threading.Thread(target=lambda: result.update(sample=run_load(load_seconds)))
        loader.start()
        time.sleep(1)  # the load is running before sampling starts
        recorders = []
        # The embedded default runs the dispatcher inside metadata's process: sampled there.
        services = [name for name in services if name in bench.stack.processes]
        for name in services:
            out = args.out / f"{stem}.{name}.collapsed.txt"
            cmd = [
                *py_spy(),
                "record",
                "--nonblocking",
                "--function",
                *(["--gil"] if args.gil else []),
                "-r",
                str(args.rate),
                "-d",
                str(args.seconds),
                "-f",
                "raw",
                "-o",
                str(out),
                "-p",
                str(bench.stack.processes[name].pid),
            ]
            recorders.append(
                (name, out, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            )
        for name, _out, proc in recorders:
            _, err = proc.communicate(timeout=args.seconds + 120)
            if proc.returncode != 0:
                raise RuntimeError(f"py-spy on {name} failed: {err.decode()[-1000:]}")
        loader.join()
        sample = result.get("sample")
        if args.connections:
            load += f" (run with {args.connections} connections)"
        header = f"# {args.scenario}: {load}\n# load: {sample}\n"
        report = [header]
        for name, out, _ in recorders:
            text = f"## {name} (pid {bench.stack.processes[name].pid})\n{summarize(out, args.top)}"
            (args.out / f"{stem}.{name}.summary.txt").write_text(header + text)
            report.append(text)
            with open(out, "rb") as raw, gzip.open(f"{out}.gz", "wb") as packed:
                shutil.copyfileobj(raw, packed)
            out.unlink()
        print("\n".join(report))
    finally:
        cleanup.close()
        bench.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _load(  # type: ignore[no-untyped-def]
    bench: Bench,
    scenario: str,
    asset: dict[str, Any],
    pids: dict[str, list[int]],
    conns: int | None,
    cleanup: contextlib.ExitStack,
):
    stack = bench.stack
    if scenario == "asset-get":
        return lambda s: bench.wrk.run(
            f"{stack.edge_url}/api/assets/{asset['id']}",
            connections=conns or 32,
            seconds=s,
            servers=pids,
            headers=bench.headers(),
        )
    if scenario == "cdn-small":
        return lambda s: bench.wrk.run(asset["publicUrl"], connections=conns or 32, seconds=s, servers=pids)
    if scenario == "list":
        return lambda s: bench.wrk.run(
            f"{stack.edge_url}/api/assets?limit=50",
            connections=conns or 1,
            seconds=s,
            servers=pids,
            headers=bench.headers(bench.list_key),
        )
    if scenario in ("upload-small", "webhooks"):
        key = bench.key
        if scenario == "webhooks":
            key, receiver = bench.hooked_org("profile-hooks")
            cleanup.callback(receiver.stop)
        body = bench.root / "wrk" / "small-multipart.bin"
        content_type = multipart_body(body, SMALL)
        return lambda s: bench.wrk.run(
            f"{stack.edge_url}/api/assets",
            connections=conns or 16,
            seconds=s,
            servers=pids,
            method="POST",
            body_file=body,
            headers={**bench.headers(key), "content-type": content_type},
        )
    job = {
        "size": BIG,
        "count": 1000,
        "concurrency": 1,
        "url": stack.edge_url + "/api/assets",
        "mode": "multipart",
        "headers": bench.headers(),
    }
    if scenario == "upload-tus":
        job.update(url=stack.edge_url + "/api/uploads/tus", mode="tus", chunk=5 * 1024 * 1024)
    return lambda s: python_client({**job, "duration": s}, servers=pids)[0]["statuses"]


if __name__ == "__main__":
    sys.exit(main())
