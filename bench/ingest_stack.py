"""Safe ingest's cost through the whole embedded stack (issue 48): two stacks of this tree
running at once, media type detection on in one and off in the other, uploads alternating
between them round by round (the same run, so the machine's load falls on both alike).

    uv run --frozen --no-sync python bench/ingest_stack.py [--rounds 8] [--small 200]
    uv run --frozen --no-sync python bench/ingest_stack.py --baseline /tmp/before

"Off" puts a ``sitecustomize`` first on the off stack's ``PYTHONPATH`` that, in blob's process
only, replaces ``coffer_blob.detect.detect`` with a function answering
``application/octet-stream`` at once: the pipeline without libmagic's call, everything else
the same code. ``--baseline DIR`` compares with another checkout instead (``git archive 0ea8455
| tar -x -C /tmp/before`` is main before issue 48), its code put first on ``PYTHONPATH``.

Each stack is the four services as processes (``coffer_stack.Stack``), SQLite and the fs
driver. Per round and stack: ``--small`` uploads of 4 KiB (random bytes) one after another on
one connection, then one of 100 MiB. Prints the median rates, on ÷ off (or this ÷ baseline),
the 100 MiB rate in MB/s, and the machine's load average before and after. Organizations scan
nothing (``off``, the default).
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


# The off stack's sitecustomize: detection answers "unknown" at once, in blob's process only
# (sys.orig_argv: ``python -m coffer_blob.cli serve``).
DETECTION_OFF = """
import sys
if "coffer_blob.cli" in sys.orig_argv:
    from coffer_blob import detect
    detect.detect = lambda head: detect.UNKNOWN
"""


def start(root: Path, pythonpath: str | None) -> tuple[Stack, str]:
    env = {"COFFER_SWEEP_INTERVAL_SECONDS": "0", "COFFER_EDGE_RATE_LIMIT": "100000/second"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    stack = Stack(data_dir=root / "data", ports=Ports.drawn(free_port), log_dir=root / "logs", extra_env=env)
    stack.migrate()
    stack.start(timeout=240)  # a shared machine at load 20+ starts a service in a minute or more

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


def load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench/ingest_stack.py", description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="compare with this checkout instead of detection off")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--small", type=int, default=200)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="coffer-ingest-stack-"))
    small, big = os.urandom(SMALL), os.urandom(BIG)
    if args.baseline is not None:
        names, other = ("this", "before"), source_path(args.baseline)
    else:
        names = ("on", "off")
        (root / "off-site").mkdir()
        (root / "off-site" / "sitecustomize.py").write_text(DETECTION_OFF)
        other = str(root / "off-site")
    print(f"load average before: {load()} ({os.cpu_count()} cores)")
    stacks = {names[0]: start(root / names[0], None), names[1]: start(root / names[1], other)}
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        clients = {
            name: httpx.Client(base_url=s.edge_url, headers={"x-api-key": key}, timeout=120)
            for name, (s, key) in stacks.items()
        }
        if args.baseline is None:  # the off stack's blob really answers "unknown"
            sniffed = clients["off"].post("/api/assets", files={"file": ("a.gif", b"GIF89a" + bytes(32))})
            assert sniffed.json()["detectedType"] == "application/octet-stream", sniffed.text
            sniffed = clients["on"].post("/api/assets", files={"file": ("a.gif", b"GIF89a" + bytes(32))})
            assert sniffed.json()["detectedType"] == "image/gif", sniffed.text
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                rates.setdefault(("4 KiB", name), []).append(rate(clients[name], small, args.small))
                rates.setdefault(("100 MiB", name), []).append(rate(clients[name], big, 1))
        a, b = names
        print(f"| upload, whole stack | {a} (/s) | {b} (/s) | {a} ÷ {b} |")
        print("|---|---|---|---|")
        for size in ("4 KiB", "100 MiB"):
            first, second = (statistics.median(rates[(size, n)]) for n in names)
            extra = (
                f" ({first * BIG / 1e6:.0f} vs {second * BIG / 1e6:.0f} MB/s)" if size == "100 MiB" else ""
            )
            print(f"| {size} | {first:.2f} | {second:.2f} | {first / second:.3f}{extra} |")
        print("rounds:", json.dumps({f"{k[0]} {k[1]}": [round(v, 2) for v in vs] for k, vs in rates.items()}))
        print(f"load average after: {load()}")
    finally:
        for s, _ in stacks.values():
            s.stop()


if __name__ == "__main__":
    main()
