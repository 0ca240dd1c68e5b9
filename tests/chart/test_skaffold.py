"""skaffold.yaml and deploy/dev/ agree with the Dockerfile and the chart."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ["edge", "auth", "metadata", "blob"]
Docs = list[dict[str, Any]]


def skaffold() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "skaffold.yaml").read_text())


def releases(config: dict[str, Any]) -> list[dict[str, Any]]:
    return config["deploy"]["helm"]["releases"]


def test_one_artifact_per_service_built_from_the_repo_root() -> None:
    config = skaffold()
    dev = next(p for p in config["profiles"] if p["name"] == "dev")
    for artifacts in (config["build"]["artifacts"], dev["build"]["artifacts"]):
        assert [a["image"] for a in artifacts] == [f"coffer-{s}" for s in SERVICES]
        for a in artifacts:
            svc = a["image"].removeprefix("coffer-")
            assert a["context"] == "."
            # One Dockerfile for every service, which the build argument picks.
            assert a["docker"]["dockerfile"] == "Dockerfile"
            assert a["docker"]["buildArgs"] == {"SERVICE": svc}
            assert (ROOT / a["docker"]["dockerfile"]).is_file()
    for a in dev["build"]["artifacts"]:
        svc = a["image"].removeprefix("coffer-")
        dockerfile = (ROOT / a["docker"]["dockerfile"]).read_text()
        assert re.search(rf"^FROM .* AS {a['docker']['target']}$", dockerfile, re.M)
        srcs = {r["src"] for r in a["sync"]["manual"]}
        assert f"services/{svc}/src/**/*.py" in srcs
        assert all(r["dest"] == "/src" for r in a["sync"]["manual"])
        assert "COPY --from=dev-builder --chown=10001:10001 /src /src" in dockerfile


def test_one_release_sets_every_image(render: Callable[..., Docs]) -> None:
    config = skaffold()
    dev = next(p for p in config["profiles"] if p["name"] == "dev")
    for rel in (releases(config)[0], releases(dev)[0]):
        assert rel["chartPath"] == "charts/coffer"
        templates = rel["setValueTemplates"]
        for svc in SERVICES:
            key = f"IMAGE_{{}}_coffer_{svc}"
            assert templates[f"{svc}.image.repository"] == "{{." + key.format("REPO") + "}}"
            assert templates[f"{svc}.image.tag"] == "{{." + key.format("TAG") + "}}"
        # The keys must be chart values (the schema rejects unknown ones).
        args = [a for k in templates for a in ("--set", f"{k}=x")]
        for f in rel.get("valuesFiles", []):
            args += ["-f", str(ROOT / f)]
        assert render(*args)


def test_dev_manifests_are_valid_and_pinned() -> None:
    dev = next(p for p in skaffold()["profiles"] if p["name"] == "dev")
    for path in dev["manifests"]["rawYaml"]:
        for doc in yaml.safe_load_all((ROOT / path).read_text()):
            if not doc:
                continue
            kubernetes_validate.validate(doc, "1.30.0", strict=True)
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []):
                assert re.search(r":[\w.-]*\d[\w.-]*$", c["image"]), c["image"]
                assert c.get("resources", {}).get("limits", {}).get("memory"), c["name"]
            if spec:
                assert spec["securityContext"]["runAsNonRoot"] is True, doc["metadata"]["name"]


def test_dev_values_render_valid_manifests(render: Callable[..., Docs]) -> None:
    docs = render("-f", str(ROOT / "deploy" / "dev" / "coffer-values.yaml"))
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployments) == 6  # edge, auth, metadata, blob, cdn, and the webhook dispatcher
    for d in deployments:
        (c,) = d["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in c["env"]}
        assert env["COFFER_INTERNAL_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "coffer-dev"
