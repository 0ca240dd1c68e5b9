"""The command line's whole flow once on the production data path: PostgreSQL, S3 (moto), Redis."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

import coffer_client as cc
from coffer_client import Coffer, RetryPolicy

pytestmark = pytest.mark.e2e


def test_cli_flow_on_postgres_and_s3(
    production_stack: Any, production_key: str, cli_for: Any, tmp_path: Path
) -> None:
    """Under a real rate limit (Redis-backed, 20 requests a second per key): any 429 met on the way
    is waited out, so every command still succeeds."""
    cli = cli_for(production_stack.edge_url, production_key)
    sdk = Coffer(production_stack.edge_url, production_key)
    local = tmp_path / "site"
    (local / "img").mkdir(parents=True)
    for i in range(20):
        (local / "img" / f"p{i}.bin").write_bytes(bytes([i]) * (1000 + i))
    (local / "index.html").write_text("<h1>hi</h1>")

    r = cli("upload", "-r", str(local), "-j", "8", "--json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)["uploaded"]) == 21
    listing = json.loads(cli("ls", "/site/img", "--json").stdout)
    assert len(listing["assets"]) == 20

    out = tmp_path / "p7.bin"
    assert cli("download", "/site/img/p7.bin", "-o", str(out)).exit_code == 0
    assert out.read_bytes() == bytes([7]) * 1007
    asset = sdk.resolve_asset("/site/img/p7.bin")
    assert asset.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    url = cli("url", "/site/index.html", "--expires", "5m").stdout.strip()
    assert httpx.get(url).text == "<h1>hi</h1>"

    assert cli("mv", "/site/index.html", "/home.html").exit_code == 0
    assert json.loads(cli("sync", str(local / "img"), "/site/img", "--json").stdout)["uploaded"] == []
    assert cli("rm", "/home.html").exit_code == 0
    assert cli("rmdir", "/site").exit_code == 0
    usage = json.loads(cli("usage", "--json").stdout)
    assert usage["assetCount"] == 20  # the folder's assets moved to the root and stay
    assert cli("ls", "/site").exit_code == 3
    sdk.close()


def test_rate_limited_requests_are_retried_after_the_wait(production_stack: Any, production_key: str) -> None:
    """A burst from 8 threads on one key meets the edge's 429s; with the default policy every call
    still succeeds (waiting Retry-After), without retries the 429 surfaces as RateLimited."""
    statuses: list[int] = []
    http = httpx.Client(
        event_hooks={"response": [lambda r: statuses.append(r.status_code)]},
        limits=httpx.Limits(max_connections=8),
    )
    with (
        Coffer(production_stack.edge_url, production_key, http_client=http) as c,
        ThreadPoolExecutor(8) as pool,
    ):
        results = list(pool.map(lambda _: c.list_folders(), range(80)))
    http.close()
    assert results == [[]] * 80
    assert statuses.count(200) == 80 and 429 in statuses, statuses
    no_retry = Coffer(production_stack.edge_url, production_key, retry=RetryPolicy.none())
    with no_retry as c, ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda _: _attempt(c), range(80)))
    limited = [o for o in outcomes if isinstance(o, cc.RateLimited)]
    assert limited and all(e.status == 429 and e.retry_after is not None for e in limited)


def _attempt(c: Coffer) -> object:
    try:
        return c.list_folders()
    except cc.RateLimited as e:
        return e
