"""Private assets (CONTRACT §12) when a step of a change fails, over real processes on both
backends: whichever step fails, the asset is never more reachable than metadata says (a
failure leaves it private at the CDN), and sending the change again finishes it. The failing
step is a real unhandled exception in that service (tests/e2e/faults)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

FAULTS = Path(__file__).parent / "faults"


def test_a_failed_step_never_publishes_a_private_asset(own_stack_with: Any, admin_for: Any) -> None:
    paths = [str(FAULTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    stack = own_stack_with(PYTHONPATH=os.pathsep.join(paths))
    admin = admin_for(stack)
    org = admin("create-org", "--name", "Crash")["id"]
    key = admin("create-key", "--org", org)["key"]
    with httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=30) as api:
        asset = api.post("/api/assets", files={"file": ("f.txt", b"bytes")}).json()
        url, path = asset["publicUrl"], f"/api/assets/{asset['id']}"
        assert httpx.get(url).status_code == 200

        # To private: the store changes first; metadata's step fails.
        failed = api.patch(
            path, json={"visibility": "private"}, headers={"x-request-id": "fault-metadata-PATCH-1"}
        )
        assert failed.status_code >= 500
        assert api.get(path).json()["visibility"] == "public"  # metadata did not change...
        assert httpx.get(url).status_code == 404  # ...and the CDN already refuses the key
        done = api.patch(path, json={"visibility": "private"})
        assert (done.status_code, done.json()["publicUrl"]) == (200, None)

        # To public: metadata changes first; the store's step fails.
        failed = api.patch(path, json={"visibility": "public"}, headers={"x-request-id": "fault-blob-PUT-1"})
        assert failed.status_code >= 500
        assert api.get(path).json()["visibility"] == "public"
        assert httpx.get(url).status_code == 404  # still private at the CDN
        assert api.patch(path, json={"visibility": "public"}).status_code == 200
        assert httpx.get(url).status_code == 200
