"""``pip install ./clients/python`` into a fresh virtual environment, with nothing else from the
workspace: the package stands alone, ``coffer --help`` lists the commands, and the commands work
against the real stack both with the newest releases of its dependencies and with the oldest its
``pyproject.toml`` admits (a user's environment may already hold those)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("resolution", ["highest", "lowest-direct"])
def test_installs_alone_in_a_fresh_venv(
    tmp_path: Path, commands: tuple[str, ...], cli: Any, resolution: str
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    uv = shutil.which("uv")
    assert uv, "uv is needed (make setup installs it)"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # A copy outside the workspace, so nothing can resolve a sibling package by path.
    src = tmp_path / "coffer-client"
    shutil.copytree(
        REPO / "clients" / "python", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    # uv's pip is pip's interface on uv's cache: the same resolution from the registry, much faster;
    # lowest-direct takes the oldest release of each dependency the package names.
    install = [uv, "pip", "install", "--python", str(py), "--resolution", resolution, str(src)]
    subprocess.run(install, check=True, env=env, capture_output=True, timeout=600)

    freeze = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    names = {line.split("==")[0].lower() for line in freeze.stdout.splitlines()}
    assert "coffer-client" in names
    assert not {n for n in names if n.startswith("coffer-") and n != "coffer-client"}, names

    coffer = str(venv / "bin" / "coffer")
    r = subprocess.run([coffer, "--help"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    for command in commands:
        assert f"  {command} " in r.stdout
    r = subprocess.run(
        [str(py), "-c", "import coffer_client, coffer_client.cli; print(coffer_client.Coffer.__name__)"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.stdout.strip() == "Coffer", r.stderr

    # The installed command against the stack: what a user does first.
    def run(*argv: str) -> str:
        done = subprocess.run(
            [coffer, *argv], capture_output=True, text=True, env={**env, **cli.env}, timeout=120
        )
        assert done.returncode == 0, (argv, freeze.stdout, done.stderr)
        return done.stdout

    data = os.urandom(3 << 20)
    (tmp_path / "photo.jpg").write_bytes(data)
    run("mkdir", "/installed")
    asset = json.loads(run("upload", str(tmp_path / "photo.jpg"), "--to", "/installed", "--json"))[
        "uploaded"
    ][0]
    assert "photo.jpg" in run("ls", "/installed")
    assert run("url", asset["id"], "--expires", "10m").startswith("http")
    run("download", "/installed/photo.jpg", "-o", str(tmp_path / "back.jpg"), "-q")
    assert hashlib.sha256((tmp_path / "back.jpg").read_bytes()).digest() == hashlib.sha256(data).digest()
