"""Each service installs alone, the way the Dockerfile installs it, and starts.

The Dockerfile's builder stage is replayed here without a container engine: its bind
mounts, COPY lines and ``uv sync`` commands run in order in a scratch build context (with
``SERVICE`` set to each service in turn), the service's sources are then removed (the
runtime stage copies only the virtualenv), and the service's command from
``ENTRYPOINT``/``CMD`` is started from that virtualenv on loopback until ``/healthz``
answers. ``make test-images`` (tests/images) builds and runs the real images with podman.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
SERVICES = ["auth", "metadata", "blob", "edge"]
PACKAGES = {f"coffer_{s}" for s in SERVICES} | {"coffer_stack"}

# The listeners each service opens (env var naming its port -> path that must answer 200).
LISTENERS: dict[str, dict[str, str]] = {
    "auth": {"COFFER_AUTH_PORT": "/healthz"},
    "metadata": {"COFFER_METADATA_PORT": "/healthz"},
    "blob": {"COFFER_BLOB_PORT": "/healthz", "COFFER_CDN_PORT": "/healthz"},
    "edge": {"COFFER_EDGE_PORT": "/healthz", "COFFER_EDGE_INTERNAL_PORT": "/healthz"},
}
HOSTS: dict[str, list[str]] = {
    "auth": ["COFFER_AUTH_HOST"],
    "metadata": ["COFFER_METADATA_HOST"],
    "blob": ["COFFER_BLOB_HOST", "COFFER_CDN_HOST"],
    "edge": ["COFFER_EDGE_HOST"],
}
# Every workspace member (the root pyproject's globs): one build backend, one version.
MEMBERS = sorted(
    str(path.parent.relative_to(ROOT))
    for pattern in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]["members"]
    for path in ROOT.glob(f"{pattern}/pyproject.toml")
)


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Dockerfile:
    args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def last(self, op: str) -> str:
        return [v for o, v in self.stages[-1].instructions if o == op][-1]


def parse_dockerfile(path: Path) -> Dockerfile:
    """Instructions per stage, with continuation lines joined and comments dropped."""
    logical: list[str] = []
    buf = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    assert not buf, f"{path}: dangling line continuation"
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.IGNORECASE)
            assert m, line
            stages.append(Stage(name=m.group(2) or str(len(stages)), base=m.group(1)))
        elif not stages and op == "ARG":
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip()
        else:
            assert stages, f"{path}: {op} before FROM"
            stages[-1].instructions.append((op, rest.strip()))
    return Dockerfile(args=args, stages=stages)


def expand(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], value)


def dockerfile(svc: str) -> Dockerfile:
    """The Dockerfile as built with ``--build-arg SERVICE=<svc>``: every ``${SERVICE}`` expanded."""
    df = parse_dockerfile(DOCKERFILE)
    for stage in df.stages:
        stage.instructions = [(op, v.replace("${SERVICE}", svc)) for op, v in stage.instructions]
    return df


def builder_workdir(df: Dockerfile) -> str:
    return [v for op, v in df.stage("builder").instructions if op == "WORKDIR"][-1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------------- static checks


@pytest.mark.parametrize("svc", SERVICES)
def test_dockerfile_is_pinned_non_root_and_installs_only_its_service(svc: str) -> None:
    df = dockerfile(svc)
    for stage in df.stages:
        image = expand(stage.base, df.args)
        if image in {s.name for s in df.stages}:
            continue
        # A registry image must carry an exact version tag (or a digest), never `latest`.
        assert re.search(r":\d+\.\d+\.\d+[\w.-]*$|@sha256:[0-9a-f]{64}$", image), image
    assert expand(df.stages[-1].base, df.args).startswith("python:3.11."), "runtime is python 3.11"
    assert "slim" in expand(df.stages[-1].base, df.args)

    builder = df.stage("builder")
    assert ("ARG", "SERVICE") in builder.instructions, "the service is a build argument"
    copies = [v for op, v in builder.instructions if op == "COPY" and not v.startswith("--from")]
    sources = {src for line in copies for src in line.split()[:-1]}
    assert sources == {"pyproject.toml", "uv.lock", "libs/kit", f"services/{svc}"}, sources
    syncs = [v for op, v in builder.instructions if op == "RUN" and "uv sync" in v]
    assert len(syncs) == 2, "a dependency layer, then the workspace members"
    assert "--no-install-workspace" in syncs[0]
    for cmd in syncs:
        assert "--frozen" in cmd and "--no-dev" in cmd and f"--package coffer-{svc}" in cmd
    # The members are built offline, by uv itself: no build backend is fetched unlocked.
    assert "--no-editable" in syncs[1] and "--offline" in syncs[1]
    # buildah (podman build) refuses relative bind-mount targets.
    for _, target in re.findall(r"--mount=type=bind,source=([^,\s]+),target=([^,\s]+)", syncs[0]):
        assert target.startswith("/"), target

    runtime = df.stages[-1].instructions
    assert ("USER", "10001:10001") in runtime
    assert not any(op in {"RUN", "COPY"} and "secret" in v.lower() for op, v in runtime)
    assert all(
        not v.startswith("--from") or "--from=builder /app/.venv" in v for op, v in runtime if op == "COPY"
    ), "runtime takes only the virtualenv"
    assert df.last("ENTRYPOINT") == '["coffer-service"]'
    assert ("RUN", f"ln -s coffer-{svc} /app/.venv/bin/coffer-service") in builder.instructions
    env = " ".join(v for op, v in runtime if op == "ENV")
    for var in HOSTS[svc]:
        assert f"{var}=0.0.0.0" in env, f"{var} must listen on every interface in a pod"


def test_build_backend_is_the_pinned_uv() -> None:
    """Every member builds with ``uv_build`` in a range holding the Dockerfile's uv, so uv
    builds it itself (nothing downloaded); another backend would break the offline sync."""
    uv_image = parse_dockerfile(DOCKERFILE).args["UV_IMAGE"]
    version = tuple(int(p) for p in uv_image.rsplit(":", 1)[1].split("."))
    for member in MEMBERS:
        build = tomllib.loads((ROOT / member / "pyproject.toml").read_text())["build-system"]
        assert build["build-backend"] == "uv_build", member
        (requirement,) = build["requires"]
        bounds = dict(re.findall(r"(>=|<)([\d.]+)", requirement))
        low = tuple(int(p) for p in bounds[">="].split("."))
        high = tuple(int(p) for p in bounds["<"].split("."))
        assert requirement.startswith("uv_build") and low <= version < high, (member, requirement)


def test_image_tag_is_every_package_version() -> None:
    """The chart's default tag (appVersion) names the version of what the images hold."""
    app_version = yaml.safe_load((ROOT / "charts" / "coffer" / "Chart.yaml").read_text())["appVersion"]
    for member in MEMBERS:
        project = tomllib.loads((ROOT / member / "pyproject.toml").read_text())["project"]
        assert project["version"] == app_version, (member, project["version"], app_version)


def test_dockerignore_keeps_local_state_out_of_the_context() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".cache", ".coffer", "**/__pycache__"} <= ignored


# ------------------------------------------------------------------------- install and run


def uv() -> list[str]:
    """The uv command: on PATH, else the module pip installed (the Makefile's fallback)."""
    candidates = [[found] for found in [shutil.which("uv")] if found]
    for python in (sys.executable, getattr(sys, "_base_executable", ""), shutil.which("python3")):
        if python:
            candidates.append([python, "-m", "uv"])
    for command in candidates:
        probe = subprocess.run([*command, "--version"], capture_output=True)
        if probe.returncode == 0:
            return command
    pytest.fail("uv is not installed (make setup installs it)")


def replay_copy(value: str, context: Path) -> None:
    """A ``COPY src… dest`` from the repository into the scratch context."""
    *sources, dest = value.split()
    for src in sources:
        target = context / dest / Path(src).name if dest.endswith("/") else context / dest
        if (ROOT / src).is_dir():
            shutil.copytree(
                ROOT / src,
                target,
                ignore=shutil.ignore_patterns("__pycache__", "tests", ".venv", ".coffer"),
            )
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / src, target)


def replay_uv_sync(value: str, context: Path, workdir: str, env: dict[str, str]) -> None:
    """A ``RUN [--mount=type=bind…] uv sync …``: the bind mounts as copies removed after."""
    mounted = []
    for src, target in re.findall(r"--mount=type=bind,source=([^,\s]+),target=([^,\s]+)", value):
        # An absolute target is a path under the builder's WORKDIR, which the context stands for.
        in_context = (
            context / Path(target).relative_to(workdir) if target.startswith("/") else context / target
        )
        if not in_context.exists():
            shutil.copy2(ROOT / src, in_context)
            mounted.append(in_context)
    command = shlex.split(value[value.index("uv sync") :])
    proc = subprocess.run(
        [*uv(), *command[1:]], cwd=context, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{' '.join(command)}\n{proc.stderr}"
    for path in mounted:  # a bind mount leaves nothing behind in the layer
        path.unlink()


def replay_builder(svc: str, context: Path, venv: Path) -> None:
    """Run the builder stage's bind mounts, COPYs, ``uv sync`` and ``ln -s`` lines in
    ``context`` (the stage's WORKDIR) and ``venv`` (its /app/.venv)."""
    df = dockerfile(svc)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(context)),
        "UV_PROJECT_ENVIRONMENT": str(venv),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_PYTHON": "3.11",
        "UV_NO_PROGRESS": "1",
    }
    passed = ("UV_CACHE_DIR", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "PIP_INDEX_URL", "SSL_CERT_FILE")
    env |= {var: os.environ[var] for var in passed if var in os.environ}
    for op, value in df.stage("builder").instructions:
        if op == "COPY" and not value.startswith("--from"):
            replay_copy(value, context)
        elif op == "RUN" and "uv sync" in value:
            replay_uv_sync(value, context, builder_workdir(df), env)
        elif op == "RUN" and value.startswith("ln -s "):
            link_target, link = shlex.split(value)[2:]
            (venv / Path(link).relative_to("/app/.venv")).symlink_to(link_target)
        elif op == "RUN":
            # Only the SERVICE guard may run besides: anything else needs replaying here too.
            assert value.startswith("case "), f"the replay does not know: RUN {value}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each service replayed into its own context and venv, once for the module."""
    venvs: dict[str, Path] = {}
    for svc in SERVICES:
        base = tmp_path_factory.mktemp(f"image-{svc}")
        context, venv = base / "src", base / "venv"
        context.mkdir()
        try:
            replay_builder(svc, context, venv)
        except AssertionError as exc:
            venvs[svc] = base / f"FAILED: {exc}"
            continue
        # The runtime stage copies the venv alone: nothing may point back at the sources.
        shutil.rmtree(context)
        venvs[svc] = venv
    return venvs


def venv_of(installed: dict[str, Path], svc: str) -> Path:
    venv = installed[svc]
    if venv.name.startswith("FAILED"):
        pytest.fail(f"coffer-{svc} did not install: {venv.name}")
    return venv


@pytest.mark.parametrize("svc", SERVICES)
def test_service_installs_alone(installed: dict[str, Path], svc: str) -> None:
    venv = venv_of(installed, svc)
    names = sorted(PACKAGES | {"coffer_kit"})
    probe = (
        "import importlib.util, json;"
        f"print(json.dumps({{n: importlib.util.find_spec(n) is not None for n in {names!r}}}))"
    )
    out = subprocess.run(
        [venv / "bin" / "python", "-c", probe],
        capture_output=True,
        text=True,
        cwd=venv.parent,
        env={"PATH": os.environ["PATH"]},
        check=True,
    )
    importable = {name for name, ok in json.loads(out.stdout).items() if ok}
    assert importable == {"coffer_kit", f"coffer_{svc}"}, importable
    assert (venv / "bin" / f"coffer-{svc}").exists()
    dev_tools = [p for p in ("pytest", "ruff") if (venv / "bin" / p).exists()]
    assert not dev_tools, f"dev tools installed: {dev_tools}"


@pytest.mark.parametrize("svc", SERVICES)
def test_service_starts_and_answers_healthz(installed: dict[str, Path], svc: str, tmp_path: Path) -> None:
    venv = venv_of(installed, svc)
    df = dockerfile(svc)
    entrypoint = json.loads(df.last("ENTRYPOINT"))
    command = [str(venv / "bin" / entrypoint[0]), *entrypoint[1:], *json.loads(df.last("CMD"))]
    ports = {var: free_port() for var in LISTENERS[svc]}
    env = {
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "COFFER_DATA_DIR": str(tmp_path / "data"),
        "COFFER_LOG_LEVEL": "WARNING",
        **{var: "127.0.0.1" for var in HOSTS[svc]},
        **{var: str(port) for var, port in ports.items()},
    }
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        for var, path in LISTENERS[svc].items():
            url = f"http://127.0.0.1:{ports[var]}{path}"
            deadline = time.monotonic() + 30
            status = None
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    status = httpx.get(url, timeout=1).status_code
                    if status == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
            tail = log.read_text()[-3000:]
            assert status == 200, f"{url} -> {status}; exit={proc.poll()}\n{tail}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    tail = log.read_text()[-3000:]
    assert proc.returncode == 0, f"unclean exit {proc.returncode} on SIGTERM\n{tail}"
