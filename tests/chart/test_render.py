"""The chart lints, renders, validates against the Kubernetes schemas, and rejects typos."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

Docs = list[dict[str, Any]]
CHART = Path(__file__).resolve().parents[2] / "charts" / "coffer"
PRODUCTION = CHART / "examples" / "production.yaml"
KUBE_VERSION = "1.30.0"

# Kinds from CRDs (prometheus-operator, Gateway API) have no schema in the core Kubernetes
# set; test_policy.py checks their structure instead.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "HTTPRoute"}


# The one value the defaults leave to the operator in production mode.
REQUIRED = ["--set", "dashboard.trustedProxies=none"]


@pytest.mark.parametrize("values", [REQUIRED, ["-f", str(PRODUCTION)]], ids=["default", "production"])
def test_helm_lint(helm_run: Callable[..., Any], values: list[str]) -> None:
    proc = helm_run("lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART), *values)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_production_mode_needs_an_https_dashboard(helm_run: Callable[..., Any]) -> None:
    """edge refuses to start with the dashboard on an http URL in production mode (its cookies
    are Secure): the chart rendered it, and every edge pod crash-looped. It refuses as edge does."""
    proc = helm_run("template", "coffer", str(CHART), *REQUIRED, "--set", "hosts.scheme=http")
    assert proc.returncode != 0
    assert "the dashboard needs an https URL in production mode" in proc.stderr, proc.stderr
    for allowed in (["--set", "dashboard.enabled=false"], ["--set", "config.mode=local"]):
        proc = helm_run("template", "coffer", str(CHART), *REQUIRED, "--set", "hosts.scheme=http", *allowed)
        assert proc.returncode == 0, (allowed, proc.stderr)


def test_values_the_kubernetes_api_would_refuse_fail_the_render(helm_run: Callable[..., Any]) -> None:
    """An HPA whose minimum passes its maximum, or a PodDisruptionBudget's maxUnavailable that is
    neither a count nor a percentage, rendered and then failed at apply, mid-install."""
    for values, said in (
        (
            [
                "auth.autoscaling.enabled=true",
                "auth.autoscaling.minReplicas=10",
                "auth.autoscaling.maxReplicas=2",
            ],
            "minReplicas (10) is more than maxReplicas (2)",
        ),
        (["edge.pdb.maxUnavailable=banana"], "maxUnavailable"),
    ):
        sets = [arg for value in values for arg in ("--set", value)]
        proc = helm_run("template", "coffer", str(CHART), *REQUIRED, *sets)
        assert proc.returncode != 0 and said in proc.stderr, (values, proc.stderr)
    proc = helm_run("template", "coffer", str(CHART), *REQUIRED, "--set", "edge.pdb.maxUnavailable=25%")
    assert proc.returncode == 0 and "maxUnavailable: 25%" in proc.stdout, proc.stderr


def test_production_mode_needs_the_trusted_proxies_said(helm_run: Callable[..., Any]) -> None:
    """Issue 23: without them, every client behind the ingress shares its address in the
    sign-in throttle; the chart refuses, as edge does, unless they are named or waived."""
    proc = helm_run("template", "coffer", str(CHART))
    assert proc.returncode != 0
    assert "dashboard.trustedProxies must be set in production mode" in proc.stderr, proc.stderr
    for value, rendered in (("none", "none"), ("10.244.0.0/16", "10.244.0.0/16")):
        proc = helm_run("template", "coffer", str(CHART), "--set", f"dashboard.trustedProxies={value}")
        assert proc.returncode == 0, proc.stderr
        assert f'COFFER_TRUSTED_PROXIES: "{rendered}"' in proc.stdout
    # An API-only install, or local mode, has nothing to throttle by address this way.
    for switch in ("dashboard.enabled=false", "config.mode=local"):
        assert helm_run("template", "coffer", str(CHART), "--set", switch).returncode == 0, switch


def test_every_manifest_matches_the_kubernetes_schema(scenario: Docs) -> None:
    docs = scenario
    assert docs, "nothing rendered"
    errors = []
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            # strict: unknown fields are errors too, so a misspelt key cannot hide.
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    assert not errors, "\n".join(errors)


def test_default_and_production_render_what_they_should(
    render: Callable[..., Docs], production: Docs
) -> None:
    kinds = {d["kind"] for d in render()}
    assert {
        "Deployment",
        "Service",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Job",
        "Secret",
        "ConfigMap",
        "Ingress",
        "ServiceAccount",
    } <= kinds
    assert "HorizontalPodAutoscaler" not in kinds
    prod = {(d["kind"], d["metadata"]["name"]) for d in production}
    for component in ("edge", "auth", "metadata", "blob", "cdn"):
        name = f"coffer-{component}"
        for kind in (
            "Deployment",
            "Service",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "ServiceMonitor",
            "NetworkPolicy",
            "ServiceAccount",
        ):
            assert (kind, name) in prod, (kind, name)
    assert ("Secret", "coffer") not in prod, "existingSecret: the chart makes no Secret"
    assert ("PrometheusRule", "coffer") in prod
    assert ("ConfigMap", "coffer-dashboard") in prod


@pytest.mark.parametrize(
    "bad",
    [
        "edge.replica=3",  # replicas
        "blob.autoscaling.enable=true",  # enabled
        "cdn.probes.liveness.periodSecond=1",  # periodSeconds
        "networkPolicy.egres.dns.to=null",  # egress
        "image.tag=latest",
        "storage.driver=gcs",
        "expose.type=loadbalancer",
        "redis.keyPrefix=two words",
        "secrets.webhookSecretKey=too-short-to-seal-with",  # 32+ characters
        "secrets.internalToken=short",  # 32+ characters: the services refuse less in production
        "secrets.signingSecret=short",
        "networkPolicy.egress.webhooks.cidrs[0]=not-a-cidr",
        "webhooks.replica=2",
        "scrub.cronJob.verify=2",  # a share, 0 to 1
        "scrub.cronJob.rateBytes=0",
        "clamav.enable=true",  # enabled
        "clamav.streamMaxLength=25M",  # clamd's default: files above it would go unscanned
        "clamav.image.tag=latest",
    ],
)
def test_schema_rejects_typos_and_bad_values(helm_run: Callable[..., Any], bad: str) -> None:
    proc = helm_run("template", "coffer", str(CHART), *REQUIRED, "--set", bad)
    assert proc.returncode != 0, f"--set {bad} was accepted"
    assert "schema" in proc.stderr.lower() or "at '/" in proc.stderr, proc.stderr


# Blocks whose inner keys are Kubernetes fields or free-form maps, documented as a whole.
PASSTHROUGH = re.compile(
    r"^(podSecurityContext|securityContext|networkPolicy\.(ingressFrom|metricsFrom|egress\.\w+)"
    r"|\w+\.(resources|autoscaling\.behavior|probes\.\w+)|(migrations|sweeper\.cronJob|scrub\.cronJob)\.resources"
    r"|scrub\.cronJob\.pushgatewayEgress"
    r"|metrics\.dashboard\.labels)(\.|$)"
)


def inside_passthrough(path: str) -> bool:
    parent = path.rpartition(".")[0]
    return bool(parent) and bool(PASSTHROUGH.match(parent + "."))


def _schema_paths(node: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> set[str]:
    if "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    paths = set()
    if node.get("additionalProperties") is False:
        for key, sub in node.get("properties", {}).items():
            path = f"{prefix}.{key}" if prefix else key
            paths.add(path)
            paths |= _schema_paths(sub, defs, path)
    return paths


def _value_paths(node: Any, prefix: str = "") -> set[str]:
    paths = set()
    if isinstance(node, dict):
        for key, sub in node.items():
            path = f"{prefix}.{key}" if prefix else key
            paths.add(path)
            paths |= _value_paths(sub, path)
    return paths


def test_schema_and_values_yaml_describe_the_same_settings() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    in_schema = _schema_paths(schema, schema.get("definitions", {}))
    in_values = _value_paths(values)
    missing = sorted(p for p in in_schema if p not in in_values and not inside_passthrough(p))
    assert not missing, f"typed in values.schema.json but absent from values.yaml: {missing}"


def test_every_value_is_documented_in_values_yaml() -> None:
    """Each key has a comment on the line above it (or its own block is a passthrough)."""
    stack: list[tuple[int, str]] = []
    undocumented = []
    previous = ""
    for line in (CHART / "values.yaml").read_text().splitlines():
        m = re.match(r"^(\s*)([A-Za-z_][\w-]*):", line)
        if m:
            indent, key = len(m.group(1)), m.group(2)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = ".".join([k for _, k in stack] + [key])
            stack.append((indent, key))
            documented = previous.lstrip().startswith("#") or "#" in line.split(":", 1)[1]
            if not documented and not inside_passthrough(path):
                # A block of sub-settings may be introduced by its first child's comment.
                is_block = line.rstrip().endswith(":")
                if not is_block:
                    undocumented.append(path)
        previous = line  # the comment must sit right above: a blank line ends it
    assert not undocumented, f"values without a comment: {undocumented}"


def test_the_listeners_use_the_ports_the_services_default_to(production: Docs) -> None:
    """One table of ports (coffer_kit.ports); the chart's own (coffer.spec) must agree with it."""
    from coffer_kit import ports

    expected = {
        "COFFER_EDGE_PORT": ports.EDGE,
        "COFFER_EDGE_INTERNAL_PORT": ports.EDGE_INTERNAL,
        "COFFER_AUTH_PORT": ports.AUTH,
        "COFFER_METADATA_PORT": ports.METADATA,
        "COFFER_BLOB_PORT": ports.BLOB,
        "COFFER_CDN_PORT": ports.CDN,
        "COFFER_METADATA_DISPATCHER_PORT": ports.WEBHOOKS,
    }
    seen: dict[str, set[str]] = {}
    for doc in production:
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for env in container.get("env", []):
                if env["name"] in expected:
                    seen.setdefault(env["name"], set()).add(env["value"])
    assert seen == {name: {str(port)} for name, port in expected.items()}


def _memory(docs: Docs, name: str) -> dict[str, str]:
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name)
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    return {kind: resources[kind]["memory"] for kind in ("requests", "limits")}


def test_the_pods_serving_the_cdn_get_the_transform_workers_memory(render: Callable[..., Docs]) -> None:
    # Defaults: the cdn pods serve the CDN; 2 workers × 384 MiB on top of cdn's 192Mi / 512Mi.
    # blob's pods, which take uploads, start a pool of their own for images' facts (issue 50):
    # the same on top of theirs (they had none, and the workers would have found no room).
    default = render()
    assert _memory(default, "coffer-cdn") == {"requests": f"{192 + 768}Mi", "limits": f"{512 + 768}Mi"}
    assert _memory(default, "coffer-blob") == {"requests": f"{256 + 768}Mi", "limits": f"{768 + 768}Mi"}
    config = next(d for d in default if d["kind"] == "Deployment" and d["metadata"]["name"] == "coffer-cdn")
    cdn_env = {e["name"]: e.get("value") for e in config["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert cdn_env["COFFER_CDN_TRANSFORM_WORKER_MEMORY_MB"] == "384"
    assert cdn_env["COFFER_CDN_TRANSFORM_MAX_DECODED_MB"] == "200"
    together = render("--set", "cdn.enabled=false", "--set", "transforms.workers=3")  # two pools
    assert _memory(together, "coffer-blob") == {
        "requests": f"{256 + 2 * 3 * 384}Mi",
        "limits": f"{768 + 2 * 3 * 384}Mi",
    }
    off = render("--set", "transforms.enabled=false", "--set", "cdn.enabled=false")
    assert _memory(off, "coffer-blob") == {"requests": "256Mi", "limits": "768Mi"}
    env = next(d for d in off if d["kind"] == "Deployment" and d["metadata"]["name"] == "coffer-blob")
    values = {e["name"]: e.get("value") for e in env["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert values["COFFER_TRANSFORMS"] == "off"


def _budget_env(docs: Docs) -> dict[str, dict[str, str]]:
    """Each Deployment's COFFER_DATABASE_* settings of the connection budget."""
    found = {}
    for doc in docs:
        if doc.get("kind") != "Deployment":
            continue
        env = doc["spec"]["template"]["spec"]["containers"][0].get("env", [])
        budget = {
            e["name"]: e["value"] for e in env if e["name"].startswith("COFFER_DATABASE_") and "value" in e
        }
        if budget:
            found[doc["metadata"]["labels"]["app.kubernetes.io/component"]] = budget
    return found


@pytest.mark.parametrize(
    ("values", "pods"),
    [
        # Each: its replicas (autoscaling's maxReplicas) and a rolling update's surge, 25% up.
        ([], {"auth": 3, "metadata": 3, "webhooks": 3}),
        (["-f", str(PRODUCTION)], {"auth": 8, "metadata": 8, "webhooks": 8}),
        (
            ["--set", "auth.replicas=5", "--set", "webhooks.enabled=false"],
            {"auth": 7, "metadata": 3, "webhooks": 0},
        ),
        (["--set", "database.budget.maxConnections=1000"], {"auth": 3, "metadata": 3, "webhooks": 3}),
    ],
)
def test_the_connection_budget_fits_the_server(
    render: Callable[..., Docs], values: list[str], pods: dict[str, int]
) -> None:
    """docs/operations.md, "The connection budget": every pod that opens connections gets the
    same pool, the largest (at most 40) with which all of them at their most replicas, and
    the migration Jobs, stay within database.budget.maxConnections."""
    docs = render(*values)
    env = _budget_env(docs)
    assert set(env) == {c for c, n in pods.items() if n}
    pool, reads, writes = (
        int(env["auth"][f"COFFER_DATABASE_{k}"])
        for k in ("POOL_SIZE", "READ_CONNECTIONS", "WRITE_CONNECTIONS")
    )
    assert all(e["COFFER_DATABASE_POOL_SIZE"] == str(pool) for e in env.values())
    helm_values = yaml.safe_load((CHART / "values.yaml").read_text())["database"]["budget"]
    if "-f" in values:
        helm_values = {**helm_values, **yaml.safe_load(PRODUCTION.read_text())["database"]["budget"]}
    limit = next(
        (int(v.split("=")[1]) for v in values if v.startswith("database.budget.maxConnections=")), None
    )
    limit = limit or int(helm_values["maxConnections"])

    def total(p: int) -> int:
        per_pod = p + reads + writes
        return (
            (pods["auth"] + pods["metadata"]) * per_pod + pods["webhooks"] * (min(p, 4) + reads + writes) + 2
        )

    assert total(pool) <= limit
    assert pool == 40 or total(pool + 1) > limit  # the largest that fits


@pytest.mark.parametrize(
    "values",
    [
        ["--set", "auth.replicas=20"],  # 24 pods' event-loop connections alone pass 90
        ["--set", "database.budget.poolSize=30"],  # a pool said outright that does not fit
        ["--set", "metadata.autoscaling.enabled=true", "--set", "metadata.autoscaling.maxReplicas=30"],
    ],
)
def test_a_budget_past_the_server_fails_the_render(helm_run: Callable[..., Any], values: list[str]) -> None:
    proc = helm_run("template", "coffer", str(CHART), *REQUIRED, *values)
    assert proc.returncode != 0
    assert "database.budget:" in proc.stderr and "maxConnections = 90" in proc.stderr, proc.stderr


def test_helm_template_shows_the_budget(helm_run: Callable[..., Any]) -> None:
    proc = helm_run("template", "coffer", str(CHART), *REQUIRED)
    assert proc.returncode == 0, proc.stderr
    assert (
        "# The connection budget (docs/operations.md), a rollout's surge included: 3 auth + 3 metadata"
        " pods × (5 pool + 2 reads + 3 writes), 3 webhooks pods × (4 + 2 + 3), 2 migrations = 89 of 90"
    ) in proc.stdout
