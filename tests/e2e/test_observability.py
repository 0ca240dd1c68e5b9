"""Observability end to end: traces across the services, metrics on every internal listener,
and logs that never carry a secret."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from urllib.parse import urlsplit

import httpx
import pytest

# Traces, metrics and logs are the processes' own, whatever stores their data: the embedded
# default only.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.parametrize("backend", ["embedded"], indirect=True, scope="session"),
]


def traceparent() -> str:
    """A fresh W3C traceparent header: a new trace, the caller's span id, sampled."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def assert_linked(spans: list[dict], client_parent: str) -> None:
    """Every span's parent is in the trace, except edge's server span, whose parent is the caller's."""
    ids = {s["span_id"] for s in spans}
    orphans = [s for s in spans if s["parent"] not in ids]
    assert {(s["service"], s["parent"]) for s in orphans} == {("coffer-edge", client_parent)}, orphans


def access(
    stack, request_id: str, services: frozenset[str] = frozenset({"edge", "metadata"})
) -> dict[str, str]:
    """Each service's access line's trace id for one request, once those of ``services`` are written."""
    deadline = time.monotonic() + 10
    while True:
        lines = [
            json.loads(line)
            for path in sorted((stack.data_dir.parent / "logs").glob("*.log"))
            for line in path.read_text().splitlines()
            if '"logger": "coffer.access"' in line and request_id in line
        ]
        found = {e["service"]: e["trace_id"] for e in lines if e.get("request_id") == request_id}
        if services <= set(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.fixture
def traced_stack(otlp, own_stack_with):
    return own_stack_with(**otlp.exporter_env()), otlp


def test_one_trace_per_request_across_the_services(traced_stack, admin_for) -> None:
    stack, receiver = traced_stack
    admin = admin_for(stack)
    org = admin("create-org", "--name", "Traced")["id"]
    key = admin("create-key", "--org", org)["key"]
    api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=30)

    parent = traceparent()
    upload = api.post("/api/assets", files={"file": ("t.txt", b"traced")}, headers={"traceparent": parent})
    assert upload.status_code == 201
    everyone = {"coffer-edge", "coffer-auth", "coffer-metadata", "coffer-blob"}
    spans = receiver.trace(parent, everyone, has=("quota.reserve", "storage."))
    assert {s["service"] for s in spans} == everyone
    assert_linked(spans, parent.split("-")[2])
    names = {s["name"] for s in spans}
    assert "quota.reserve" in names  # the quota transaction
    assert any(n.startswith("storage.") for n in names), names  # the storage write

    parent = traceparent()
    assert api.get("/api/assets", headers={"traceparent": parent}).status_code == 200
    spans = receiver.trace(parent, {"coffer-edge", "coffer-metadata"})
    assert {s["service"] for s in spans} == {"coffer-edge", "coffer-metadata"}  # auth answered from cache
    assert_linked(spans, parent.split("-")[2])

    parent = traceparent()
    signed = api.get(f"/api/assets/{upload.json()['id']}/url", headers={"traceparent": parent})
    spans = receiver.trace(parent, {"coffer-edge", "coffer-metadata", "coffer-blob"})
    assert {s["service"] for s in spans} == {"coffer-edge", "coffer-metadata", "coffer-blob"}
    assert_linked(spans, parent.split("-")[2])

    parent = traceparent()
    assert httpx.get(signed.json()["url"], headers={"traceparent": parent}).content == b"traced"
    spans = receiver.trace(parent, {"coffer-blob"})
    assert {s["service"] for s in spans} == {"coffer-blob"}
    # The signature downloads the object until it expires: no span keeps it.
    signature = signed.json()["url"].split("signature=", 1)[1].split("&", 1)[0]
    attributes = [v for s in spans for v in s["attributes"].values() if isinstance(v, str)]
    assert any("signature=REDACTED" in v for v in attributes), attributes
    assert not [v for v in attributes if signature in v]

    # An upload token travels in the query string: no span keeps it.
    url = api.post("/api/upload-tokens", json={}).json()["url"]
    parent = traceparent()
    response = httpx.post(url, files={"file": ("t.txt", b"token")}, headers={"traceparent": parent})
    assert response.status_code == 201
    spans = receiver.trace(parent, everyone, has=("quota.reserve", "storage."))
    token = url.split("token=", 1)[1]
    attributes = [v for s in spans for v in s["attributes"].values()]
    assert any("/api/uploads" in v for v in attributes)  # the URL is recorded, without the token
    assert not [v for v in attributes if token in v]
    api.close()

    # Invitation and reset links carry their token in the path; edge asks auth by its SHA-256,
    # which auth accepts as the token: no span keeps either (issue 23).
    admin("create-user", "--email", "reset@example.com", "--password", "pw-" + secrets.token_urlsafe(18))
    links = [
        admin("create-invite", "--org", org, "--email", "guest@example.com")["url"],
        admin("reset-password", "--email", "reset@example.com")["url"],
    ]
    # The invitation page's "Create account" link takes the token to the sign-up form's query.
    invite = links[0].rsplit("/", 1)[1]
    pages = [(link.rsplit("/", 1)[1], link.split("/dashboard", 1)[1]) for link in links]
    for secret, path in [*pages, (invite, f"/register?invite={invite}")]:
        digest = hashlib.sha256(secret.encode()).hexdigest()
        parent = traceparent()
        page = httpx.get(f"{stack.edge_url}/dashboard{path}", headers={"traceparent": parent})
        assert page.status_code == 200, page.text
        spans = receiver.trace(parent, {"coffer-edge", "coffer-auth"})
        attributes = [v for s in spans for v in s["attributes"].values() if isinstance(v, str)]
        assert any("REDACTED" in v for v in attributes), attributes  # recorded, without the token
        assert not [v for v in attributes if secret in v or digest in v]


LABELLED_ID = re.compile(r'="[^"]*\b(org|ast|fld|key|usr|req)_[0-9A-Z]{20,}')


def test_metrics_on_every_internal_listener(stack, tenant) -> None:
    asset = tenant.api.post("/api/assets", files={"file": ("m.txt", b"metrics")}).json()
    tenant.api.get(f"/api/assets/{asset['id']}")
    tenant.api.get(f"/api/assets/{asset['id']}")
    httpx.get(asset["publicUrl"])
    tenant.api.get("/api/assets/ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9")  # a 404
    # Methods past the seven the API uses are one label value, whatever a client sends: each
    # of thirty-odd WebDAV methods on each route was a series of its own.
    for method in ("PROPFIND", "MKCOL", "ACL"):
        assert tenant.api.request(method, f"/api/assets/{asset['id']}").status_code == 405
    scraped = {
        name: httpx.get(stack.url(name) + "/metrics")
        for name in ("auth", "metadata", "blob", "edge_internal")
    }
    for name, response in scraped.items():
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith("text/plain")
        assert not LABELLED_ID.search(response.text), f"{name} has an id in a label"
    edge = scraped["edge_internal"].text
    get_one = 'method="GET",route="/api/assets/{asset_id}",service="edge",status="200"'
    assert re.search(r"coffer_http_requests_total\{" + re.escape(get_one) + r"\} [2-9]", edge)
    assert 'route="/api/assets/{asset_id}",service="edge",status="404"' in edge
    other = 'method="_OTHER",route="/api/assets/{asset_id}",service="edge",status="405"'
    assert "coffer_http_requests_total{" + other + "} 3" in edge
    assert 'method="PROPFIND"' not in edge
    assert re.search(
        r'coffer_http_request_duration_seconds_bucket\{le="0.005",method="POST",route="/api/assets"', edge
    )
    assert 'coffer_auth_cache_requests_total{result="hit"}' in edge
    assert 'coffer_uploads_total{outcome="created"}' in edge
    assert "coffer_upload_bytes_total" in edge and "coffer_upload_duration_seconds_bucket" in edge
    assert "coffer_sweeper_items_total" in edge or "# HELP coffer_sweeper_items_total" in edge
    metadata = scraped["metadata"].text
    assert 'coffer_sweeper_backlog{kind="intent"}' in metadata
    assert "coffer_quota_rejections_total" in metadata
    assert 'coffer_db_pool_connections{service="metadata",state="idle"}' in metadata
    assert 'coffer_db_pool_connections{service="auth",state="idle"}' in scraped["auth"].text
    blob = scraped["blob"].text
    assert "coffer_storage_operation_duration_seconds" in blob
    assert "coffer_download_bytes_total" in blob
    # Never public: not on edge's API port, not on the CDN host.
    assert httpx.get(stack.edge_url + "/metrics").status_code == 404
    assert httpx.get(stack.public_cdn_url + "/metrics").status_code == 404


def test_logs_never_carry_keys_or_signatures(stack, tenant) -> None:
    asset = tenant.api.post("/api/assets", files={"file": ("l.txt", b"logs")}).json()
    signed = tenant.api.get(f"/api/assets/{asset['id']}/url").json()["url"]
    query = urlsplit(signed).query
    signature = dict(p.split("=", 1) for p in query.split("&"))["signature"]
    assert httpx.get(signed).status_code == 200
    assert httpx.get(signed.replace("signature=", "signature=x")).status_code == 403
    unknown_key = "cof_org_" + secrets.token_urlsafe(24)
    upload_url = tenant.api.post("/api/upload-tokens", json={}).json()["url"]
    upload_token = upload_url.split("token=", 1)[1]
    assert httpx.post(upload_url, files={"file": ("t.txt", b"t")}).status_code == 201
    assert httpx.post(upload_url, files={"file": ("t.txt", b"t")}).status_code == 401
    last = httpx.get(stack.edge_url + "/api/assets", headers={"x-api-key": unknown_key})

    def read_logs() -> str:
        return "".join(p.read_text() for p in sorted((stack.data_dir.parent / "logs").glob("*.log")))

    # Poll until the last request's line is written (logs are written after the answer).
    deadline = time.monotonic() + 10
    while last.headers["x-request-id"] not in (logs := read_logs()):
        assert time.monotonic() < deadline, "the last request was never logged"
        time.sleep(0.05)
    assert '"route": "/api/assets"' in logs  # the logs are there, and they are JSON
    for secret in (tenant.key, unknown_key, signature, query, upload_token):
        assert secret not in logs
    access = [json.loads(line) for line in logs.splitlines() if '"logger": "coffer.access"' in line]
    assert access
    for entry in access:
        assert {"request_id", "trace_id", "route", "status", "duration_ms", "organization_id"} <= set(entry)
    assert any(e["organization_id"] == tenant.org_id and e["service"] == "edge" for e in access)


def test_unsampled_requests_make_no_span_and_keep_their_trace(otlp, own_stack_with, admin_for) -> None:
    """With the sampler dropping roots (parentbased_always_off), an unsampled request makes no
    span anywhere (issue 28: its cost is not paid), yet its trace id is propagated to every
    service it reaches (their log lines carry it); a request whose caller sampled it is traced
    across the services as ever."""

    stack = own_stack_with(**otlp.exporter_env(), OTEL_TRACES_SAMPLER="parentbased_always_off")
    admin = admin_for(stack)
    org = admin("create-org", "--name", "Unsampled")["id"]
    key = admin("create-key", "--org", org)["key"]
    api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=30)
    asset = api.post("/api/assets", files={"file": ("u.txt", b"unsampled")}).json()["id"]

    unsampled = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-00"
    not_sampled = api.get(f"/api/assets/{asset}", headers={"traceparent": unsampled})
    root = api.get(f"/api/assets/{asset}")  # no traceparent: a root, which the sampler drops
    sampled = traceparent()
    assert api.get(f"/api/assets/{asset}", headers={"traceparent": sampled}).status_code == 200
    assert not_sampled.status_code == root.status_code == 200
    api.close()

    # The sampled request's spans arrive (each service exports them after the earlier
    # requests' would have been): edge's server and client spans and metadata's server span.
    spans = otlp.trace(sampled, {"coffer-edge", "coffer-metadata"})
    assert {s["service"] for s in spans} == {"coffer-edge", "coffer-metadata"}
    assert_linked(spans, sampled.split("-")[2])
    traced = {s["trace_id"] for s in otlp.snapshot()}
    assert traced == {sampled.split("-")[1]}, "an unsampled request made a span"

    # The caller's unsampled trace reaches metadata through edge.
    assert access(stack, not_sampled.headers["x-request-id"]) == {
        "edge": unsampled.split("-")[1],
        "metadata": unsampled.split("-")[1],
    }
    # The root gets a trace id of its own, which edge propagates to metadata.
    ids = access(stack, root.headers["x-request-id"])
    assert set(ids) == {"edge", "metadata"}
    assert ids["edge"] and ids["edge"] == ids["metadata"], ids
    assert ids["edge"] != unsampled.split("-")[1]


def test_a_callers_trace_context_is_not_taken_on_the_public_listeners(
    otlp, own_stack_with, admin_for
) -> None:
    """Edge's API and blob's CDN take requests from anyone: a caller's sampled ``traceparent``
    had every service's spans recorded (whatever the sampler) in a trace of the caller's
    choosing. Unless COFFER_TRACE_ACCEPT_CLIENT_CONTEXT says an ingress starts the traces, each
    request now starts a trace of Coffer's, carried to every service it reaches."""
    stack = own_stack_with(**otlp.exporter_env(accept_client_context=False))
    admin = admin_for(stack)
    org = admin("create-org", "--name", "Untrusted")["id"]
    key = admin("create-key", "--org", org)["key"]
    chosen = [traceparent(), traceparent()]
    with httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=30) as api:
        headers = {"traceparent": chosen[0], "baggage": "user=someone"}
        upload = api.post("/api/assets", files={"file": ("t.txt", b"mine")}, headers=headers)
        assert upload.status_code == 201
        url = api.get(f"/api/assets/{upload.json()['id']}/url").json()["url"]
    download = httpx.get(url, headers={"traceparent": chosen[1]})
    assert download.content == b"mine"

    ids = access(stack, upload.headers["x-request-id"], frozenset({"edge", "metadata", "blob"}))
    assert ids["edge"] and set(ids.values()) == {ids["edge"]}, ids  # one trace, Coffer's
    (cdn,) = access(stack, download.headers["x-request-id"], frozenset({"cdn"})).values()
    ours = {ids["edge"], cdn}
    assert len(ours) == 2 and not ours & {c.split("-")[1] for c in chosen}

    deadline = time.monotonic() + 15  # the spans arrive in Coffer's traces, edge's and the CDN's roots
    while not {(s["service"], s["trace_id"]) for s in otlp.snapshot() if s["parent"] is None} >= {
        ("coffer-edge", ids["edge"]),
        ("coffer-blob", cdn),  # (the CDN listener is blob's process)
    }:
        assert time.monotonic() < deadline, otlp.snapshot()
        time.sleep(0.05)
    assert not [s for s in otlp.snapshot() if s["trace_id"] in {c.split("-")[1] for c in chosen}]
