"""A database that goes down mid-run gives 503 unavailable with Retry-After, never a 500,
and the services recover by themselves once it is back."""

from __future__ import annotations

import time

import httpx
import pytest
from sqlalchemy.engine import make_url

from coffer_testkit.testing import TcpProxy, assert_error

pytestmark = pytest.mark.e2e


def test_postgresql_outage_gives_503_and_recovers(
    tmp_path, fresh_database, s3_server, admin_for, running_stack_factory
):
    auth_url, metadata_url = make_url(fresh_database("auth")), make_url(fresh_database("metadata"))
    proxy = TcpProxy(auth_url.host or "127.0.0.1", auth_url.port or 5432).start()
    env = {
        "COFFER_AUTH_DATABASE_URL": auth_url.set(host="127.0.0.1", port=proxy.port).render_as_string(False),
        "COFFER_METADATA_DATABASE_URL": metadata_url.set(host="127.0.0.1", port=proxy.port).render_as_string(
            False
        ),
        **s3_server.env(s3_server.new_bucket()),
        "COFFER_EDGE_AUTH_CACHE_SECONDS": "0",
    }
    with running_stack_factory(tmp_path, **env) as stack:
        admin = admin_for(stack)
        org = admin("create-org", "--name", "Outage")["id"]
        key = admin("create-key", "--org", org)["key"]
        api = httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=30)
        assert api.post("/api/folders", json={"name": "before"}).status_code == 201
        asset = api.post("/api/assets", files={"file": ("o.txt", b"outage")}).json()
        # Read once: metadata's event-loop connections (coffer_kit.db.KeyedRead) are open when
        # the database goes, and must be replaced, not fail forever, once it is back.
        assert api.get(f"/api/assets/{asset['id']}").status_code == 200

        proxy.cut()
        for request in (
            lambda: api.get("/api/folders"),
            lambda: api.post("/api/folders", json={"name": "during"}),
            lambda: api.get("/api/assets"),
            lambda: api.get(f"/api/assets/{asset['id']}"),
        ):
            response = request()
            assert_error(response, 503, "unavailable")
            assert int(response.headers["retry-after"]) >= 1
        for service in ("auth", "metadata"):
            ready = httpx.get(stack.url(service) + "/readyz", timeout=10)
            assert ready.status_code == 503 and ready.json()["checks"]["database"] == "down", (
                service,
                ready.text,
            )
            assert httpx.get(stack.url(service) + "/healthz").status_code == 200  # alive, just not ready

        proxy.restore()
        deadline = time.monotonic() + 20
        while (status := api.get("/api/folders").status_code) != 200:
            assert time.monotonic() < deadline, f"still {status} 20 s after the database came back"
            time.sleep(0.2)
        while (status := api.get(f"/api/assets/{asset['id']}").status_code) != 200:
            assert time.monotonic() < deadline, (
                f"the asset GET still {status} 20 s after the database came back"
            )
            time.sleep(0.2)
        names = [f["name"] for f in api.get("/api/folders").json()["folders"]]
        assert names == ["before"]  # nothing half-written during the outage
        for service in ("auth", "metadata"):
            assert httpx.get(stack.url(service) + "/readyz", timeout=10).status_code == 200
        api.close()
    proxy.cut()
