"""edge answers metadata's JSON for asset and folder reads as it is (routers/assets.py,
list_assets): that is only right while metadata writes exactly what the public models would.
This runs the real metadata app on a real (SQLite) database and holds it to that."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel, SecretStr

from coffer_edge.schemas import Asset, AssetList, Folder, FolderList, FolderWithPath
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_metadata.config import Settings
from coffer_metadata.main import create_app
from coffer_metadata.migrations import migrate
from coffer_testkit.testing import app_client, commit_asset

pytestmark = pytest.mark.anyio

ORG = "org_01JD0000000000000000000000"
# Names that JSON encoders are known to write differently: escapes, non-ASCII, separators.
NAMES = ["plain", "é ü ß 日本語", "emoji 😀", 'quote " and \\ backslash', "<tag>&amp;", "\u2028 \u2029"]


@pytest.fixture
async def metadata(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    migrate(url)
    settings = Settings(
        metadata_database_url=url, data_dir=tmp_path, internal_token=SecretStr("t" * 32), cdn_url="http://cdn"
    )
    app = create_app(settings)
    async with app_client(app, "http://metadata", {INTERNAL_TOKEN_HEADER: "t" * 32}) as client:
        yield client


def assert_public(raw: bytes, model: type[BaseModel]) -> None:
    """``raw`` is byte for byte what edge wrote when it validated and re-encoded the answer."""
    assert raw == model.model_validate_json(raw).model_dump_json().encode()


async def test_metadata_reads_are_the_public_bodies(metadata: httpx.AsyncClient) -> None:
    base = f"/internal/v1/orgs/{ORG}"
    folder_ids = []
    for name in NAMES:
        response = await metadata.post(f"{base}/folders", json={"name": name})
        assert response.status_code == 201, response.text
        folder_ids.append(response.json()["id"])
    asset_ids = []
    for i, name in enumerate([*NAMES, None]):  # None: named after the file
        response = await commit_asset(
            metadata,
            ORG,
            size=10**i,
            key_name=f'file "{i}"\\\t\x01.bin',
            name=name,
            filename=f'file "{i}" \\.bin',
            folderId=folder_ids[i % len(NAMES)] if i % 2 else None,
            mimeType="text/plain; charset=utf-8",
        )
        assert response.status_code == 201, response.text
        asset_ids.append(response.json()["id"])

    for asset_id in asset_ids:
        response = await metadata.get(f"{base}/assets/{asset_id}")
        assert response.status_code == 200
        assert_public(response.content, Asset)
    for params in ({}, {"limit": 2, "offset": 1}, {"folderId": ""}, {"folderId": folder_ids[1]}):
        response = await metadata.get(f"{base}/assets", params=params)
        assert response.status_code == 200
        assert_public(response.content, AssetList)
    for params in ({}, {"parentId": folder_ids[0]}):
        response = await metadata.get(f"{base}/folders", params=params)
        assert response.status_code == 200
        assert_public(response.content, FolderList)
    # §8: the folder with its path, the answers of rename and move, search and sort.
    for i, folder_id in enumerate(folder_ids[1:]):
        moved = await metadata.patch(f"{base}/folders/{folder_id}", json={"parentId": folder_ids[i]})
        assert moved.status_code == 200, moved.text
        assert_public(moved.content, Folder)
    response = await metadata.get(f"{base}/folders/{folder_ids[-1]}")
    assert len(response.json()["path"]) == len(NAMES)
    assert_public(response.content, FolderWithPath)
    for asset_id in asset_ids:
        response = await metadata.patch(f"{base}/assets/{asset_id}", json={"folderId": folder_ids[0]})
        assert response.status_code == 200
        assert_public(response.content, Asset)
    for params in ({"q": "e"}, {"sort": "-size", "q": "😀"}, {"sort": "name"}):
        response = await metadata.get(f"{base}/assets", params=params)
        assert response.status_code == 200
        assert_public(response.content, AssetList)
    response = await metadata.get(f"{base}/folders", params={})
    assert response.headers["content-type"] == "application/json"
