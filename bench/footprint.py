"""Issue 16's machine-load-proof figures, old code against new in one run.

Measured in RSS and CPU time, not wall time, so they hold on a shared machine:

- **idle RSS** of each service (VmRSS from /proc) after start, one 4 KiB upload and 3 s idle;
- **CPU per request** (utime + stime of every service process, from /proc, over a wrk run,
  divided by the requests it completed) for ``GET /api/assets/:id``, a public CDN GET of a
  4 KiB file, and the minimal FastAPI route (bench/reference_app.py) as the reference;
- **4 KiB uploads, 16 connections**: CPU per upload as above, and files/s next to the disk's
  own durable single-writer rate (bench/run.py's "4 KiB file + fsync, one writer"), measured
  in the same repetition. The rate is wall time: on a shared machine read it as a ratio of
  figures taken together, never alone.

``--figures`` picks some (``get``, ``upload``; default both).

``--base REF`` (default ``main``) runs a second stack from that commit's ``libs`` and
``services`` (``git archive`` into a temporary directory, put first on ``PYTHONPATH``), started
and measured in the same run, alternating with this work tree's, so every change is priced
A/B. ``python bench/footprint.py [--base REF] [--reps 5] [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import IDLE_SECONDS, Sample, Wrk, cpu_seconds, idle_rss_mib
from run import SMALL, multipart_body, small_fsync_rate
from servers import ReferenceApp, auth_cli, coffer_stack, find_tool

REPO = Path(__file__).resolve().parent.parent


def source_tree(ref: str, into: Path) -> str:
    """``ref``'s libs and services under ``into``; the PYTHONPATH that puts them first."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "libs", "services"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return os.pathsep.join(str(p) for p in sorted(into.glob("*/*/src")))


class Target:
    def __init__(self, label: str, root: Path, env: dict[str, str]) -> None:
        self.label = label
        self.stack = coffer_stack(root, {"COFFER_SWEEP_INTERVAL_SECONDS": "0", **env})
        self.key = ""
        self.asset: dict[str, object] = {}

    def start(self) -> None:
        self.stack.migrate()
        org = auth_cli(self.stack, "create-org", "--name", "footprint", "--quota-bytes", str(2**40))
        self.key = str(auth_cli(self.stack, "create-key", "--org", str(org["id"]))["key"])
        self.stack.start(timeout=240)  # generous: a shared machine can be very busy
        response = httpx.post(
            self.stack.edge_url + "/api/assets",
            headers={"x-api-key": self.key},
            files={"file": ("small.bin", os.urandom(4096), "application/octet-stream")},
            timeout=60,
        )
        response.raise_for_status()
        self.asset = response.json()

    def pids(self) -> dict[str, list[int]]:
        return {name: [proc.pid] for name, proc in self.stack.processes.items()}

    def rss(self) -> dict[str, float]:
        return idle_rss_mib({name: proc.pid for name, proc in self.stack.processes.items()})


def cpu_ms_per_request(
    wrk: Wrk,
    url: str,
    pids: dict[str, list[int]],
    seconds: float,
    key: str | None,
    *,
    connections: int = 32,
    upload: tuple[Path, str] | None = None,
) -> dict[str, float]:
    """CPU milliseconds per request of each process in ``pids``, their ``sum``, and ``rate``
    (requests/s). ``upload``: POST this multipart body file with this content type."""
    headers = {"x-api-key": key} if key else {}
    before = {name: cpu_seconds(p) for name, p in pids.items()}
    if upload is None:
        sample: Sample = wrk.run(url, connections=connections, seconds=seconds, servers={}, headers=headers)
    else:
        body, content_type = upload
        sample = wrk.run(
            url,
            connections=connections,
            seconds=seconds,
            servers={},
            headers={**headers, "content-type": content_type},
            method="POST",
            body_file=body,
        )
    if sample.errors or not sample.requests:
        raise RuntimeError(f"{url}: {sample.errors} errors in {sample.requests} requests")
    spent = {name: (cpu_seconds(p) - before[name]) / sample.requests * 1000 for name, p in pids.items()}
    return {**spent, "sum": sum(spent.values()), "rate": sample.rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--base", default="main", help="the commit to compare with (default main)")
    parser.add_argument("--no-base", action="store_true", help="measure this work tree only")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the new stack")
    parser.add_argument("--figures", default="get,upload", help="comma-separated: get, upload")
    args = parser.parse_args()
    want = set(args.figures.split(","))
    wrk_bin = find_tool("wrk")
    if not wrk_bin:
        raise SystemExit("footprint: wrk is needed (apt-get install wrk)")
    with tempfile.TemporaryDirectory(prefix="coffer-footprint-") as tmp:
        root = Path(tmp)
        wrk = Wrk(wrk_bin, root / "wrk")
        wrk.workdir.mkdir()
        reference = ReferenceApp(log=root / "reference.log")
        targets = [Target("new", root / "new", dict(a.split("=", 1) for a in args.env))]
        if not args.no_base:
            path = source_tree(args.base, root / "base-src")
            targets.insert(0, Target(f"base ({args.base})", root / "base", {"PYTHONPATH": path}))
        try:
            reference.start()
            for target in targets:
                target.start()
            time.sleep(IDLE_SECONDS)
            ref_rss = idle_rss_mib({"app": reference.pids()[0]})["app"]
            print(f"\nidle RSS after start and one upload (MiB); minimal route: {ref_rss:.1f}")
            rss = {t.label: t.rss() for t in targets}
            names = list(targets[0].stack.processes)
            print("| service | " + " | ".join(rss) + " |")
            print("|---|" + "---|" * len(rss))
            for name in [*names, "sum"]:
                cells = [f"{sum(r.values()) if name == 'sum' else r[name]:.1f}" for r in rss.values()]
                print(f"| {name} | " + " | ".join(cells) + " |")
            figures: dict[str, list[dict[str, float]]] = {}
            upload = (root / "small-multipart.bin", multipart_body(root / "small-multipart.bin", SMALL))
            disk: list[float] = []
            for _ in range(args.reps):
                figures.setdefault("minimal route", []).append(
                    cpu_ms_per_request(
                        wrk, f"{reference.url}/api/assets/x", {"app": reference.pids()}, args.seconds, None
                    )
                )
                if "upload" in want:
                    disk.append(small_fsync_rate(targets[-1].stack.data_dir, seconds=1.0))
                for t in targets:
                    pids = t.pids()
                    if "get" in want:
                        asset_url = f"{t.stack.edge_url}/api/assets/{t.asset['id']}"
                        figures.setdefault(f"GET /api/assets/:id, {t.label}", []).append(
                            cpu_ms_per_request(wrk, asset_url, pids, args.seconds, t.key)
                        )
                        figures.setdefault(f"public 4 KiB GET, {t.label}", []).append(
                            cpu_ms_per_request(wrk, str(t.asset["publicUrl"]), pids, args.seconds, None)
                        )
                    if "upload" in want:
                        figures.setdefault(f"4 KiB upload, 16 connections, {t.label}", []).append(
                            cpu_ms_per_request(
                                wrk,
                                f"{t.stack.edge_url}/api/assets",
                                pids,
                                args.seconds,
                                t.key,
                                connections=16,
                                upload=upload,
                            )
                        )
            ref = statistics.median(f["sum"] for f in figures["minimal route"])
            print(
                f"\nCPU ms per request (median of {args.reps} wrk runs of {args.seconds:g}s, 32 connections)"
            )
            print("| figure | CPU ms/request (median, min–max) | ÷ minimal route | per process (medians) |")
            print("|---|---|---|---|")
            for label, runs in figures.items():
                values = [f["sum"] for f in runs]
                med = statistics.median(values)
                parts = ", ".join(
                    f"{name} {statistics.median(f[name] for f in runs):.3f}"
                    for name in runs[0]
                    if name not in ("sum", "rate")
                )
                spread = f"{min(values):.3f}–{max(values):.3f}"
                print(f"| {label} | {med:.3f} ({spread}) | {med / ref:.2f}× | {parts} |")
            if disk:
                spread = f"{min(disk):.0f}–{max(disk):.0f}"
                print(
                    f"\nrequests/s, median (min–max); the disk's 4 KiB file + fsync, one writer, in the "
                    f"same repetitions: {statistics.median(disk):.0f} ({spread}) files/s"
                )
                print("| figure | requests/s | ÷ the disk's rate, per repetition (median) |")
                print("|---|---|---|")
                for label, runs in figures.items():
                    if label.startswith("4 KiB upload"):
                        rates = [f["rate"] for f in runs]
                        ratio = statistics.median(r / d for r, d in zip(rates, disk, strict=True))
                        print(
                            f"| {label} | {statistics.median(rates):.1f} ({min(rates):.1f}–{max(rates):.1f}) "
                            f"| {ratio:.2f}× |"
                        )
        finally:
            for target in targets:
                target.stack.stop()
            reference.stop()


if __name__ == "__main__":
    main()
