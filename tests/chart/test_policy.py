"""Policy over the rendered manifests: what a platform team's review would insist on."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHART = Path(__file__).resolve().parents[2] / "charts" / "coffer"
Docs = list[dict[str, Any]]
Doc = dict[str, Any]

COMPONENTS = ["edge", "auth", "metadata", "blob", "cdn", "webhooks"]
# Container ports the public may reach: edge's API listener and the CDN listener.
PUBLIC_PORTS = {8080, 8090}
INTERNAL_PATHS = ("/metrics", "/internal", "/healthz", "/readyz")
# Every Coffer service drains in-flight requests for up to this long on SIGTERM.
# The webhook dispatcher lets its sends finish: 10 s each, then records them.
SERVICE_DRAIN_SECONDS = {"edge": 300, "blob": 300, "cdn": 300, "auth": 30, "metadata": 30, "webhooks": 12}


def of_kind(docs: Docs, kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: Docs, kind: str, name: str) -> Doc:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert found, f"no {kind}/{name}"
    return found[0]


def pod_specs(docs: Docs) -> Iterator[tuple[Doc, Doc]]:
    """(workload, pod template) of every Deployment, Job and CronJob."""
    for d in docs:
        if d["kind"] in ("Deployment", "Job"):
            yield d, d["spec"]["template"]
        elif d["kind"] == "CronJob":
            yield d, d["spec"]["jobTemplate"]["spec"]["template"]


def component(doc: Doc) -> str:
    return doc["metadata"]["labels"]["app.kubernetes.io/component"]


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector matches these labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        value = labels.get(expr["key"])
        if expr["operator"] == "In" and value not in expr["values"]:
            return False
        if expr["operator"] == "NotIn" and value in expr["values"]:
            return False
        if expr["operator"] == "Exists" and expr["key"] not in labels:
            return False
        if expr["operator"] == "DoesNotExist" and expr["key"] in labels:
            return False
    return True


def env_of(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container.get("env", [])}


# ------------------------------------------------------------------------ pods and images


def test_pods_are_non_root_read_only_and_drop_every_capability(scenario: Docs) -> None:
    for workload, template in pod_specs(scenario):
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        spec = template["spec"]
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True, where
        assert pod_sc["runAsUser"] != 0, where
        assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault", where
        assert spec["automountServiceAccountToken"] is False, where
        assert spec["enableServiceLinks"] is False, where
        assert not spec.get("hostNetwork") and not spec.get("hostPID"), where
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert not sc.get("privileged"), where
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{where}: a writable /tmp under the read-only root"


def test_every_container_sets_requests_and_a_memory_limit(scenario: Docs) -> None:
    for workload, template in pod_specs(scenario):
        for c in template["spec"]["containers"]:
            res = c.get("resources", {})
            where = f"{workload['metadata']['name']}/{c['name']}"
            assert res.get("requests", {}).get("cpu"), where
            assert res.get("requests", {}).get("memory"), where
            assert res.get("limits", {}).get("memory"), where


def test_every_image_is_pinned(scenario: Docs) -> None:
    for _, template in pod_specs(scenario):
        for c in template["spec"]["containers"]:
            image = c["image"]
            m = re.fullmatch(
                r"(?P<repo>[^@:]+(?::\d+/[^@:]+)?)(?::(?P<tag>[\w][\w.-]*))?(?:@sha256:[0-9a-f]{64})?", image
            )
            assert m and (m.group("tag") or "@sha256:" in image), f"unpinned image {image}"
            assert m.group("tag") != "latest", image


def test_deployments_probe_health_and_drain_longer_than_uploads(scenario: Docs) -> None:
    for d in of_kind(scenario, "Deployment"):
        name = component(d)
        if name == "clamav":  # not a Coffer service: test_clamav_runs_clamd_and_freshclam
            continue
        spec = d["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", name
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz", name
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            assert c[probe]["httpGet"]["port"] in ports, f"{name} {probe} on an unknown port"
        if name == "cdn":  # the public CDN host has no /readyz: the pod's internal listener does
            assert c["readinessProbe"]["httpGet"]["port"] == "http", c["readinessProbe"]
        sleep = int(c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ["", "0"])[1])
        grace = spec["terminationGracePeriodSeconds"]
        assert grace > SERVICE_DRAIN_SECONDS[name] + sleep, f"{name}: grace {grace}s"


def test_pods_roll_when_configuration_changes(render: Callable[..., Docs]) -> None:
    def checksums(*args: str) -> dict[str, dict[str, str]]:
        return {
            d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"]
            for d in of_kind(render(*args), "Deployment")
        }

    base = checksums()
    changed_config = checksums("--set", "config.logLevel=DEBUG")
    changed_secret = checksums("--set", "database.auth.url=postgresql+psycopg://a:b@c/d")
    assert base == checksums(), "renders are stable"
    for name, ann in base.items():
        assert changed_config[name]["checksum/config"] != ann["checksum/config"], name
        assert changed_secret[name]["checksum/secret"] != ann["checksum/secret"], name


# --------------------------------------------------------------------- scaling and spread


def test_hpas_scale_each_component_alone_and_own_the_replica_count(production: Docs) -> None:
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in of_kind(production, "HorizontalPodAutoscaler")}
    deployments = {d["metadata"]["name"]: d for d in of_kind(production, "Deployment")}
    assert set(hpas) == set(deployments), "one HPA per component"
    for target, hpa in hpas.items():
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
        assert "replicas" not in deployments[target]["spec"], f"{target}: replicas set under an HPA"
    # Uploads scale apart from the API: blob's HPA is its own object on its own Deployment.
    blob, edge = hpas["coffer-blob"], hpas["coffer-edge"]
    assert blob is not edge and blob["metadata"]["name"] == "coffer-blob"
    assert component(blob) == "blob" and component(edge) == "edge"


def test_replicas_are_set_when_autoscaling_is_off(render: Callable[..., Docs]) -> None:
    docs = render("--set", "blob.autoscaling.enabled=true")
    assert "replicas" not in named(docs, "Deployment", "coffer-blob")["spec"]
    assert named(docs, "Deployment", "coffer-edge")["spec"]["replicas"] == 2
    (hpa,) = of_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "coffer-blob"


def test_cdn_pods_serve_downloads_and_blob_pods_uploads(
    production: Docs, render: Callable[..., Docs]
) -> None:
    def args(docs: Docs, name: str) -> list[str]:
        return named(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["args"]

    assert args(production, "coffer-blob") == ["serve", "--role", "api"]
    assert args(production, "coffer-cdn") == ["serve", "--role", "cdn"]
    blob_image = named(production, "Deployment", "coffer-blob")["spec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    cdn_image = named(production, "Deployment", "coffer-cdn")["spec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    assert blob_image == cdn_image, "cdn runs the blob image"
    # By default too (issue 44): image transforms run in the cdn pods, never in those that
    # take uploads, so a transform can never restart them.
    default = render()
    assert args(default, "coffer-blob") == ["serve", "--role", "api"]
    assert args(default, "coffer-cdn") == ["serve", "--role", "cdn"]
    together = render("--set", "cdn.enabled=false")
    assert args(together, "coffer-blob") == ["serve", "--role", "all"]
    assert not [d for d in of_kind(together, "Deployment") if d["metadata"]["name"] == "coffer-cdn"]


def test_pdbs_and_topology_spread_cover_every_deployment(scenario: Docs) -> None:
    pdbs = of_kind(scenario, "PodDisruptionBudget")
    for d in of_kind(scenario, "Deployment"):
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert [p for p in pdbs if selects(p["spec"]["selector"], labels)], d["metadata"]["name"]
        spread = d["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in spread} >= {"kubernetes.io/hostname"}
        assert all(selects(c["labelSelector"], labels) for c in spread)


# -------------------------------------------------------------------------- exposure


def _service_ports(docs: Docs) -> dict[tuple[str, str | int], int]:
    """(service, port name or number) -> the container port it reaches."""
    deployments = of_kind(docs, "Deployment")
    out: dict[tuple[str, str | int], int] = {}
    for svc in of_kind(docs, "Service"):
        pods = [
            d
            for d in deployments
            if selects({"matchLabels": svc["spec"]["selector"]}, d["spec"]["template"]["metadata"]["labels"])
        ]
        assert pods, f"Service {svc['metadata']['name']} selects no pods"
        for port in svc["spec"]["ports"]:
            for d in pods:
                container_ports = {
                    p["name"]: p["containerPort"]
                    for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]
                }
                target = port["targetPort"]
                number = container_ports[target] if isinstance(target, str) else target
                out[(svc["metadata"]["name"], port["name"])] = number
                out[(svc["metadata"]["name"], port["port"])] = number
    return out


def test_routes_reach_only_the_public_listeners(scenario: Docs) -> None:
    ports = _service_ports(scenario)
    routed = []
    for ing in of_kind(scenario, "Ingress"):
        for rule in ing["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                port = backend["port"].get("name") or backend["port"].get("number")
                routed.append((rule["host"], path["path"], ports[(backend["name"], port)]))
    for route in of_kind(scenario, "HTTPRoute"):
        assert route["spec"]["parentRefs"], "an HTTPRoute attaches to a Gateway"
        for rule in route["spec"]["rules"]:
            for ref in rule["backendRefs"]:
                for match in rule["matches"]:
                    routed.append(
                        (
                            route["spec"]["hostnames"][0],
                            match["path"]["value"],
                            ports[(ref["name"], ref["port"])],
                        )
                    )
    if not routed:
        pytest.skip("nothing exposed in this scenario")
    for host, path, container_port in routed:
        assert container_port in PUBLIC_PORTS, f"{host}{path} reaches internal port {container_port}"
        assert not path.startswith(INTERNAL_PATHS), f"{host}{path} routes an internal path"
    by_port: dict[int, set[str]] = {}
    for _, path, port in routed:
        by_port.setdefault(port, set()).add(path)
    # edge's public port: the API, the dashboard, and exactly "/" (a redirect to it).
    assert by_port == {8080: {"/api", "/dashboard", "/"}, 8090: {"/"}}, routed


def test_the_cdn_service_never_exposes_blob_internal_api(render: Callable[..., Docs]) -> None:
    # blob's pods serving the CDN host too: the CDN's Service has the CDN port alone.
    together = render("--set", "cdn.enabled=false")
    cdn = named(together, "Service", "coffer-cdn")
    assert [p["port"] for p in cdn["spec"]["ports"]] == [8090]
    blob = named(together, "Service", "coffer-blob")
    assert [p["port"] for p in blob["spec"]["ports"]] == [8083]
    # The cdn pods (the default): the CDN's Service selects them alone, whose :8083 serves
    # health and metrics only (`--role cdn`), never blob's internal API.
    cdn = named(render(), "Service", "coffer-cdn")
    assert cdn["spec"]["selector"]["app.kubernetes.io/component"] == "cdn"
    assert (
        named(render(), "Service", "coffer-blob")["spec"]["selector"]["app.kubernetes.io/component"] == "blob"
    )


# ----------------------------------------------------------------------- network policy


def test_default_deny_covers_every_pod_of_the_release(scenario: Docs) -> None:
    deny = named(scenario, "NetworkPolicy", "coffer-default-deny")
    assert set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert not deny["spec"].get("ingress") and not deny["spec"].get("egress")
    for workload, template in pod_specs(scenario):
        assert selects(deny["spec"]["podSelector"], template["metadata"]["labels"]), workload["metadata"][
            "name"
        ]


def test_every_component_has_its_own_allow_list(scenario: Docs) -> None:
    policies = [
        p for p in of_kind(scenario, "NetworkPolicy") if p["metadata"]["name"] != "coffer-default-deny"
    ]
    for workload, template in pod_specs(scenario):
        labels = template["metadata"]["labels"]
        mine = [p for p in policies if selects(p["spec"]["podSelector"], labels)]
        assert mine, f"no NetworkPolicy for {workload['metadata']['name']}"


def _ingress_peers(docs: Docs, name: str) -> list[tuple[Doc, set[Any]]]:
    policy = named(docs, "NetworkPolicy", name)
    return [
        (peer, {p["port"] for p in rule.get("ports", [])})
        for rule in policy["spec"].get("ingress") or []
        for peer in rule["from"]
    ]


def test_only_edge_calls_auth_metadata_and_blob(scenario: Docs) -> None:
    release = {"app.kubernetes.io/name": "coffer", "app.kubernetes.io/instance": "coffer"}
    edge = {**release, "app.kubernetes.io/component": "edge"}
    sweeper = {**release, "app.kubernetes.io/component": "sweeper"}
    # The production example lets Prometheus in the monitoring namespace scrape; auth,
    # metadata and blob serve /metrics on their internal port, so it may reach that port.
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    for name in ("coffer-auth", "coffer-metadata", "coffer-blob"):
        for peer, ports in _ingress_peers(scenario, name):
            if "http" not in ports:
                continue  # blob's public CDN port: test_public_listeners_...
            if peer == prometheus:
                continue
            assert set(peer) == {"podSelector"}, f"{name}: internal port open to {peer}"
            callers = [edge] if name == "coffer-auth" else [edge, sweeper]
            assert any(selects(peer["podSelector"], c) for c in callers), f"{name}: {peer}"
            assert not selects(peer["podSelector"], {**release, "app.kubernetes.io/component": "cdn"})


def test_public_listeners_admit_only_the_ingress_controller(production: Docs) -> None:
    for name, port in (("coffer-edge", "http"), ("coffer-cdn", "cdn")):
        peers = [peer for peer, ports in _ingress_peers(production, name) if port in ports]
        assert peers == [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
        ], name


def test_egress_only_to_what_each_component_needs(production: Docs) -> None:
    def egress_ports(name: str) -> set[int]:
        policy = named(production, "NetworkPolicy", name)
        return {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}

    dns, otlp = {53}, {4318}
    assert egress_ports("coffer-edge") == dns | otlp | {8081, 8082, 8083, 6379}
    assert egress_ports("coffer-auth") == dns | otlp | {5432}
    assert egress_ports("coffer-metadata") == dns | otlp | {5432}
    assert egress_ports("coffer-blob") == dns | otlp | {443, 3310}  # 3310: clamd (issue 48)
    assert egress_ports("coffer-cdn") == dns | otlp | {443}  # the CDN never scans
    assert egress_ports("coffer-webhooks") == dns | otlp | {5432, 443}  # 443: webhook receivers
    assert egress_ports("coffer-migrate") == dns | {5432}


def test_the_scrub_runs_metadata_then_blob_and_reaches_only_the_stores(render: Callable[..., Docs]) -> None:
    """Issue 47: metadata's manifest in an init container, blob's scrub reading it; each with its
    own service's secrets; egress to the database, the store and the Pushgateway, nothing in."""
    assert not [d for d in render() if d["metadata"]["name"] == "coffer-scrub"]  # off by default
    production = ["-f", str(CHART / "examples" / "production.yaml")]
    docs = render(
        *production, "--set", "scrub.cronJob.enabled=true", "--set", "scrub.cronJob.pushgateway=pg:9091"
    )
    job = named(docs, "CronJob", "coffer-scrub")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (manifest,) = pod["initContainers"]
    (scrub,) = pod["containers"]
    assert (
        manifest["image"].rsplit("/", 1)[-1].startswith("coffer-metadata")
        and manifest["args"][0] == "manifest"
    )
    assert scrub["image"].rsplit("/", 1)[-1].startswith("coffer-blob")
    assert scrub["args"] == ["scrub", "--manifest", "/work/manifest.jsonl", "--pushgateway", "pg:9091"]

    def secrets(c: Doc) -> set[str]:
        return {n for n, e in env_of(c).items() if "secretKeyRef" in e.get("valueFrom", {})}

    assert secrets(manifest) == {
        "COFFER_INTERNAL_TOKEN",
        "COFFER_METADATA_DATABASE_URL",
        "COFFER_METADATA_WEBHOOK_SECRET_KEY",
    }
    assert secrets(scrub) == {
        "COFFER_INTERNAL_TOKEN",
        "COFFER_SIGNING_SECRET",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    }
    assert env_of(scrub)["COFFER_BLOB_SCRUB_VERIFY"]["value"] == "0.1"
    assert env_of(scrub)["COFFER_BLOB_SCRUB_RATE_BYTES"]["value"] == "33554432"
    policy = named(docs, "NetworkPolicy", "coffer-scrub")
    assert not policy["spec"].get("ingress")
    assert {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]} == {53, 5432, 443, 9091}

    fs = render(
        "--set", "scrub.cronJob.enabled=true", "--set", "storage.driver=fs", "--set",
        "storage.fs.existingClaim=coffer-blobs", "--set", "database.metadata.url=postgresql+psycopg://u:p@db:5432/m",
    )  # fmt: skip
    pod = named(fs, "CronJob", "coffer-scrub")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["blobs"]["readOnly"] is True  # the scrub repairs nothing
    assert {
        p["port"]
        for rule in named(fs, "NetworkPolicy", "coffer-scrub")["spec"]["egress"]
        for p in rule["ports"]
    } == {
        53,
        5432,
    }


def test_blob_alone_gets_the_scanner_and_only_when_it_is_set(render: Callable[..., Docs]) -> None:
    """Issue 48: COFFER_BLOB_CLAMD_URL and the egress to clamd on blob's pods, nowhere else."""
    for args, expected in (
        ((), None),
        (("--set", "scanner.clamdUrl=tcp://clamd.av:3310"), "tcp://clamd.av:3310"),
    ):
        docs = render(*args)
        for workload, template in pod_specs(docs):
            for container in template["spec"]["containers"]:
                found = env_of(container).get("COFFER_BLOB_CLAMD_URL")
                wanted = expected if component(workload) == "blob" else None
                assert (found["value"] if found else None) == wanted, workload["metadata"]["name"]
        blob = named(docs, "NetworkPolicy", "coffer-blob")
        ports = {p["port"] for rule in blob["spec"]["egress"] for p in rule["ports"]}
        assert (3310 in ports) == (expected is not None)


CLAMAV = ("--set", "clamav.enabled=true")


def _clamd_conf(docs: Docs) -> dict[str, str]:
    text = named(docs, "ConfigMap", "coffer-clamav")["data"]["clamd.conf"]
    pairs = (line.split(None, 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {k: v.strip() for k, v in pairs}


def _bytes(quantity: str) -> int:
    """clamd's sizes (101M) and Kubernetes' (512Mi, 1Gi) in bytes."""
    number, unit = re.fullmatch(r"(\d+)([KMG]i?)?", quantity).groups()  # type: ignore[union-attr]
    return (
        int(number)
        * {None: 1, "K": 2**10, "M": 2**20, "G": 2**30, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}[unit]
    )


def test_clamav_is_opt_in_and_only_blob_reaches_it(render: Callable[..., Docs]) -> None:
    """Issue 48: the release's own ClamAV (clamav.enabled): blob's pods alone get its address
    and an egress rule to its pods; its pods admit blob alone, on clamd's port, and go out to
    DNS and the signature mirror (HTTPS) only."""
    assert not [d for d in render() if "clamav" in d["metadata"]["name"]], "ClamAV runs only when asked"
    docs = render(*CLAMAV)
    assert {d["kind"] for d in docs if d["metadata"]["name"] == "coffer-clamav"} >= {
        "Deployment", "Service", "NetworkPolicy", "ConfigMap", "PodDisruptionBudget",
    }  # fmt: skip
    for workload, template in pod_specs(docs):
        for container in template["spec"]["containers"]:
            found = env_of(container).get("COFFER_BLOB_CLAMD_URL")
            wanted = "tcp://coffer-clamav:3310" if component(workload) == "blob" else None
            assert (found["value"] if found else None) == wanted, workload["metadata"]["name"]
    clamav_pods = {"app.kubernetes.io/name": "coffer", "app.kubernetes.io/instance": "coffer",
                   "app.kubernetes.io/component": "clamav"}  # fmt: skip
    for policy in of_kind(docs, "NetworkPolicy"):
        reaches = [
            rule for rule in policy["spec"].get("egress") or []
            if any(selects(peer.get("podSelector", {"matchLabels": {"x": "-"}}), clamav_pods)
                   for peer in rule.get("to", []))
        ]  # fmt: skip
        if policy["metadata"]["name"] == "coffer-blob":
            assert [{p["port"] for p in r["ports"]} for r in reaches] == [{3310}]
        else:
            assert not reaches, f"{policy['metadata']['name']} reaches clamd"
    ((peer, ports),) = _ingress_peers(docs, "coffer-clamav")
    assert peer == {"podSelector": {"matchLabels": {**clamav_pods, "app.kubernetes.io/component": "blob"}}}
    assert ports == {"clamd"}
    out = named(docs, "NetworkPolicy", "coffer-clamav")["spec"]["egress"]
    assert {p["port"] for rule in out for p in rule["ports"]} == {53, 443}
    # A clamd of the operator's own and the release's are one or the other.
    both = ("--set", "scanner.clamdUrl=tcp://x:3310", *CLAMAV)
    with pytest.raises(AssertionError, match=r"leave scanner\.clamdUrl empty"):
        render(*both)


def test_clamav_runs_clamd_and_freshclam_with_the_signatures_first(render: Callable[..., Docs]) -> None:
    docs = render(*CLAMAV)
    spec = named(docs, "Deployment", "coffer-clamav")["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    assert init["command"][0] == "freshclam" and "--daemon" not in init["command"]  # one update, then clamd
    clamd, freshclam = spec["containers"]
    assert clamd["command"][0] == "clamd" and clamd["ports"] == [
        {"name": "clamd", "containerPort": 3310, "protocol": "TCP"}
    ]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert clamd[probe]["tcpSocket"]["port"] == "clamd", probe  # clamd listens once loaded
    assert freshclam["command"][0] == "freshclam" and "--daemon" in freshclam["command"]
    assert "--daemon-notify=/etc/coffer-clamav/clamd.conf" in freshclam["command"]
    for c in (init, clamd, freshclam):
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert mounts["/var/lib/clamav"] == "database", c["name"]  # one database, shared
    service = named(docs, "Service", "coffer-clamav")["spec"]
    assert service["ports"] == [{"name": "clamd", "port": 3310, "targetPort": "clamd", "protocol": "TCP"}]
    # freshclam tests a new database by loading the whole engine (about 1.2 GiB), past its
    # 512 MiB limit: an update would be killed, and the init container never end.
    conf = named(docs, "ConfigMap", "coffer-clamav")["data"]["freshclam.conf"]
    assert "TestDatabases no" in conf.splitlines()


def test_the_charts_clamd_takes_coffers_largest_file_and_starts(
    render: Callable[..., Docs], tmp_path: Path
) -> None:
    """Uploads are up to 100 MiB: clamd's stream and scan limits are above it (a stream past
    them would end `unscanned`, services/blob/tests/test_scan.py), /tmp holds a stream per
    thread, and a real clamd starts with this configuration and finds the EICAR file."""
    from coffer_kit.contract.limits import MAX_FILE_BYTES
    from coffer_testkit.clamd import EICAR, SIGNATURE, Clamd, eicar_database
    from coffer_testkit.testing import free_port

    docs = render(*CLAMAV)
    conf = _clamd_conf(docs)
    for limit in ("StreamMaxLength", "MaxFileSize", "MaxScanSize"):
        assert _bytes(conf[limit]) > MAX_FILE_BYTES, limit
    volumes = named(docs, "Deployment", "coffer-clamav")["spec"]["template"]["spec"]["volumes"]
    tmp = next(v for v in volumes if v["name"] == "tmp")["emptyDir"]["sizeLimit"]
    assert conf["TemporaryDirectory"] == "/tmp"
    assert _bytes(tmp) >= int(conf["MaxThreads"]) * _bytes(conf["StreamMaxLength"])

    # The same file, its paths and port moved to this machine's.
    port = free_port()
    local = {"DatabaseDirectory": str(eicar_database(tmp_path / "db")), "TCPSocket": str(port),
             "TemporaryDirectory": str(tmp_path), "PidFile": str(tmp_path / "clamd.pid")}  # fmt: skip
    text = "\n".join(f"{k} {local.get(k, v)}" for k, v in conf.items()) + "\nTCPAddr 127.0.0.1\n"
    (tmp_path / "clamd.conf").write_text(text)
    clamd = Clamd(tmp_path, port)
    clamd.start()
    try:
        from clamav_client import clamd as client

        found = client.ClamdNetworkSocket("127.0.0.1", port, timeout=30).instream(io.BytesIO(EICAR))
        assert found["stream"] == ("FOUND", f"{SIGNATURE}.UNOFFICIAL")
    finally:
        clamd.stop()


# ------------------------------------------------------------------------ webhooks

PRIVATE_V4 = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "169.254.0.0/16"}


def _webhook_rules(docs: Docs, name: str) -> list[Doc]:
    """The egress rules of a policy that reach anything on 443 (only receivers are there)."""
    policy = named(docs, "NetworkPolicy", name)
    return [r for r in policy["spec"]["egress"] if 443 in {p["port"] for p in r["ports"]}]


def test_webhook_egress_is_opt_in_and_warned_about(
    render: Callable[..., Docs], helm_run: Callable[..., Any]
) -> None:
    docs = render()
    assert not _webhook_rules(docs, "coffer-webhooks"), "receivers reached without opting in"
    # A cluster that denies the egress says so at install instead of failing deliveries quietly.
    args = ["--namespace", "coffer", "--set", "dashboard.trustedProxies=10.0.0.0/8"]
    denied = helm_run("install", "coffer", str(CHART), "--dry-run=client", *args)
    assert denied.returncode == 0, denied.stderr
    assert "webhooks cannot be delivered" in denied.stdout
    assert "networkPolicy.egress.webhooks.enabled=true" in denied.stdout
    allowed = helm_run(
        "install", "coffer", str(CHART), "--dry-run=client", *args,
        "--set", "networkPolicy.egress.webhooks.enabled=true",
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert "webhooks cannot be delivered" not in allowed.stdout
    no_dispatcher = ["--set", "webhooks.enabled=false"]
    off = helm_run("install", "coffer", str(CHART), "--dry-run=client", *args, *no_dispatcher)
    assert "never delivered" in off.stdout
    assert not any(d["metadata"]["name"] == "coffer-webhooks" for d in render(*no_dispatcher))


def test_webhook_egress_reaches_public_https_from_the_dispatcher_only(render: Callable[..., Docs]) -> None:
    docs = render("--set", "networkPolicy.egress.webhooks.enabled=true")
    (rule,) = _webhook_rules(docs, "coffer-webhooks")
    assert [p["port"] for p in rule["ports"]] == [443]
    v4 = next(peer["ipBlock"] for peer in rule["to"] if peer["ipBlock"]["cidr"] == "0.0.0.0/0")
    assert PRIVATE_V4 | {"100.64.0.0/10"} <= set(v4["except"]), "internal ranges stay closed"
    v6 = next(peer["ipBlock"] for peer in rule["to"] if peer["ipBlock"]["cidr"] == "::/0")
    assert {"::1/128", "fc00::/7", "fe80::/10"} <= set(v6["except"])
    for name in ("coffer-edge", "coffer-auth", "coffer-metadata"):
        assert not _webhook_rules(docs, name), name


def test_the_dispatcher_runs_metadata_in_its_role_and_nothing_calls_it(scenario: Docs) -> None:
    deployments = {component(d): d for d in of_kind(scenario, "Deployment")}
    (c,) = deployments["webhooks"]["spec"]["template"]["spec"]["containers"]
    assert "coffer-metadata:" in c["image"], c["image"]
    assert c["args"] == ["dispatch"]
    env = env_of(c)
    assert {"COFFER_METADATA_DATABASE_URL", "COFFER_METADATA_WEBHOOK_SECRET_KEY"} <= set(env)
    from coffer_kit import ports

    assert env["COFFER_METADATA_DISPATCHER_PORT"]["value"] == str(ports.WEBHOOKS)
    assert {p["containerPort"] for p in c["ports"]} == {ports.WEBHOOKS}
    (m,) = deployments["metadata"]["spec"]["template"]["spec"]["containers"]
    assert m["args"] == ["serve"]
    assert not _webhook_rules(scenario, "coffer-metadata"), "metadata's pods never reach receivers"
    policy = named(scenario, "NetworkPolicy", "coffer-webhooks")
    ports_out = {p["port"] for r in policy["spec"]["egress"] for p in r["ports"]}
    assert ports_out - {443, 4317, 4318} == {53, 5432}, "DNS and PostgreSQL, receivers and OTLP only"
    # Nothing calls the dispatcher: at most Prometheus on its metrics port.
    for peer, peer_ports in _ingress_peers(scenario, "coffer-webhooks"):
        assert "podSelector" not in peer, peer
        assert peer_ports == {"http"}


def test_operator_cidrs_join_the_receivers(render: Callable[..., Docs]) -> None:
    docs = render(
        "--set", "networkPolicy.egress.webhooks.enabled=true",
        "--set", "networkPolicy.egress.webhooks.cidrs[0]=10.20.0.0/16",
    )  # fmt: skip
    (rule,) = _webhook_rules(docs, "coffer-webhooks")
    assert {"ipBlock": {"cidr": "10.20.0.0/16"}} in rule["to"]


# ------------------------------------------------------------------------ secrets, config


def test_each_component_reads_only_the_secrets_it_needs(production: Docs) -> None:
    need = {
        "edge": {"COFFER_INTERNAL_TOKEN", "COFFER_REDIS_URL"},
        "auth": {"COFFER_INTERNAL_TOKEN", "COFFER_AUTH_DATABASE_URL"},
        "metadata": {
            "COFFER_INTERNAL_TOKEN",
            "COFFER_METADATA_DATABASE_URL",
            "COFFER_METADATA_WEBHOOK_SECRET_KEY",
        },
        "webhooks": {
            "COFFER_INTERNAL_TOKEN",
            "COFFER_METADATA_DATABASE_URL",
            "COFFER_METADATA_WEBHOOK_SECRET_KEY",
        },
        "blob": {
            "COFFER_INTERNAL_TOKEN",
            "COFFER_SIGNING_SECRET",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        },
        "cdn": {
            "COFFER_INTERNAL_TOKEN",
            "COFFER_SIGNING_SECRET",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        },
    }
    for d in of_kind(production, "Deployment"):
        (c,) = d["spec"]["template"]["spec"]["containers"]
        secret_env = {n for n, e in env_of(c).items() if "secretKeyRef" in e.get("valueFrom", {})}
        assert secret_env == need[component(d)], component(d)
        for ref in c.get("envFrom", []):
            assert "secretRef" not in ref, "whole Secrets are never mounted as env"
        for n, e in env_of(c).items():
            if "secretKeyRef" in e.get("valueFrom", {}):
                assert e["valueFrom"]["secretKeyRef"]["name"] == "coffer-secrets", n


def test_generated_secret_is_a_hook_before_the_migrations(render: Callable[..., Docs]) -> None:
    docs = render()
    secret = named(docs, "Secret", "coffer")
    assert set(secret["data"]) == {"internal-token", "signing-secret", "webhook-secret-key"}
    ann = secret["metadata"]["annotations"]
    assert ann["helm.sh/hook"] == "pre-install,pre-upgrade"
    for job in of_kind(docs, "Job"):
        job_ann = job["metadata"]["annotations"]
        assert job_ann["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert int(job_ann["helm.sh/hook-weight"]) > int(ann["helm.sh/hook-weight"])
        (c,) = job["spec"]["template"]["spec"]["containers"]
        assert c["args"] == ["migrate"]
        svc = component(job).removesuffix("-migrate")
        assert f"COFFER_{svc.upper()}_DATABASE_URL" in env_of(c)
        assert "envFrom" not in c, "the ConfigMap does not exist yet on a first install"
    assert {component(j) for j in of_kind(docs, "Job")} == {"auth-migrate", "metadata-migrate"}


def test_a_migration_jobs_env_is_enough_for_its_service_to_start(render: Callable[..., Docs]) -> None:
    """A Job has the Secret's keys it names and nothing else (no ConfigMap yet): with them alone,
    in production mode, its service's settings must load. metadata's need the webhook key, which
    the Job lacked: ``coffer-metadata migrate`` refused to start, and every install failed."""
    import base64
    import os
    import subprocess
    import sys

    docs = render(
        "--set",
        "database.auth.url=postgresql+psycopg://u:p@db/auth",
        "--set",
        "database.metadata.url=postgresql+psycopg://u:p@db/metadata",
    )
    secret = {k: base64.b64decode(v).decode() for k, v in named(docs, "Secret", "coffer")["data"].items()}
    for job in of_kind(docs, "Job"):
        (c,) = job["spec"]["template"]["spec"]["containers"]
        env = {"PATH": os.environ["PATH"]}
        for e in c["env"]:
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            env[e["name"]] = secret[ref["key"]] if ref else e["value"]
        assert env["COFFER_MODE"] == "production"
        svc = component(job).removesuffix("-migrate")
        loaded = subprocess.run(
            [sys.executable, "-c", f"from coffer_{svc}.config import Settings; Settings()"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert loaded.returncode == 0, (svc, loaded.stderr[-1500:])


def test_given_values_reach_the_secret_and_config(render: Callable[..., Docs]) -> None:
    import base64
    import secrets

    signing = secrets.token_urlsafe(32)  # (32 characters at least: the schema's bound)
    docs = render(
        "--set",
        "database.auth.url=postgresql+psycopg://u:p@db/auth",
        "--set",
        f"secrets.signingSecret={signing}",
    )
    data = named(docs, "Secret", "coffer")["data"]
    assert base64.b64decode(data["auth-database-url"]).decode() == "postgresql+psycopg://u:p@db/auth"
    assert base64.b64decode(data["signing-secret"]).decode() == signing
    assert len(base64.b64decode(data["webhook-secret-key"])) >= 32, "generated long enough to seal with"
    config = named(docs, "ConfigMap", "coffer-config")["data"]
    assert config["COFFER_MODE"] == "production"
    assert config["COFFER_BASE_URL"] == "https://api.coffer.example"
    assert config["COFFER_CDN_URL"] == "https://cdn.coffer.example"
    assert "postgresql" not in str(config), "no secret in the ConfigMap"


def test_installs_sharing_a_redis_get_their_own_counter_prefix(render: Callable[..., Docs]) -> None:
    def prefix(*args: str) -> str:
        docs = render("--set", "redis.enabled=true", "--set", "redis.url=redis://r:6379/0", *args)
        (c,) = named(docs, "Deployment", "coffer-edge")["spec"]["template"]["spec"]["containers"]
        return str(env_of(c)["COFFER_REDIS_KEY_PREFIX"]["value"])

    assert prefix() == "coffer.coffer"  # NAMESPACE.FULLNAME: helm template --namespace coffer, release coffer
    assert prefix("--set", "redis.keyPrefix=staging") == "staging"


def test_otel_settings_pass_through(production: Docs) -> None:
    config = named(production, "ConfigMap", "coffer-config")["data"]
    assert config["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert config["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert config["OTEL_TRACES_SAMPLER_ARG"] == "0.05"
    assert config["COFFER_TRACE_ACCEPT_CLIENT_CONTEXT"] == "false"  # a caller's trace is not taken
    for d in of_kind(production, "Deployment"):
        (c,) = d["spec"]["template"]["spec"]["containers"]
        assert env_of(c)["OTEL_SERVICE_NAME"]["value"] == f"coffer-{component(d)}"


def test_chart_settings_are_ones_the_services_read(scenario: Docs) -> None:
    """Every COFFER_* variable the chart sets is a field of some service's settings (or one the
    kit's tracing reads beside the OTEL_* ones)."""
    from coffer_auth.config import Settings as Auth
    from coffer_blob.config import Settings as Blob
    from coffer_edge.config import Settings as Edge
    from coffer_kit.tracing import ACCEPT_CLIENT_CONTEXT_ENV
    from coffer_metadata.config import Settings as Metadata

    known = {f"COFFER_{f.upper()}" for s in (Auth, Blob, Edge, Metadata) for f in s.model_fields}
    known.add(ACCEPT_CLIENT_CONTEXT_ENV)
    names: set[str] = set()
    for cm in of_kind(scenario, "ConfigMap"):
        if cm["metadata"]["name"] == "coffer-config":
            names |= set(cm["data"])
    for _, template in pod_specs(scenario):
        for c in template["spec"]["containers"]:
            names |= set(env_of(c))
    unknown = sorted(n for n in names if n.startswith("COFFER_") and n not in known)
    assert not unknown, f"set by the chart, read by no service: {unknown}"


# ------------------------------------------------------------------ monitoring (CRDs)


def test_service_monitors_scrape_internal_metrics_ports(production: Docs) -> None:
    ports = _service_ports(production)
    monitors = of_kind(production, "ServiceMonitor")
    assert {component(m) for m in monitors} == set(COMPONENTS)
    for m in monitors:
        assert m["apiVersion"] == "monitoring.coreos.com/v1"
        (svc,) = [
            s
            for s in of_kind(production, "Service")
            if selects(m["spec"]["selector"], s["metadata"]["labels"])
        ]
        for ep in m["spec"]["endpoints"]:
            assert ep["path"] == "/metrics"
            assert re.fullmatch(r"\d+[smh]", ep["interval"])
            port = ports[(svc["metadata"]["name"], ep["port"])]
            assert port not in PUBLIC_PORTS, f"{m['metadata']['name']} scrapes public port {port}"


def test_prometheus_rule_alerts_on_the_four_signals(production: Docs) -> None:
    rule = named(production, "PrometheusRule", "coffer")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    for r in rules:
        assert r["alert"] and r["expr"] and r["labels"]["severity"] in {"warning", "critical"}
        assert r["annotations"]["summary"]
        assert r["expr"].count("(") == r["expr"].count(")"), r["alert"]
    exprs = " ".join(r["expr"] for r in rules)
    for metric in (
        "coffer_http_requests_total",
        "coffer_upload_duration_seconds_bucket",
        "coffer_sweeper_backlog",
        "up{",
    ):
        assert metric in exprs, metric


def test_prometheus_rule_covers_every_scraped_service(production: Docs) -> None:
    """Each alert selects the jobs it watches by a pattern of Service names; the webhook
    dispatcher's was scraped but left out of it: down, it raised no alert."""
    rule = named(production, "PrometheusRule", "coffer")
    patterns = {
        m.group(1)
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        for m in re.finditer(r'job=~"([^"]+)"', r["expr"])
    }
    assert len(patterns) == 1, patterns
    (pattern,) = patterns
    for monitor in of_kind(production, "ServiceMonitor"):
        (svc,) = [
            s
            for s in of_kind(production, "Service")
            if selects(monitor["spec"]["selector"], s["metadata"]["labels"])
        ]
        assert re.fullmatch(pattern, svc["metadata"]["name"]), (pattern, svc["metadata"]["name"])


def test_dashboard_is_valid_json_over_the_same_metrics(production: Docs) -> None:
    import json

    dashboard = json.loads(named(production, "ConfigMap", "coffer-dashboard")["data"]["coffer.json"])
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for metric in (
        "coffer_http_requests_total",
        "coffer_http_request_duration_seconds_bucket",
        "coffer_upload_duration_seconds_bucket",
        "coffer_sweeper_backlog",
    ):
        assert metric in exprs, metric


def _routes(docs: Docs) -> set[tuple[str, str]]:
    routes = set()
    for ing in of_kind(docs, "Ingress"):
        for rule in ing["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                routes.add((rule["host"], f"{path['pathType']} {path['path']}"))
    for route in of_kind(docs, "HTTPRoute"):
        for rule in route["spec"]["rules"]:
            for match in rule["matches"]:
                routes.add(
                    (route["spec"]["hostnames"][0], f"{match['path']['type']} {match['path']['value']}")
                )
    return routes


def test_the_dashboard_is_routed_on_the_api_host_or_its_own(render: Callable[..., Docs]) -> None:
    api, cdn = "api.coffer.example", "cdn.coffer.example"
    assert _routes(render()) == {
        (api, "Prefix /api"),
        (api, "Prefix /dashboard"),
        (api, "Exact /"),
        (cdn, "Prefix /"),
    }
    config = named(render(), "ConfigMap", "coffer-config")["data"]
    assert config["COFFER_DASHBOARD_URL"] == "https://api.coffer.example/dashboard"
    assert config["COFFER_DASHBOARD_SIGNUP"] == "invite"

    own = render("--set", "hosts.dashboard=app.coffer.example")
    assert _routes(own) == {
        (api, "Prefix /api"),
        ("app.coffer.example", "Prefix /dashboard"),
        ("app.coffer.example", "Exact /"),
        (cdn, "Prefix /"),
    }
    config = named(own, "ConfigMap", "coffer-config")["data"]
    assert config["COFFER_DASHBOARD_URL"] == "https://app.coffer.example/dashboard"

    gateway = render(
        "--set",
        "hosts.dashboard=app.coffer.example",
        "--set",
        "expose.type=gateway",
        "--set",
        "expose.gateway.parentRefs[0].name=public",
    )
    assert _routes(gateway) == {
        (api, "PathPrefix /api"),
        ("app.coffer.example", "PathPrefix /dashboard"),
        ("app.coffer.example", "Exact /"),
        (cdn, "PathPrefix /"),
    }

    api_only = render("--set", "dashboard.enabled=false")
    assert _routes(api_only) == {(api, "Prefix /api"), (cdn, "Prefix /")}
    config = named(api_only, "ConfigMap", "coffer-config")["data"]
    assert config["COFFER_DASHBOARD_ENABLED"] == "false" and "COFFER_DASHBOARD_URL" not in config
