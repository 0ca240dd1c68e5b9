"""Server CPU per dashboard page: the goal is under 20 ms of edge CPU per page (DASHBOARD.md).

Starts the embedded stack, signs up through the dashboard's own forms, then requests each
page ``--requests`` times one after the other and divides the CPU that edge's process spent
(from /proc) by the number of pages. That includes edge's calls to auth and metadata (the
client side) and the rendering, not auth's or metadata's own work, which is listed apart.

    .venv/bin/python bench/dashboard.py --requests 50      # a short run, ~1 min
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import cpu_seconds

from coffer_stack.stack import Ports, Stack
from coffer_testkit.testing import free_port

GOAL_MS = 20.0


def _signed_in(base: str) -> tuple[httpx.Client, str]:
    """A client with a session cookie and one organization (with a key, for the keys page)."""
    client = httpx.Client(base_url=base, headers={"sec-fetch-site": "same-origin"}, timeout=30)
    email = f"bench-{secrets.token_hex(4)}@example.com"
    answer = client.post("/dashboard/register", data={"email": email, "password": secrets.token_urlsafe(18)})
    assert answer.status_code == 303, answer.text
    # httpx keeps Secure cookies for https only; the browser keeps them on loopback.
    token = re.search(r"__Host-coffer_session=([^;]+)", answer.headers["set-cookie"])
    assert token is not None
    client.headers["cookie"] = f"__Host-coffer_session={token.group(1)}"
    page = client.get("/dashboard/orgs/new").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf is not None
    answer = client.post("/dashboard/orgs/new", data={"name": "Bench", "csrf_token": csrf.group(1)})
    org = answer.headers["location"].rsplit("/", 1)[-1]
    for name in ("ci", "deploy"):
        client.post(
            f"/dashboard/o/{org}/keys",
            data={"kind": "organization", "name": name, "csrf_token": csrf.group(1)},
        )
    return client, org


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=100, help="requests per page (default 100)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ports = Ports.drawn(free_port)
        stack = Stack(
            data_dir=Path(tmp) / "data",
            ports=ports,
            log_dir=Path(tmp) / "logs",
            extra_env={"COFFER_DASHBOARD_IP_LIMIT": "100000/minute", "COFFER_SWEEP_INTERVAL_SECONDS": "0"},
        )
        stack.migrate()
        stack.start()
        try:
            client, org = _signed_in(stack.edge_url)
            pages = {
                "overview": f"/dashboard/o/{org}",
                "keys": f"/dashboard/o/{org}/keys",
                "members": f"/dashboard/o/{org}/members",
                "usage": f"/dashboard/o/{org}/usage",
                "audit": f"/dashboard/o/{org}/audit",
                "account": "/dashboard/account",
                "login (signed out)": "/dashboard/login",
            }
            edge = [stack.processes["edge"].pid]
            others = [stack.processes[name].pid for name in ("auth", "metadata")]
            print(
                f"{args.requests} sequential requests per page; edge CPU per page (goal < {GOAL_MS:.0f} ms)"
            )
            print(f"{'page':20} {'edge CPU ms':>12} {'auth+metadata ms':>17} {'wall ms':>8}")
            worst = 0.0
            for name, path in pages.items():
                for _ in range(5):  # warm up: templates compiled, connections open
                    assert client.get(path).status_code == 200, path
                edge_before, others_before, started = (
                    cpu_seconds(edge),
                    cpu_seconds(others),
                    time.perf_counter(),
                )
                for _ in range(args.requests):
                    client.get(path)
                wall = time.perf_counter() - started
                edge_ms = 1000 * (cpu_seconds(edge) - edge_before) / args.requests
                others_ms = 1000 * (cpu_seconds(others) - others_before) / args.requests
                worst = max(worst, edge_ms)
                print(f"{name:20} {edge_ms:12.2f} {others_ms:17.2f} {1000 * wall / args.requests:8.2f}")
            print(
                f"worst page: {worst:.2f} ms of edge CPU: {'within' if worst < GOAL_MS else 'OVER'} the goal"
            )
            return 0 if worst < GOAL_MS else 1
        finally:
            stack.stop()


if __name__ == "__main__":
    sys.exit(main())
