"""blob tests: real files in temp dirs, the two apps driven in process through ASGITransport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from coffer_blob.config import Settings
from coffer_blob.main import create_app, create_cdn_app
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_testkit.testing import app_client

from .support import CDN_URL, SECRET, TOKEN


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def blob_dir(tmp_path: Path) -> Path:
    return tmp_path / "blobs"


@pytest.fixture
def settings(tmp_path: Path, blob_dir: Path) -> Settings:
    """blob on the filesystem driver, in a temp dir."""
    return Settings(
        mode="local",
        data_dir=tmp_path / "data",
        blob_dir=blob_dir,
        storage="fs",
        internal_token=TOKEN,
        signing_secret=SECRET,
        cdn_url=CDN_URL,
    )


@pytest.fixture
def s3_settings(tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """blob on the S3 driver, with a new bucket on the real S3 server of the test session."""
    server = request.getfixturevalue("s3_server")
    env = server.env(server.new_bucket())
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, env[name])
    return Settings(
        mode="local",
        data_dir=tmp_path / "data",
        storage="s3",
        s3_endpoint_url=env["COFFER_S3_ENDPOINT_URL"],
        s3_bucket=env["COFFER_S3_BUCKET"],
        s3_region=env["COFFER_S3_REGION"],
        s3_force_path_style=True,
        internal_token=TOKEN,
        signing_secret=SECRET,
        cdn_url=CDN_URL,
    )


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The internal listener, with the internal token already set."""
    app = create_app(settings)
    async with app_client(app, "http://blob.internal", {INTERNAL_TOKEN_HEADER: TOKEN}) as client:
        yield client


@pytest.fixture
async def cdn(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The CDN listener, addressed by the CDN URL's host."""
    app = create_cdn_app(settings)
    async with app_client(app, CDN_URL) as client:
        yield client
