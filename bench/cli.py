"""``make bench`` (second part): the ``coffer`` command line beside curl doing the same uploads.

Starts the embedded stack on free loopback ports, then, alternating, for ``--reps`` repetitions:
- small files: ``coffer upload -r DIR -j 8`` of ``--files`` files of 4 KiB, against one curl
  process uploading the same files 8 at once (``curl --parallel --parallel-max 8``, one transfer
  per file from a config file);
- one big file: ``coffer upload FILE`` of ``--big-mib`` MiB against ``curl -F file=@FILE``.
Both sides are timed from process start to exit, as a person would. Goals: the CLI at ≥ 0.8× of
parallel curl for the small files, ≥ 0.9× for the big one. Writes bench/results/client.{md,json}.

For reading those two figures, each repetition also times one upload of a single small file (a
command's start-up and exit, with next to no transfer), and every run records the process's CPU
(user + sys); the report derives the big file's rate less that start-up (the transfer alone).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import auth_cli, coffer_stack

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
JOBS = 8
# What each repetition runs on both sides: the two goals' uploads, and one small file alone.
FIGURES = ("small", "big", "one")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall-clock seconds from start to exit, and the process's CPU seconds (user + sys)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    r = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"bench: {argv[0]} failed ({r.returncode}): {r.stderr[-2000:]}")
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def curl_config(files: list[Path], url: str, key: str, path: Path) -> Path:
    """One transfer per file; ``next`` separates them. The key is in a file, not on a command line."""
    blocks = [
        f'url = "{url}"\nheader = "x-api-key: {key}"\nform = "file=@{f}"\noutput = "/dev/null"\n'
        for f in files
    ]
    path.write_text("next\n".join(blocks))
    path.chmod(0o600)
    return path


def install_alone(venv: Path) -> str:
    """The command as a user gets it: ``pip install ./clients/python`` into a fresh virtual
    environment, bytecode compiled. The workspace's .venv would not do: it holds more packages
    (click among them makes httpx import its own command line, ~0.5 s at every start)."""
    log("installing coffer-client into a fresh virtual environment")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    uv = shutil.which("uv")
    pip = [uv, "pip", "install", "--python", py, "--compile-bytecode"] if uv else [py, "-m", "pip", "install"]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run([*pip, "-q", str(REPO / "clients" / "python")], check=True, env=env)
    return str(venv / "bin" / "coffer")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/cli.py", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000, help="small files (default 1000)")
    parser.add_argument("--size", type=int, default=4096, help="bytes per small file (default 4096)")
    parser.add_argument("--big-mib", type=int, default=100, help="MiB of the big file (default 100)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per figure (default 3)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="where results go")
    args = parser.parse_args(argv)
    curl = shutil.which("curl")
    if not curl:
        raise SystemExit("bench: needs curl")

    root = Path(tempfile.mkdtemp(prefix="coffer-bench-cli-"))
    coffer = install_alone(root / "venv")
    stack = coffer_stack(root, {})
    # Per figure and client, per repetition: wall-clock seconds and CPU seconds.
    walls: dict[str, dict[str, list[float]]] = {f: {"coffer": [], "curl": []} for f in FIGURES}
    cpus: dict[str, dict[str, list[float]]] = {f: {"coffer": [], "curl": []} for f in FIGURES}
    try:
        log("starting the embedded stack")
        stack.migrate()
        stack.start()
        org = auth_cli(stack, "create-org", "--name", "bench-cli", "--quota-bytes", str(1 << 40))
        key = str(auth_cli(stack, "create-key", "--org", str(org["id"]))["key"])
        env = {**os.environ, "COFFER_URL": stack.edge_url, "COFFER_API_KEY": key}
        # An installed command has its bytecode (pip compiles it at install); with this variable
        # set (some shells and agents set it), every start would compile ~1,300 modules again,
        # about a second of a run. The warm-up below writes the bytecode once.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        small = root / "small"
        small.mkdir()
        files = []
        for i in range(args.files):
            f = small / f"f{i:05}.bin"
            f.write_bytes(os.urandom(args.size))
            files.append(f)
        big = root / "big.bin"
        with big.open("wb") as fh:
            for _ in range(args.big_mib):
                fh.write(os.urandom(MIB))
        url = f"{stack.edge_url}/api/assets"
        config = curl_config(files, url, key, root / "curl.cfg")
        key_header = root / "key.hdr"
        key_header.write_text(f"x-api-key: {key}\n")
        curl_one = [curl, "-sS", "--fail", "-H", f"@{key_header}", "-o", "/dev/null", "-F"]
        commands = {
            "coffer": {
                "small": [coffer, "upload", "-r", str(small), "-j", str(JOBS), "-q"],
                "big": [coffer, "upload", str(big), "-q"],
                "one": [coffer, "upload", str(files[0]), "-q"],
            },
            "curl": {
                "small": [
                    curl,
                    "-sS",
                    "--fail",
                    "--parallel",
                    "--parallel-max",
                    str(JOBS),
                    "-K",
                    str(config),
                ],
                "big": [*curl_one, f"file=@{big}", url],
                "one": [*curl_one, f"file=@{files[0]}", url],
            },
        }
        log(f"warm-up, then {args.reps} repetitions: {args.files} × {args.size} B, 1 × {args.big_mib} MiB")
        for who in commands:
            timed(commands[who]["one"], env)
        for rep in range(args.reps):
            # Alternate who goes first, so a drift in the machine's load spreads over both.
            for who in ("coffer", "curl") if rep % 2 == 0 else ("curl", "coffer"):
                for figure in FIGURES:
                    wall, cpu = timed(commands[who][figure], env)
                    walls[figure][who].append(wall)
                    cpus[figure][who].append(cpu)
            log(
                f"rep {rep + 1}: "
                + ", ".join(
                    f"{f} {walls[f]['coffer'][-1]:.2f} vs {walls[f]['curl'][-1]:.2f} s" for f in FIGURES
                )
            )
    finally:
        stack.stop()
        shutil.rmtree(root, ignore_errors=True)

    amount = {"small": args.files, "big": args.big_mib * MIB / 1e6}
    rows = []
    summary: dict[str, dict[str, object]] = {}
    for figure, unit, goal in (("small", "files/s", 0.8), ("big", "MB/s", 0.9)):
        rates = {who: [amount[figure] / w for w in walls[figure][who]] for who in ("coffer", "curl")}
        c, u = statistics.median(rates["coffer"]), statistics.median(rates["curl"])
        ratio = c / u
        summary[figure] = {
            "coffer": c,
            "curl": u,
            "ratio": ratio,
            "goal": goal,
            "unit": unit,
            "raw": rates,
        }
        label = f"{args.files} × {args.size} B, -j {JOBS}" if figure == "small" else f"1 × {args.big_mib} MiB"
        mark = "✓" if ratio >= goal else "✗"
        # Three places: 0.797 must not read as the goal of 0.8 it misses.
        rows.append(f"| {label} | {c:.1f} {unit} | {u:.1f} {unit} | {ratio:.3f}× | ≥ {goal}× {mark} |")

    def med(table: dict[str, dict[str, list[float]]], figure: str, who: str) -> float:
        return statistics.median(table[figure][who])

    # The big file's rate with one command's start-up and exit taken out: the transfer alone.
    transfer = {
        who: amount["big"] / max(med(walls, "big", who) - med(walls, "one", who), 1e-9)
        for who in ("coffer", "curl")
    }
    summary["startup"] = {
        who: {"wall": med(walls, "one", who), "cpu": med(cpus, "one", who)} for who in commands
    }
    summary["cpu"] = {figure: {who: med(cpus, figure, who) for who in commands} for figure in FIGURES}
    summary["transfer"] = {**transfer, "ratio": transfer["coffer"] / transfer["curl"], "unit": "MB/s"}
    reading = [
        f"| one {args.size} B upload, start to exit | {med(walls, 'one', 'coffer'):.3f} s "
        f"| {med(walls, 'one', 'curl'):.3f} s | |",
        *(
            f"| CPU (user + sys), {label} | {med(cpus, figure, 'coffer'):.2f} s "
            f"| {med(cpus, figure, 'curl'):.2f} s | |"
            for figure, label in (
                ("small", f"{args.files} × {args.size} B"),
                ("big", f"1 × {args.big_mib} MiB"),
                ("one", f"one {args.size} B upload"),
            )
        ),
        f"| 1 × {args.big_mib} MiB less one start-up (the transfer) | {transfer['coffer']:.1f} MB/s "
        f"| {transfer['curl']:.1f} MB/s | {transfer['coffer'] / transfer['curl']:.2f}× |",
    ]
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reps": args.reps,
        "method": "process start to exit, medians; embedded stack on loopback; everything on one machine",
    }
    md = "\n".join(
        [
            "# coffer CLI against curl",
            "",
            f"{meta['date']}, {args.reps} repetitions, medians, timed from process start to exit.",
            "",
            "| upload | coffer | curl | ratio | goal |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "Reading them (medians of the same repetitions; no goals):",
            "",
            "| figure | coffer | curl | ratio |",
            "|---|---|---|---|",
            *reading,
            "",
        ]
    )
    full = args.files == 1000 and args.big_mib == 100
    stem = "client" if full else "client-reduced"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(md)
    (args.out / f"{stem}.json").write_text(json.dumps({**meta, "figures": summary}, indent=2) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
