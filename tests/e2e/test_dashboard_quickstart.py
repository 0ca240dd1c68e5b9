"""The overview's Quick start (issue 28): it tells how to install and configure the `coffer`
command line, and its lines, run as a user pastes them (with the key the Keys page showed),
upload, list and sign a file on the real stack."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

PLACEHOLDER = "cof_org_…"


def test_quick_start_installs_configures_and_runs_coffer(
    dashboard_stack: Any, dashboard_for: Any, tmp_path: Path
) -> None:
    dash = dashboard_for(dashboard_stack)
    page, _, org_id = dash.signup_with_org("quick", "Quick")
    key = dash.create_key(page, org_id, name="quick start")

    page.goto(f"/dashboard/o/{org_id}")
    snippet = page.inner_text("#quickstart")
    lines = [line.split("   #", 1)[0].strip() for line in snippet.splitlines()]
    # The installation, then the configuration by the SDK's own variables (docs/client.md).
    assert lines[0] == "pip install ./clients/python"
    assert f"export COFFER_URL={dashboard_stack.edge_url}" in lines
    assert f"export COFFER_API_KEY={PLACEHOLDER}" in lines
    assert f"# export COFFER_ORGANIZATION_ID={org_id}" in snippet
    assert "coffer configure" in page.inner_text("main")
    # The HTTP lines stay, under their own copy button.
    assert f"{dashboard_stack.edge_url}/api/folders" in page.inner_text("#quickstart-http")
    assert page.locator("button[data-copy=quickstart-http]").count() == 1

    # The rest as pasted into a shell in a directory holding photo.jpg, with the real key and
    # the workspace's `coffer` (the install itself is tests/client/test_install.py's).
    (tmp_path / "photo.jpg").write_bytes(os.urandom(4096))
    script = "set -euo pipefail\n" + "\n".join(
        line.replace(PLACEHOLDER, shlex.quote(key)) for line in lines[1:] if line and not line.startswith("#")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("COFFER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # no profile of the machine's user
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    run = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, (script, run.stdout, run.stderr)
    assert "photo.jpg" in run.stdout  # from `coffer ls /`
    assert run.stdout.strip().splitlines()[-1].startswith("http")  # from `coffer url`

    listed = dash.api(key).get("/assets").json()["assets"]
    assert [asset["name"] for asset in listed] == ["photo.jpg"]
