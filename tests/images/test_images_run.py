"""The four images run against each other, as the chart runs them (``make test-images``).

Production mode on the machine's PostgreSQL and Redis and a real S3 API server (moto on
loopback): the migrations run from the auth and metadata images, then the four
containers start with the chart's security settings (its uid, a read-only root with a
tmpfs on /tmp, every capability dropped, no new privileges) on free loopback ports with
host networking. A file uploaded through edge comes back byte for byte from the CDN
listener and is gone after a delete; SIGTERM stops every container with exit code 0.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytestmark = [pytest.mark.images, pytest.mark.timeout(1200)]

# Listener -> (service, env var of its port). blob runs the CDN listener too (--role all).
LISTENERS = {
    "auth": ("auth", "COFFER_AUTH_PORT"),
    "metadata": ("metadata", "COFFER_METADATA_PORT"),
    "blob": ("blob", "COFFER_BLOB_PORT"),
    "cdn": ("blob", "COFFER_CDN_PORT"),
    "edge": ("edge", "COFFER_EDGE_PORT"),
    "edge_internal": ("edge", "COFFER_EDGE_INTERNAL_PORT"),
}
HOST_VARS = {
    "auth": ["COFFER_AUTH_HOST"],
    "metadata": ["COFFER_METADATA_HOST"],
    "blob": ["COFFER_BLOB_HOST", "COFFER_CDN_HOST"],
    "edge": ["COFFER_EDGE_HOST"],
}
STOP_SECONDS = 60
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "coffer"
SERVICES = ("auth", "metadata", "blob", "edge")
# The chart's default tag, which conftest.py tags the built images with.
APP_VERSION = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])
Podman = Any  # conftest.Podman: podman with its stores in a temporary directory


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def security_flags() -> list[str]:
    """The chart's pod and container security contexts, as podman run flags."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    pod, container = values["podSecurityContext"], values["securityContext"]
    assert pod["runAsNonRoot"] and container["runAsNonRoot"]
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"  # podman's default profile
    flags = ["--network=host", f"--user={pod['runAsUser']}:{pod['runAsGroup']}"]
    if container["readOnlyRootFilesystem"]:
        # The chart's only writable path is an emptyDir on /tmp.
        flags += ["--read-only", "--read-only-tmpfs=false", "--mount=type=tmpfs,destination=/tmp"]
    flags += [f"--cap-drop={cap}" for cap in container["capabilities"]["drop"]]
    if container["allowPrivilegeEscalation"] is False:
        flags.append("--security-opt=no-new-privileges")
    return flags


@dataclass
class Stack:
    podman: Podman
    images: dict[str, str]
    ports: dict[str, int]
    env_files: dict[str, Path]

    def url(self, listener: str) -> str:
        return f"http://127.0.0.1:{self.ports[listener]}"

    def run_once(self, svc: str, *args: str) -> str:
        """``coffer-<svc> args…`` in a throwaway container of the image; its stdout."""
        return self.podman(
            "run", "--rm", *security_flags(), f"--env-file={self.env_files[svc]}", self.images[svc], *args
        ).stdout

    def inspect(self, svc: str, template: str) -> str:
        return self.podman.try_("inspect", "--format", template, f"coffer-{svc}").stdout.strip()

    def logs(self, svc: str) -> str:
        proc = self.podman.try_("logs", f"coffer-{svc}")
        return (proc.stdout + proc.stderr)[-4000:]

    def wait_healthy(self, listener: str, timeout: float = 60) -> None:
        svc = LISTENERS[listener][0]
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"{self.url(listener)}/healthz", timeout=2)
                if response.status_code == 200:
                    return
                last = response.status_code
            except httpx.HTTPError as exc:
                last = exc
            if self.inspect(svc, "{{.State.Running}}") != "true":
                pytest.fail(f"coffer-{svc} stopped while starting:\n{self.logs(svc)}", pytrace=False)
            time.sleep(0.2)
        pytest.fail(f"{listener} /healthz: {last!r} after {timeout} s\n{self.logs(svc)}", pytrace=False)


@pytest.fixture(scope="module")
def stack(
    podman: Podman,
    images: dict[str, str],
    fresh_database: Callable[[str], str],
    s3_server: Any,
    redis_url: str,
    report: dict[str, str],
) -> Iterator[Stack]:
    started = time.monotonic()
    ports = {listener: free_port() for listener in LISTENERS}
    url = {listener: f"http://127.0.0.1:{port}" for listener, port in ports.items()}
    shared = {
        "COFFER_MODE": "production",
        "COFFER_LOG_LEVEL": "INFO",
        "COFFER_INTERNAL_TOKEN": secrets.token_urlsafe(32),
        "COFFER_BASE_URL": url["edge"],
        "COFFER_CDN_URL": url["cdn"],
        # Production mode wants the sign-up mode said out loud (auth and edge refuse to start).
        "COFFER_DASHBOARD_SIGNUP": "invite",
        # And who may name the client in X-Forwarded-For: here, nobody (no proxy in front).
        "COFFER_TRUSTED_PROXIES": "none",
    }
    own = {
        "auth": {"COFFER_AUTH_DATABASE_URL": fresh_database("images_auth")},
        "metadata": {
            "COFFER_METADATA_DATABASE_URL": fresh_database("images_metadata"),
            # Production mode refuses to start without the key that seals webhook secrets.
            "COFFER_METADATA_WEBHOOK_SECRET_KEY": secrets.token_urlsafe(36),
        },
        "blob": {"COFFER_SIGNING_SECRET": secrets.token_urlsafe(32), **s3_server.env(s3_server.new_bucket())},
        "edge": {
            "COFFER_AUTH_URL": url["auth"],
            "COFFER_METADATA_URL": url["metadata"],
            "COFFER_BLOB_URL": url["blob"],
            "COFFER_REDIS_URL": redis_url,
            # The dashboard's Secure cookie needs https; in a cluster TLS ends at the ingress.
            # Here the test speaks plain http to the container, as the ingress would.
            "COFFER_DASHBOARD_URL": f"https://127.0.0.1:{ports['edge']}/dashboard",
        },
    }
    env_files: dict[str, Path] = {}
    for svc in SERVICES:
        # Loopback only: host networking would otherwise open the ports on every interface.
        env = {**shared, **own[svc], **dict.fromkeys(HOST_VARS[svc], "127.0.0.1")}
        env |= {var: str(ports[name]) for name, (owner, var) in LISTENERS.items() if owner == svc}
        env_files[svc] = podman.home / "env" / f"{svc}.env"
        env_files[svc].write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        env_files[svc].chmod(0o600)
    stack = Stack(podman, images, ports, env_files)

    # What the chart's pre-install hook Jobs do, from the same images.
    for svc in ("auth", "metadata"):
        stack.run_once(svc, "migrate")
    for svc in SERVICES:
        podman(
            "run",
            "--detach",
            f"--name=coffer-{svc}",
            *security_flags(),
            f"--env-file={env_files[svc]}",
            images[svc],
        )
    for listener in LISTENERS:
        stack.wait_healthy(listener)
    report["migrations, then the four up and healthy"] = f"{time.monotonic() - started:6.1f} s"
    try:
        yield stack
    finally:
        podman.try_("rm", "--force", "--time", "0", *(f"coffer-{svc}" for svc in SERVICES))


def test_the_chart_defaults_name_the_images_built_here(podman: Podman, images: dict[str, str]) -> None:
    """Same Dockerfile, same version: the chart's default images are these four tags, and
    each holds its service and coffer-kit at that version, and no tools or other service."""
    helm = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-helm.sh")], capture_output=True, text=True, timeout=600
    )
    assert helm.returncode == 0, helm.stderr
    state = ROOT / ".cache" / "helm"
    rendered = subprocess.run(
        # The one value production mode leaves to the operator (tests/chart checks the refusal).
        [helm.stdout.split()[-1], "template", "coffer", str(CHART), "--set", "dashboard.trustedProxies=none"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **{f"HELM_{k}_HOME": str(state / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}},
    )
    assert rendered.returncode == 0, rendered.stderr
    used = set(re.findall(r'^\s+image: "?([^"\s]+)"?$', rendered.stdout, re.M))
    assert used == set(images.values()), used
    assert set(images.values()) == {f"coffer-{svc}:{APP_VERSION}" for svc in SERVICES}

    probe = (
        "import importlib.metadata as m, json, shutil\n"
        "dists = {d.metadata['Name']: d.version for d in m.distributions()}\n"
        "coffer = {n: v for n, v in dists.items() if n.startswith('coffer')}\n"
        "tools = [t for t in ('uv', 'pytest', 'ruff', 'pip') if shutil.which(t)]\n"
        "print(json.dumps({'versions': coffer, 'tools': tools}))\n"
    )
    for svc, image in images.items():
        out = podman("run", "--rm", "--network=host", "--entrypoint=python", image, "-c", probe).stdout
        found = json.loads(out)
        assert found["versions"] == {"coffer-kit": APP_VERSION, f"coffer-{svc}": APP_VERSION}, (svc, found)
        assert found["tools"] == [], (svc, found)


def test_every_listener_answers_healthz(stack: Stack) -> None:
    for listener in LISTENERS:
        response = httpx.get(f"{stack.url(listener)}/healthz", timeout=5)
        assert response.status_code == 200, (listener, response.text)


def status_fields(pid: str) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def test_each_container_runs_as_the_chart_says(stack: Stack) -> None:
    """The service process itself (the container's first process): uid and gid 10001, no
    capabilities at all, no new privileges, seccomp on; its root is read-only, /tmp is not."""
    write_probe = (
        "import errno, json, os\n"
        "result = {}\n"
        "for place in ('/', '/app', '/app/.venv/lib', '/etc', '/tmp'):\n"
        "    try:\n"
        "        with open(os.path.join(place, 'probe'), 'w') as f: f.write('x')\n"
        "        result[place] = 'written'\n"
        "    except OSError as exc:\n"
        "        result[place] = errno.errorcode[exc.errno]\n"
        "print(json.dumps(result))\n"
    )
    for svc in SERVICES:
        pid = stack.inspect(svc, "{{.State.Pid}}")
        status = status_fields(pid)
        assert status["Uid"].split() == ["10001"] * 4, (svc, status["Uid"])
        assert status["Gid"].split() == ["10001"] * 4, (svc, status["Gid"])
        for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[caps], 16) == 0, (svc, caps, status[caps])
        assert status["NoNewPrivs"] == "1", svc
        assert status["Seccomp"] == "2", svc  # filter mode: podman's default profile
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1].endswith(b"coffer-service"), svc
        mounts = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
        root = [fields for fields in mounts if fields[4] == "/"][-1]  # the one on top
        assert "ro" in root[5].split(","), (svc, root)

        out = stack.podman("exec", f"coffer-{svc}", "python", "-c", write_probe).stdout
        assert json.loads(out) == {
            "/": "EROFS",
            "/app": "EROFS",
            "/app/.venv/lib": "EROFS",
            "/etc": "EROFS",
            "/tmp": "written",
        }, (svc, out)


def test_upload_through_edge_download_through_the_cdn_then_delete(stack: Stack) -> None:
    org = json.loads(stack.run_once("auth", "create-org", "--name", "Images"))
    key = json.loads(stack.run_once("auth", "create-key", "--org", org["id"], "--name", "images"))
    data = os.urandom(3 * 1024 * 1024 + 17)
    with httpx.Client(base_url=stack.url("edge"), headers={"x-api-key": key["key"]}, timeout=60) as api:
        response = api.post("/api/assets", files={"file": ("photo.bin", data, "application/octet-stream")})
        assert response.status_code == 201, response.text
        asset = response.json()
        assert asset["publicUrl"].startswith(stack.url("cdn") + "/"), asset["publicUrl"]

        download = httpx.get(asset["publicUrl"], timeout=60)
        assert download.status_code == 200, download.text
        assert download.content == data

        assert api.delete(f"/api/assets/{asset['id']}").status_code == 200
        assert api.get(f"/api/assets/{asset['id']}").status_code == 404
    assert httpx.get(asset["publicUrl"], timeout=60).status_code == 404


def test_the_edge_image_serves_the_dashboard(stack: Stack) -> None:
    """Templates and static files are in the image, not only in the source tree."""
    page = httpx.get(f"{stack.url('edge')}/dashboard/login", timeout=10)
    assert page.status_code == 200 and "Sign in to Coffer" in page.text, page.text[:500]
    static = re.findall(r'(?:href|src)="([^"]*/dashboard/static/[^"]*)"', page.text)
    assert static, "the login page links no static file"
    for link in static:
        path = urllib.parse.urlsplit(link).path
        assert httpx.get(f"{stack.url('edge')}{path}", timeout=10).status_code == 200, link


def test_sigterm_stops_every_container_cleanly(stack: Stack) -> None:
    """Edge first, as a rollout would; each exits 0 on SIGTERM, well before podman's SIGKILL."""
    for svc in reversed(SERVICES):
        started = time.monotonic()
        stack.podman("stop", f"--time={STOP_SECONDS}", f"coffer-{svc}", timeout=STOP_SECONDS + 30)
        took = time.monotonic() - started
        code = stack.inspect(svc, "{{.State.ExitCode}}")
        assert code == "0" and took < STOP_SECONDS, (
            f"coffer-{svc}: exit {code} after {took:.1f} s\n{stack.logs(svc)}"
        )
