"""A client generated from /api/openapi.json by openapi-python-client (a generator the project
did not write) authenticates with x-api-key and runs upload, list, get, signed URL and
delete, through methods named after the operations (issue 11)."""

from __future__ import annotations

import importlib
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture
def generated(stack: Any, tmp_path: Path) -> Any:
    document = tmp_path / "openapi.json"
    document.write_bytes(httpx.get(f"{stack.edge_url}/api/openapi.json", timeout=30).content)
    config = tmp_path / "config.yaml"
    config.write_text("post_hooks: []\n")  # no formatter run on the generated code
    subprocess.run(
        [
            str(Path(sys.executable).parent / "openapi-python-client"),
            "generate",
            "--path",
            str(document),
            "--output-path",
            str(tmp_path / "coffer_generated"),
            "--meta",
            "none",
            "--config",
            str(config),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("coffer_generated")
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "coffer_generated" or n.startswith("coffer_generated.")]:
            del sys.modules[name]


@pytest.mark.parametrize("backend", ["embedded"], indirect=True, scope="session")
def test_a_generated_client_uploads_lists_gets_signs_and_deletes(
    stack: Any, tenant: Any, generated: Any
) -> None:
    # Readable names, from the operation ids: api.assets.upload_asset, not
    # upload_asset_api_assets_post.
    from coffer_generated.api.assets import delete_asset, get_asset, get_signed_url, list_assets, upload_asset
    from coffer_generated.api.folders import create_folder
    from coffer_generated.models import Asset, AssetList, FolderCreate, SignedUrl, UploadAssetBody
    from coffer_generated.types import File

    client = generated.AuthenticatedClient(
        base_url=stack.edge_url, token=tenant.key, prefix="", auth_header_name="x-api-key"
    )
    with client:
        folder = create_folder.sync(client=client, body=FolderCreate(name="Reports"))
        body = UploadAssetBody(
            file=File(payload=io.BytesIO(b"hello, world"), file_name="hello.txt", mime_type="text/plain"),
            folder_id=folder.id,
        )
        asset = upload_asset.sync(client=client, body=body)
        assert isinstance(asset, Asset), asset
        assert (asset.name, asset.size, asset.mime_type, asset.folder_id) == (
            "hello.txt",
            12,
            "text/plain",
            folder.id,
        )

        page = list_assets.sync(client=client, folder_id=folder.id)
        assert isinstance(page, AssetList) and [a.id for a in page.assets] == [asset.id] and page.total == 1

        got = get_asset.sync(asset.id, client=client)
        assert isinstance(got, Asset) and got.public_url == asset.public_url

        signed = get_signed_url.sync(asset.id, client=client, expires_in=60)
        assert isinstance(signed, SignedUrl) and signed.expires_in == 60
        assert httpx.get(signed.url, timeout=30).content == b"hello, world"

        deleted = delete_asset.sync(asset.id, client=client)
        assert deleted is not None and deleted.success is True
        assert get_asset.sync_detailed(asset.id, client=client).status_code == 404

    # Without the key header the same client gets the contract's 401.
    anonymous = generated.Client(base_url=stack.edge_url)
    with anonymous:
        response = list_assets.sync_detailed(client=anonymous)  # type: ignore[arg-type]
    assert response.status_code == 401
