"""``pip install ./clients/python`` into a fresh virtual environment, with nothing else from the
workspace: the package stands alone, and ``coffer --help`` lists the commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_installs_alone_in_a_fresh_venv(tmp_path: Path, commands: tuple[str, ...]) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    uv = shutil.which("uv")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # uv's pip is pip's interface on uv's cache: the same resolution from the registry, much faster.
    install = [uv, "pip", "install", "--python", str(py)] if uv else [str(py), "-m", "pip", "install", "-q"]
    # A copy outside the workspace, so nothing can resolve a sibling package by path.
    src = tmp_path / "coffer-client"
    shutil.copytree(
        REPO / "clients" / "python", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    subprocess.run([*install, str(src)], check=True, env=env, capture_output=True, timeout=600)

    freeze = subprocess.run([str(py), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True)
    names = {line.split("==")[0].lower() for line in freeze.stdout.splitlines()}
    assert "coffer-client" in names
    assert not {n for n in names if n.startswith("coffer-") and n != "coffer-client"}, names

    r = subprocess.run([str(venv / "bin" / "coffer"), "--help"], capture_output=True, text=True, env=env)
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
