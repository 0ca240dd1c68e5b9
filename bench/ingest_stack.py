"""Safe ingest's cost through the whole embedded stack (issue 48): this tree against a checkout
from before it, two stacks running at once, uploads alternating between them round by round.

    git archive 0ea8455 | tar -x -C /tmp/before      # the commit before issue 48
    uv run --frozen --no-sync python bench/ingest_stack.py --baseline /tmp/before [--rounds 6]

Each stack is the four services as processes (``coffer_stack.Stack``), SQLite and the fs
driver, the baseline's code put first on ``PYTHONPATH``. Per round and stack: ``--small``
uploads of 4 KiB (random bytes) one after another on one connection, then one of 100 MiB.
Prints the median rates and this tree ÷ baseline. Organizations scan nothing (``off``, the
default), so what differs is detection, the ingest rules' plumbing and the idle scan relay.
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
from pathlib import Path

import httpx

from coffer_stack.stack import Ports, Stack
from coffer_testkit.testing import free_port

SMALL = 4096
BIG = 100 * 1024 * 1024


def source_path(root: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted([*root.glob("libs/*/src"), *root.glob("services/*/src")]))


def start(root: Path, code: Path | None) -> tuple[Stack, str]:
    env = {"COFFER_SWEEP_INTERVAL_SECONDS": "0", "COFFER_EDGE_RATE_LIMIT": "100000/second"}
    if code is not None:
        env["PYTHONPATH"] = source_path(code)
    stack = Stack(data_dir=root / "data", ports=Ports.drawn(free_port), log_dir=root / "logs", extra_env=env)
    stack.migrate()
    stack.start()

    def admin(*args: str) -> dict[str, str]:
        out = subprocess.run(
            [sys.executable, "-m", "coffer_auth.cli", *args], env=stack.env(), capture_output=True, check=True
        )
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    org = admin("create-org", "--name", "Bench", "--quota-bytes", str(10**12))
    key = admin("create-key", "--org", org["id"], "--name", "bench")["key"]
    return stack, key


def rate(api: httpx.Client, data: bytes, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        answer = api.post("/api/assets", files={"file": ("f.bin", data, "application/octet-stream")})
        assert answer.status_code == 201, answer.text
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/ingest_stack.py", description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--small", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="coffer-ingest-stack-"))
    small, big = os.urandom(SMALL), os.urandom(BIG)
    stacks = {"before": start(root / "before", args.baseline), "this": start(root / "this", None)}
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        clients = {
            name: httpx.Client(base_url=s.edge_url, headers={"x-api-key": key}, timeout=120)
            for name, (s, key) in stacks.items()
        }
        for r in range(args.rounds):
            for name in ("before", "this") if r % 2 == 0 else ("this", "before"):
                rates.setdefault(("4 KiB", name), []).append(rate(clients[name], small, args.small))
                rates.setdefault(("100 MiB", name), []).append(rate(clients[name], big, 1))
        print("| upload, whole stack | this tree (/s) | before issue 48 (/s) | this ÷ before |")
        print("|---|---|---|---|")
        for size in ("4 KiB", "100 MiB"):
            now, before = (statistics.median(rates[(size, n)]) for n in ("this", "before"))
            print(f"| {size} | {now:.2f} | {before:.2f} | {now / before:.3f} |")
        print("rounds:", json.dumps({f"{k[0]} {k[1]}": [round(v, 2) for v in vs] for k, vs in rates.items()}))
    finally:
        for s, _ in stacks.values():
            s.stop()


if __name__ == "__main__":
    main()
