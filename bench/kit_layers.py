"""What coffer_kit's layers add to a served request, taken apart in one process.

    uv run --frozen --no-sync python bench/kit_layers.py [--rounds 3]

Calls bench/anatomy.py's apps (the plain FastAPI route, and the same route in
``coffer_kit.app.base_app``) as ASGI apps, without a server or a socket, 30,000 times a
round, and prints the best round's CPU microseconds a request. Each variant of ``base_app``
leaves one of its parts out: the access line, the request id it mints, the metrics. Each
variant runs in a fresh process, the variants alternating, ``--rounds`` times.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

VARIANTS = ("plain", "kit", "kit without the access line", "kit without a minted id", "kit without metrics")
CALLS = 30_000


def measure(variant: str) -> float:
    sys.path.append(str(Path(__file__).resolve().parent))
    from anatomy import build

    app = build("plain" if variant == "plain" else "kit", None)
    if variant != "plain":
        import coffer_kit.middleware as middleware

        logging.getLogger().handlers[0].stream = open(os.devnull, "w")  # type: ignore[attr-defined]  # noqa: SIM115
        if "access line" in variant:
            logging.getLogger("coffer.access").disabled = True
        if "minted id" in variant:
            middleware.new_id = lambda prefix: prefix + "_01JD0000000000000000000000"  # type: ignore[assignment]
        if "metrics" in variant:
            middleware.observe_request = lambda *args: None  # type: ignore[assignment]
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 5555),
        "scheme": "http",
        "method": "GET",
        "root_path": "",
        "path": "/plain/ast_x",
        "raw_path": b"/plain/ast_x",
        "query_string": b"",
        "headers": [(b"host", b"x"), (b"user-agent", b"wrk")],
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    async def run() -> float:
        for _ in range(1_000):
            await app(dict(scope), receive, send)
        best = float("inf")
        for _ in range(5):
            started = time.process_time()
            for _ in range(CALLS):
                await app(dict(scope), receive, send)
            best = min(best, (time.process_time() - started) / CALLS * 1e6)
        return best

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/kit_layers.py", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:
        print(f"{measure(args.variant):.1f}")
        return 0
    found: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            out = subprocess.run(
                [sys.executable, __file__, "--variant", variant], check=True, capture_output=True, text=True
            )
            found[variant].append(float(out.stdout.split()[-1]))
    print("| variant | CPU µs a request (each process's best of 5 rounds) |\n|---|---|")
    for variant, values in found.items():
        print(f"| {variant} | {', '.join(f'{v:.1f}' for v in values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
