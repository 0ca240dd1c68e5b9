"""The client installed into a fresh virtual environment, with nothing else from the workspace,
the ways users install it: plain pip from the source directory (the README's ``pip install
./clients/python``, which fetches the build backend the pyproject names from the registry), plain
pip from the wheel ``make dist`` builds, and uv's pip with the newest releases of its dependencies
and with the oldest its ``pyproject.toml`` admits (a user's environment may already hold those).
Each time ``coffer --help`` lists the commands and the installed command works against the stack."""

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


@pytest.mark.parametrize("installer", ["pip", "pip-wheel", "uv-highest", "uv-lowest-direct"])
def test_installs_alone_in_a_fresh_venv(
    tmp_path: Path, commands: tuple[str, ...], cli: Any, installer: str
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # A copy outside the workspace, so nothing can resolve a sibling package by path.
    src = tmp_path / "coffer-client"
    shutil.copytree(
        REPO / "clients" / "python", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    if installer == "pip":
        # pip's own PEP 517 frontend: the backend comes from the registry, as for any user.
        install = [str(py), "-m", "pip", "install", str(src)]
    elif installer == "pip-wheel":
        dist = tmp_path / "dist"
        subprocess.run(["make", "-s", "-C", str(REPO), "dist", f"DIST={dist}"], check=True, env=env)
        (wheel,) = dist.glob("coffer_client-*.whl")
        assert len(list(dist.glob("coffer_client-*.tar.gz"))) == 1, "make dist builds the sdist too"
        install = [str(py), "-m", "pip", "install", str(wheel)]
    else:
        uv = shutil.which("uv")
        assert uv, "uv is needed (make setup installs it)"
        # uv's pip is pip's interface on uv's cache: the same resolution from the registry, much
        # faster; lowest-direct takes the oldest release of each dependency the package names.
        resolution = installer.removeprefix("uv-")
        install = [uv, "pip", "install", "--python", str(py), "--resolution", resolution, str(src)]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

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
