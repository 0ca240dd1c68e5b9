"""The OpenAPI document edge serves is what generated clients and fuzzers work from (issue 11):
both key headers as distinct schemes, readable operation ids, the contract's name and number
rules, no response that is never sent; and a 405 names every method of its path."""

from __future__ import annotations

import re
from typing import Any

import anyio
import httpx
import pytest
from pydantic import SecretStr

from coffer_edge.config import Settings
from coffer_edge.main import create_app
from coffer_testkit.testing import assert_error

pytestmark = pytest.mark.anyio


# One app and one document for the module: the tests only read them, and building the app
# and its document took about 1.5 s a test.
@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return create_app(
        Settings(
            data_dir=tmp_path_factory.mktemp("openapi"),
            internal_token=SecretStr("t" * 32),
            sweep_interval_seconds=0,
        )
    )


@pytest.fixture(scope="module")
def document(app: Any) -> dict[str, Any]:
    async def fetch() -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://edge"
        ) as client:
            return await client.get("/api/openapi.json")

    response = anyio.run(fetch)
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m.upper(), p): op for p, ops in document["paths"].items() for m, op in ops.items()}


async def test_both_key_headers_are_distinct_schemes(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    by_header = {s["name"]: (name, s) for name, s in schemes.items()}
    assert set(by_header) == {"x-api-key", "x-organization-id"}
    assert all(s["type"] == "apiKey" and s["in"] == "header" for _, s in by_header.values())
    key, org = by_header["x-api-key"][0], by_header["x-organization-id"][0]
    keyless = {k for k, op in operations(document).items() if not op.get("security")}
    assert keyless == {("POST", "/api/uploads")}  # the upload token is the credential there
    for (method, path), op in operations(document).items():
        if (method, path) in keyless:
            continue
        # The key always; the organization header only with it, never instead of it. The tus
        # routes (CONTRACT §9) also take no key: an upload token, then the upload's capability.
        keyed = [r for r in op["security"] if r]
        if path.startswith("/api/uploads/tus"):
            assert {} in op["security"], (method, path)
        else:
            assert keyed == op["security"], (method, path)
        assert all(key in requirement for requirement in keyed), (method, path)
        assert {key: []} in op["security"]
        assert {key: [], org: []} in op["security"]


async def test_operation_ids_are_readable(document: dict[str, Any]) -> None:
    ids = {key: op["operationId"] for key, op in operations(document).items()}
    assert all(re.fullmatch(r"[a-z][A-Za-z]*", i) for i in ids.values()), ids
    assert len(set(ids.values())) == len(ids)
    expected = {
        ("GET", "/api/folders"): "listFolders",
        ("POST", "/api/folders"): "createFolder",
        ("DELETE", "/api/folders/{folder_id}"): "deleteFolder",
        ("GET", "/api/assets"): "listAssets",
        ("POST", "/api/assets"): "uploadAsset",
        ("GET", "/api/assets/{asset_id}"): "getAsset",
        ("DELETE", "/api/assets/{asset_id}"): "deleteAsset",
        ("GET", "/api/assets/{asset_id}/url"): "getSignedUrl",
    }
    assert {k: ids[k] for k in expected} == expected


async def test_no_422_is_documented(document: dict[str, Any]) -> None:
    # Validation errors are 400 invalid_request; FastAPI's automatic 422 is never sent.
    for key, op in operations(document).items():
        assert "422" not in op["responses"], key
        assert "400" in op["responses"], key
    assert "HTTPValidationError" not in document["components"]["schemas"]


async def test_the_contract_rules_are_in_the_schemas(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert "success" in schemas["Success"]["required"]
    name = schemas["FolderCreate"]["properties"]["name"]
    assert (name["minLength"], name["maxLength"]) == (1, 255)
    pattern = re.compile(name["pattern"])
    for good in ("a", "Quarterly report.pdf", "...", "é 日本語 😀", ".hidden"):
        assert pattern.search(good), good
    for bad in (".", "..", "a/b", "tab\there", "nul\x00", "del\x7f", "line\nbreak"):
        assert not pattern.search(bad), bad
    upload = operations(document)[("POST", "/api/assets")]["requestBody"]["content"]["multipart/form-data"]
    upload_name = upload["schema"]["properties"]["name"]
    assert upload_name["maxLength"] == 255 and re.compile(upload_name["pattern"]).search("")
    params = {p["name"]: p["schema"] for p in operations(document)[("GET", "/api/assets")]["parameters"]}
    assert (params["offset"]["minimum"], params["offset"]["maximum"]) == (0, 100_000)
    assert (params["limit"]["minimum"], params["limit"]["maximum"]) == (1, 100)


async def test_the_document_keeps_every_path_and_field(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    contract = {
        "Asset": {
            "id",
            "organizationId",
            "folderId",
            "key",
            "name",
            "mimeType",
            "size",
            "publicUrl",
            "createdAt",
        },
        "Folder": {"id", "organizationId", "parentId", "name", "createdAt"},
        "AssetList": {"assets", "total", "limit", "offset"},
        "SignedUrl": {"url", "expiresIn", "asset"},
        "FolderCreate": {"name", "parentId"},
        "Success": {"success"},
    }
    for model, fields in contract.items():
        assert fields <= set(schemas[model]["properties"]), model
    assert {"/api/folders", "/api/folders/{folder_id}", "/api/assets", "/api/assets/{asset_id}"} <= set(
        document["paths"]
    )


async def test_a_405_allows_every_method_of_the_path(app: Any) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        response = await client.put("/api/folders")
        assert_error(response, 405, "method_not_allowed")
        assert response.headers["allow"] == "GET, POST"
        response = await client.post("/api/assets/ast_1")
        assert_error(response, 405, "method_not_allowed")
        assert response.headers["allow"] == "GET, PATCH, DELETE"


async def test_no_third_party_script_page_is_served(app: Any) -> None:
    """Issue 23: /api/docs loaded Swagger UI's script from a CDN onto the dashboard's origin."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://edge") as client:
        assert (await client.get("/api/docs")).status_code == 404


def test_the_requests_sent_to_webhook_endpoints_are_described(document: dict[str, Any]) -> None:
    """CONTRACT §11: each event's request (body schema, Standard Webhooks headers) is in the
    document's ``webhooks`` section, and every /api/webhooks route in ``paths``."""
    events = document["webhooks"]
    assert set(events) == {
        "asset.created",
        "asset.updated",
        "asset.deleted",
        "asset.scanned",  # issue 48
        "asset.infected",
        "asset.trashed",  # issue 47
        "asset.restored",
        "asset.expired",
        "asset.purged",
        "folder.created",
        "folder.updated",
        "folder.deleted",
        "ping",
    }
    for operation in (e["post"] for e in events.values()):
        headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
        assert headers == {"webhook-id", "webhook-timestamp", "webhook-signature"}
        assert operation["requestBody"]["required"] is True
    routes = {
        (m.upper(), p) for p, ops in document["paths"].items() if p.startswith("/api/webhooks") for m in ops
    }
    assert len(routes) == 9, routes
