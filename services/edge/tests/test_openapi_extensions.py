"""The OpenAPI document describes §8: every new route, field, parameter and error."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import SecretStr

from coffer_edge.config import Settings
from coffer_edge.main import create_app

_DOCUMENTS: list[dict[str, Any]] = []


def document(tmp_path: Any) -> dict[str, Any]:
    """Edge's OpenAPI document, a copy of the one made for the module's first test (an app and
    its document take 1 to 2 s of CPU; the settings here change nothing in the document)."""
    if not _DOCUMENTS:
        settings = Settings(data_dir=tmp_path, internal_token=SecretStr("t" * 32))
        _DOCUMENTS.append(create_app(settings).openapi())
    return copy.deepcopy(_DOCUMENTS[0])


def test_section_8_is_in_the_openapi_document(tmp_path: Any) -> None:
    doc = document(tmp_path)
    paths = doc["paths"]
    expected = {
        "/api/usage": {"get"},
        "/api/folders/{folder_id}": {"get", "patch", "delete"},
        "/api/assets/{asset_id}": {"get", "patch", "delete"},
        "/api/upload-tokens": {"post"},
        "/api/uploads": {"post"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path
    schemas = doc["components"]["schemas"]
    assert {"sha256", "updatedAt"} <= set(schemas["Asset"]["properties"])
    assert "updatedAt" in schemas["Folder"]["properties"]
    assert "path" in schemas["FolderWithPath"]["properties"]
    # §8's four, and the trash's two (issue 47, additive).
    assert set(schemas["Usage"]["properties"]) == {
        *("organizationId", "usedBytes", "quotaBytes", "assetCount"),
        *("trashedBytes", "trashedCount"),
    }
    assert set(schemas["UploadTokenCreate"]["properties"]) == {
        "folderId",
        "name",
        "maxBytes",
        "contentTypes",
        "expiresIn",
        "visibility",
        # What the token fixes about its asset (issues 47 and 50, additive).
        *("assetExpiresAt", "metadata", "tags", "acceptMetadata"),
    }
    params = {p["name"]: p for p in paths["/api/assets"]["get"]["parameters"]}
    assert {"q", "sort"} <= set(params)
    sort = params["sort"]["schema"]
    assert set(sort.get("enum") or schemas[sort["$ref"].rsplit("/", 1)[1]]["enum"]) == {
        "-createdAt",
        "createdAt",
        "name",
        "-name",
        "size",
        "-size",
    }
    assert "folder_cycle" in paths["/api/folders/{folder_id}"]["patch"]["responses"]["409"]["description"]
    upload = paths["/api/uploads"]["post"]
    assert {"413", "415", "401"} <= set(upload["responses"])
    assert "multipart/form-data" in upload["requestBody"]["content"]
    assert [p["name"] for p in upload["parameters"]] == ["token"]


def test_section_12_private_assets_is_in_the_openapi_document(tmp_path: Any) -> None:
    doc = document(tmp_path)
    paths, schemas = doc["paths"], doc["components"]["schemas"]
    asset = schemas["Asset"]["properties"]
    assert asset["visibility"]["enum"] == ["public", "private"]
    assert {"type": "null"} in asset["publicUrl"]["anyOf"]
    assert schemas["AssetUpdate"]["properties"]["visibility"]["enum"] == ["public", "private"]
    assert {"required": ["visibility"]} in schemas["AssetUpdate"]["anyOf"]
    params = {p["name"]: p for p in paths["/api/assets"]["get"]["parameters"]}
    assert "visibility" in params
    form = paths["/api/assets"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form["properties"]["visibility"]["enum"] == ["public", "private"]
    token = schemas["UploadTokenCreate"]["properties"]["visibility"]
    assert {"type": "null"} in token["anyOf"]


def test_section_10_image_transforms_are_in_the_openapi_document(tmp_path: Any) -> None:
    doc = document(tmp_path)
    paths = doc["paths"]
    assert {"get"} <= set(paths["/api/transform-presets"])
    assert {"get", "put", "delete"} <= set(paths["/api/transform-presets/{name}"])
    params = {p["name"]: p["schema"] for p in paths["/api/assets/{asset_id}/url"]["get"]["parameters"]}
    assert {"expiresIn", "preset", "w", "h", "fit", "fmt", "q"} <= set(params)
    for side in ("w", "h"):
        schema = params[side]
        assert (schema["type"], schema["minimum"], schema["maximum"]) == ("integer", 1, 4096)
    assert (params["q"]["minimum"], params["q"]["maximum"]) == (20, 100)
    assert set(params["fit"]["enum"]) == {"cover", "contain", "inside"}
    assert set(params["fmt"]["enum"]) == {"webp", "avif", "jpeg", "png", "auto"}
    schemas = doc["components"]["schemas"]
    assert set(schemas["TransformPreset"]["properties"]) == {"name", "builtIn", "w", "h", "fit", "fmt", "q"}
    assert set(schemas["TransformPresetBody"]["properties"]) == {"w", "h", "fit", "fmt", "q"}
    put = paths["/api/transform-presets/{name}"]["put"]
    assert {"400", "403", "409", "415"} <= set(put["responses"])
    assert "invalid_transform" in put["responses"]["400"]["description"]


def test_every_operation_declares_its_action_and_the_key_api_is_documented(tmp_path: Any) -> None:
    """Issue 46: the action each route needs is in its operation, for every public route."""
    from coffer_kit.contract import scopes

    doc = document(tmp_path)
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            action = operation.get("x-coffer-action")
            assert action in (*scopes.ACTIONS, scopes.ANY_KEY, scopes.TOKEN), (method, path, action)
            if "403" in operation["responses"]:
                assert "insufficient_scope" in operation["responses"]["403"]["description"], (method, path)
    paths = doc["paths"]
    assert {"get", "post"} <= set(paths["/api/keys"])
    assert {"get", "delete"} <= set(paths["/api/keys/{key_id}"])
    assert "post" in paths["/api/keys/{key_id}/rotate"]
    assert paths["/api/keys/self"]["get"]["x-coffer-action"] == scopes.ANY_KEY
    assert paths["/api/assets/{asset_id}"]["delete"]["x-coffer-action"] == "assets:delete"
    assert {"scopes", "folderId", "networks", "expiresIn"} <= set(
        doc["components"]["schemas"]["KeyCreate"]["properties"]
    )


def test_a_route_without_a_declared_action_stops_edge_from_starting() -> None:
    from fastapi import FastAPI

    from coffer_edge.deps import PrincipalDep, require_declared_actions

    app = FastAPI()

    @app.get("/api/new")
    async def new(principal: PrincipalDep) -> dict[str, str]:
        return {"organizationId": principal.organization_id}

    with pytest.raises(RuntimeError, match="/api/new"):
        require_declared_actions(app)


def test_issue_50_metadata_tags_filters_and_image_facts_are_in_the_openapi_document(tmp_path: Any) -> None:
    doc = document(tmp_path)
    asset = doc["components"]["schemas"]["Asset"]["properties"]
    assert {"metadata", "tags", "image", "placeholder", "folderPath"} <= set(asset)
    assert asset["metadata"]["maxProperties"] == 32
    assert asset["tags"]["maxItems"] == 32
    update = doc["components"]["schemas"]["AssetUpdate"]["properties"]
    assert {"metadata", "tags"} <= set(update)
    listing = doc["paths"]["/api/assets"]["get"]["parameters"]
    names = {p["name"] for p in listing}
    assert {"tag", "tagMatch", "mediaType", "minSize", "maxSize", "createdAfter", "createdBefore"} <= names
    assert {"recursive", "meta", "q", "sort", "folderId"} <= names
    meta = next(p for p in listing if p["name"] == "meta")
    assert meta["style"] == "deepObject"
    upload = doc["paths"]["/api/assets"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert {"metadata", "tags"} <= set(upload["properties"])
