"""The two receivers of docs/webhooks.md, copied out of the page and run as they are (Python
under uvicorn, JavaScript under Node with the npm ``standardwebhooks`` package), against real
deliveries from a real stack: an upload's ``asset.created`` is verified and handled, a
redelivery is answered but handled once, and a forged or unsigned request is refused.

The operator allows http and allowlists 127.0.0.0/8 here, for the receivers.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from coffer_testkit.testing import free_port
from coffer_testkit.webhooks import LOOPBACK_ENV

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "webhooks.md"
WEBHOOKJS = Path(__file__).parent / "webhookjs"


def example(name: str) -> str:
    """The code block that follows ``<!-- {name}: …-->`` in docs/webhooks.md."""
    found = re.search(rf"<!-- {re.escape(name)}:[^\n]*-->\n```\w+\n(.*?)\n```", DOC.read_text(), re.S)
    assert found, f"no {name} example in {DOC}"
    return found.group(1) + "\n"


@pytest.fixture(scope="module")
def hook_stack(running_stack_factory: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with running_stack_factory(tmp_path_factory.mktemp("receivers"), **LOOPBACK_ENV) as s:
        yield s


@pytest.fixture(scope="session")
def webhookjs() -> Path:
    """standardwebhooks from the npm registry, as the lock file pins it (make test installs it)."""
    if not (WEBHOOKJS / "node_modules" / "standardwebhooks").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=WEBHOOKJS, check=True)
    return WEBHOOKJS / "node_modules"


class Running:
    """A receiver process and the lines it printed."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def printed(self, text: str) -> list[str]:
        return [line for line in list(self.lines) if text in line]


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(params=["python", "node"])
def language(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def start(language: str, folder: Path, port: int, secret: str, request: pytest.FixtureRequest) -> Running:
    env = {**os.environ, "COFFER_WEBHOOK_SECRET": secret, "PORT": str(port), "PYTHONUNBUFFERED": "1"}
    if language == "python":
        (folder / "receiver.py").write_text(example("receiver.py"))
        uvicorn = [sys.executable, "-m", "uvicorn", "receiver:app"]
        command = [*uvicorn, "--host", "127.0.0.1", "--port", str(port)]
    else:
        modules = request.getfixturevalue("webhookjs")
        (folder / "node_modules").symlink_to(modules, target_is_directory=True)
        (folder / "receiver.mjs").write_text(example("receiver.mjs"))
        command = ["node", "receiver.mjs"]
    proc = subprocess.Popen(
        command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return Running(proc)


def test_the_documented_receiver_verifies_real_deliveries(
    hook_stack: Any,
    admin_for: Any,
    language: str,
    tmp_path: Path,
    until: Any,
    request: pytest.FixtureRequest,
) -> None:
    admin = admin_for(hook_stack)
    org = admin("create-org", "--name", f"Receivers {language}")["id"]
    key = admin("create-key", "--org", org)["key"]
    api = httpx.Client(base_url=hook_stack.edge_url + "/api", headers={"x-api-key": key}, timeout=30)
    port = free_port()
    made = api.post(
        "/webhooks",
        json={
            "url": f"http://127.0.0.1:{port}/coffer-hook",
            "events": ["asset.created"],
            "description": language,
        },
    )
    assert made.status_code == 201, made.text
    hook, secret = made.json()["id"], made.json()["secret"]

    receiver = start(language, tmp_path, port, secret, request)
    try:
        until(lambda: listening(port) or receiver.proc.poll() is not None, timeout=30)
        assert receiver.proc.poll() is None, "\n".join(receiver.lines)
        url = f"http://127.0.0.1:{port}/coffer-hook"

        # Refusals: no signature, a signature by another secret, a body changed after signing.
        body = json.dumps({"type": "asset.created", "id": "evt_forged", "data": {}})
        assert httpx.post(url, content=body).status_code == 400
        other = Webhook("whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk=")
        now = int(time.time())
        forged = {
            "webhook-id": "evt_forged",
            "webhook-timestamp": str(now),
            "webhook-signature": other.sign("evt_forged", _at(now), body),
            "content-type": "application/json",
        }
        assert httpx.post(url, content=body, headers=forged).status_code == 400
        signed = {**forged, "webhook-signature": Webhook(secret).sign("evt_forged", _at(now), body)}
        assert httpx.post(url, content=body.replace("forged", "altered"), headers=signed).status_code == 400
        assert not receiver.printed("evt_forged") and not receiver.printed("new asset")

        # A real delivery: an upload's event, verified and handled.
        asset = api.post("/assets", files={"file": ("cat.png", b"\x89PNG not really", "image/png")})
        assert asset.status_code == 201, asset.text
        asset_id = asset.json()["id"]
        until(lambda: receiver.printed(f"new asset {asset_id} cat.png"), timeout=15)

        def log() -> list[dict[str, Any]]:
            answer = api.get(f"/webhooks/{hook}/deliveries")
            assert answer.status_code == 200, answer.text
            return answer.json()["deliveries"]  # type: ignore[no-any-return]

        (first,) = until(log)
        assert (first["result"], first["responseStatus"]) == ("succeeded", 204)
        assert first["eventType"] == "asset.created"

        # Redelivered: answered 204 again, handled once (the same webhook-id).
        again = api.post(f"/webhooks/{hook}/deliveries/{first['deliveryId']}/redeliver")
        assert again.status_code in (200, 201, 202), again.text
        until(lambda: len(log()) == 2, timeout=15)
        assert all(d["result"] == "succeeded" and d["responseStatus"] == 204 for d in log())
        assert len(receiver.printed(f"new asset {asset_id}")) == 1
    finally:
        receiver.proc.terminate()
        receiver.proc.wait(timeout=10)
        api.close()


def _at(seconds: int) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, tz=UTC)
