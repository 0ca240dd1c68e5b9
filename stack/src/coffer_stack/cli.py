"""``coffer-stack``: run the embedded default — all four services on this machine, one command."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from dotenv import load_dotenv

from coffer_stack.stack import Ports, Stack

PICK = "import json,sys;print(json.load(sys.stdin)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coffer-stack", description=__doc__)
    parser.add_argument("--env-file", type=Path, default=os.environ.get("COFFER_ENV_FILE") or None)
    args = parser.parse_args(argv)
    if args.env_file:
        # Variables already set win over the file, as with a shell's own environment.
        load_dotenv(args.env_file, override=False)
    data_dir = Path(os.environ.get("COFFER_DATA_DIR", ".coffer")).resolve()
    stack = Stack(
        data_dir=data_dir,
        ports=Ports.from_env(),
        base_url=os.environ.get("COFFER_BASE_URL"),
        cdn_url=os.environ.get("COFFER_CDN_URL"),
    )

    stopping = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    stack.migrate()
    try:
        stack.start()
    except Exception as exc:  # noqa: BLE001
        print(f"coffer-stack: could not start: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    print(
        f"""
Coffer is running (data in {data_dir}).
  API:  {stack.base_url or stack.edge_url}/api   (OpenAPI: {stack.edge_url}/api/openapi.json)
  CDN:  {stack.public_cdn_url}

Create a first organization and key (in another terminal):
  ORG=$(.venv/bin/coffer-auth create-org --name Demo | python3 -c "{PICK}['id'])")
  KEY=$(.venv/bin/coffer-auth create-key --org $ORG | python3 -c "{PICK}['key'])")
  curl -H "x-api-key: $KEY" {stack.edge_url}/api/folders

Press Ctrl-C to stop.""",
        file=sys.stderr,
        flush=True,
    )
    code = 0
    parent = os.getppid()
    while not stopping:
        if os.getppid() != parent:
            # Whoever started us (make, a shell) is gone without telling us: stop too.
            print("coffer-stack: parent exited; stopping", file=sys.stderr)
            break
        dead = stack.poll()
        if dead is not None:
            print(f"coffer-stack: {dead} exited; stopping the others", file=sys.stderr)
            code = 1
            break
        time.sleep(0.2)
    stack.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
