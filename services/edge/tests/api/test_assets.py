"""Asset endpoints (docs/contract.md §4–5): every rule, through edge, metadata and blob in process."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from urllib.parse import quote, urlsplit

import httpx
import pytest

from coffer_kit.contract.urls import MAX_FILE_BYTES
from coffer_testkit.testing import assert_error, multipart_stream, pattern_bytes

ISO_MS_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
ASSET_FIELDS = {
    "id",
    "organizationId",
    "folderId",
    "key",
    "name",
    "mimeType",
    "size",
    "publicUrl",
    "createdAt",
}


def upload(
    api: httpx.Client,
    content: bytes = b"hello",
    filename: str = "hello.txt",
    content_type: str | None = "text/plain",
    **fields: str,
) -> httpx.Response:
    file = (filename, content) if content_type is None else (filename, content, content_type)
    return api.post("/api/assets", files={"file": file}, data=fields)


def test_upload_returns_the_asset(stack, tenant) -> None:
    response = upload(tenant.api, b"hello world", "greeting.txt")
    assert response.status_code == 201, response.text
    asset = response.json()
    assert set(asset) >= ASSET_FIELDS
    assert asset["id"].startswith("ast_")
    assert asset["organizationId"] == tenant.org_id
    assert asset["folderId"] is None
    assert asset["name"] == "greeting.txt"
    assert asset["mimeType"] == "text/plain"
    assert asset["size"] == 11
    assert asset["key"] == f"{tenant.org_id}/{asset['id']}/greeting.txt"
    assert asset["publicUrl"] == f"{stack.public_cdn_url}/{asset['key']}"
    assert ISO_MS_Z.match(asset["createdAt"])
    assert httpx.get(asset["publicUrl"]).content == b"hello world"


def test_name_field_and_fields_after_the_file(tenant) -> None:
    folder = tenant.api.post("/api/folders", json={"name": "docs"}).json()["id"]
    ctype, body = multipart_stream(
        size=1000, filename="raw.bin", after={"name": "Report", "folderId": folder}
    )
    response = tenant.api.post("/api/assets", content=body, headers={"content-type": ctype})
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "Report" and response.json()["folderId"] == folder
    ctype, body = multipart_stream(size=10, before={"name": "First", "folderId": folder})
    response = tenant.api.post("/api/assets", content=body, headers={"content-type": ctype})
    assert response.json()["name"] == "First" and response.json()["folderId"] == folder


@pytest.mark.parametrize("folder_field", [None, ""])
def test_folder_omitted_or_empty_is_root(tenant, folder_field) -> None:
    fields = {} if folder_field is None else {"folderId": folder_field}
    response = upload(tenant.api, **fields)
    assert response.status_code == 201 and response.json()["folderId"] is None


def test_unknown_or_foreign_folder_is_refused_and_leaves_nothing(tenant, new_tenant) -> None:
    assert_error(upload(tenant.api, folderId="fld_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"), 404, "not_found")
    theirs = new_tenant("Them").api.post("/api/folders", json={"name": "x"}).json()["id"]
    assert_error(upload(tenant.api, folderId=theirs), 403, "forbidden")
    assert tenant.api.get("/api/assets").json()["total"] == 0


def test_mime_type_rules(tenant) -> None:
    assert upload(tenant.api, b"{}", "a.json", "application/json").json()["mimeType"] == "application/json"
    # Declared octet-stream or nothing declared: guessed from the name, else octet-stream.
    assert upload(tenant.api, b"x", "photo.png", "application/octet-stream").json()["mimeType"] == "image/png"
    assert upload(tenant.api, b"x", "notes.txt", None).json()["mimeType"] == "text/plain"
    assert upload(tenant.api, b"x", "blob.unknownext", None).json()["mimeType"] == "application/octet-stream"


def test_size_is_counted_by_the_server(tenant) -> None:
    data = pattern_bytes(300_000)
    asset = upload(tenant.api, data, "p.bin").json()
    assert asset["size"] == len(data)
    assert hashlib.sha256(httpx.get(asset["publicUrl"]).content).digest() == hashlib.sha256(data).digest()


def test_key_sanitises_the_filename_and_url_is_percent_encoded(stack, tenant) -> None:
    asset = upload(tenant.api, b"x", "naïve ré?sumé#1%.txt").json()
    filename = asset["key"].split("/")[-1]
    assert filename == unicodedata.normalize("NFC", "naïve ré-sumé-1-.txt")
    assert asset["name"] == unicodedata.normalize("NFC", "naïve ré?sumé#1%.txt")
    assert (
        asset["publicUrl"]
        == f"{stack.public_cdn_url}/{tenant.org_id}/{asset['id']}/{quote(filename, safe='')}"
    )
    assert httpx.get(asset["publicUrl"]).status_code == 200


def test_bad_asset_names_are_400(tenant) -> None:
    for name in ["x" * 256, "a/b", "..", "bad\x01"]:
        assert_error(upload(tenant.api, name=name), 400, "invalid_request")
    assert tenant.api.get("/api/assets").json()["total"] == 0


def test_missing_file_is_400(tenant) -> None:
    response = tenant.api.post("/api/assets", files={"other": ("a.txt", b"x")}, data={"name": "n"})
    assert_error(response, 400, "invalid_request")
    response = tenant.api.post("/api/assets", data={"name": "only-fields"}, files={})
    assert response.status_code in (400, 415)


def test_not_multipart_is_415(tenant) -> None:
    assert_error(tenant.api.post("/api/assets", json={"file": "x"}), 415, "unsupported_media_type")
    assert_error(
        tenant.api.post("/api/assets", content=b"raw", headers={"content-type": "application/octet-stream"}),
        415,
        "unsupported_media_type",
    )


def test_exactly_100_mib_is_accepted_and_one_byte_more_refused(tenant) -> None:
    ctype, body = multipart_stream(size=MAX_FILE_BYTES, filename="max.bin")
    response = tenant.api.post("/api/assets", content=body, headers={"content-type": ctype})
    assert response.status_code == 201, response.text
    assert response.json()["size"] == MAX_FILE_BYTES
    ctype, body = multipart_stream(size=MAX_FILE_BYTES + 1, filename="over.bin")
    response = tenant.api.post("/api/assets", content=body, headers={"content-type": ctype})
    assert_error(response, 413, "file_too_large")
    assert tenant.api.get("/api/assets").json()["total"] == 1


def test_far_too_large_content_length_is_refused_before_the_body(stack, tenant) -> None:
    import socket

    with socket.create_connection(("127.0.0.1", urlsplit(stack.edge_url).port)) as sock:
        sock.sendall(
            b"POST /api/assets HTTP/1.1\r\nHost: x\r\nx-api-key: "
            + tenant.key.encode()
            + b"\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 10737418240\r\n\r\n"
        )
        sock.settimeout(10)
        answer = b""
        while b"file_too_large" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b'"code":"file_too_large"' in answer


def test_list_defaults_order_total_and_stable_pages(tenant) -> None:
    ids = [upload(tenant.api, f"f{i}".encode(), f"f{i}.txt").json()["id"] for i in range(7)]
    listed = tenant.api.get("/api/assets").json()
    assert listed["limit"] == 50 and listed["offset"] == 0 and listed["total"] == 7
    assert [a["id"] for a in listed["assets"]] == ids[::-1]  # newest first
    assert set(listed["assets"][0]) >= ASSET_FIELDS
    pages = [tenant.api.get("/api/assets", params={"limit": 3, "offset": o}).json() for o in (0, 3, 6)]
    assert [p["total"] for p in pages] == [7, 7, 7]
    assert [a["id"] for p in pages for a in p["assets"]] == ids[::-1]
    beyond = tenant.api.get("/api/assets", params={"offset": 100}).json()
    assert beyond["assets"] == [] and beyond["total"] == 7
    # Issue 49: the same walk by cursor through edge, counted only when asked.
    page = tenant.api.get("/api/assets", params={"limit": 3, "total": "false"}).json()
    walked = [a["id"] for a in page["assets"]]
    assert "total" not in page and "offset" not in page
    while page["nextCursor"]:
        page = tenant.api.get(
            "/api/assets", params={"limit": 3, "cursor": page["nextCursor"], "total": "true"}
        )
        page = page.json()
        walked += [a["id"] for a in page["assets"]]
        assert page["total"] == 7
    assert walked == ids[::-1]
    bad = assert_error(tenant.api.get("/api/assets", params={"cursor": "x"}), 400, "invalid_request")
    assert bad["details"]["field"] == "cursor"


def test_list_by_folder(tenant) -> None:
    folder = tenant.api.post("/api/folders", json={"name": "f"}).json()["id"]
    sub = tenant.api.post("/api/folders", json={"name": "s", "parentId": folder}).json()["id"]
    in_root = upload(tenant.api).json()["id"]
    in_folder = upload(tenant.api, folderId=folder).json()["id"]
    in_sub = upload(tenant.api, folderId=sub).json()["id"]
    everything = tenant.api.get("/api/assets").json()
    assert {a["id"] for a in everything["assets"]} == {in_root, in_folder, in_sub}
    root = tenant.api.get("/api/assets", params={"folderId": ""}).json()
    assert [a["id"] for a in root["assets"]] == [in_root] and root["total"] == 1
    direct = tenant.api.get("/api/assets", params={"folderId": folder}).json()
    assert [a["id"] for a in direct["assets"]] == [in_folder] and direct["total"] == 1


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 101}, {"limit": "x"}, {"offset": -1}, {"offset": "1.5"}, {"limit": "2.0"}],
)
def test_list_parameters_out_of_range_are_400(tenant, params) -> None:
    assert_error(tenant.api.get("/api/assets", params=params), 400, "invalid_request")


def test_list_booleans_are_true_or_false_and_nothing_else(tenant) -> None:
    """docs/api.md: `recursive` and `total` are `true` or `false`; FastAPI's bool took `1`,
    `yes`, `on`, `t` (and `0`, `no`, `off`, `f`) as well."""
    for name in ("recursive", "total"):
        for value in ("1", "yes", "on", "t", "True", "0", "no", "off", "f", ""):
            refused = tenant.api.get("/api/assets", params={name: value})
            assert name in assert_error(refused, 400, "invalid_request")["message"], (name, value)
    tenant.api.post("/api/assets", files={"file": ("a.txt", b"a")})
    for value in ("true", "false"):
        assert tenant.api.get("/api/assets", params={"recursive": value}).json()["total"] == 1
    assert "total" not in tenant.api.get("/api/assets", params={"total": "false"}).json()
    assert tenant.api.get("/api/assets", params={"total": "true"}).json()["total"] == 1
    # The other listings' `total` likewise.
    webhook = tenant.api.post(
        "/api/webhooks", json={"url": "https://hooks.example.com/in", "events": ["asset.created"]}
    ).json()["id"]
    for path in ("/api/uploads", f"/api/webhooks/{webhook}/deliveries"):
        refused = tenant.api.get(path, params={"total": "1"})
        assert "total" in assert_error(refused, 400, "invalid_request")["message"], path
        assert "total" not in tenant.api.get(path, params={"total": "false"}).json(), path
        assert tenant.api.get(path, params={"total": "true"}).json()["total"] == 0, path


def test_list_limits_at_the_edges(tenant) -> None:
    assert tenant.api.get("/api/assets", params={"limit": 1}).status_code == 200
    assert tenant.api.get("/api/assets", params={"limit": 100}).status_code == 200


def test_list_unknown_or_foreign_folder(tenant, new_tenant) -> None:
    assert_error(tenant.api.get("/api/assets", params={"folderId": "fld_nope"}), 404, "not_found")
    theirs = new_tenant("T").api.post("/api/folders", json={"name": "x"}).json()["id"]
    assert_error(tenant.api.get("/api/assets", params={"folderId": theirs}), 403, "forbidden")


def test_get_asset(tenant, new_tenant) -> None:
    asset = upload(tenant.api).json()
    assert tenant.api.get(f"/api/assets/{asset['id']}").json() == asset
    assert_error(tenant.api.get("/api/assets/ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"), 404, "not_found")
    other = new_tenant("Other")
    assert_error(other.api.get(f"/api/assets/{asset['id']}"), 403, "forbidden")
    assert_error(other.api.delete(f"/api/assets/{asset['id']}"), 403, "forbidden")
    assert_error(other.api.get(f"/api/assets/{asset['id']}/url"), 403, "forbidden")
    assert tenant.api.get(f"/api/assets/{asset['id']}").status_code == 200


def test_delete_asset_makes_every_url_404(tenant) -> None:
    asset = upload(tenant.api, b"bye").json()
    signed = tenant.api.get(f"/api/assets/{asset['id']}/url").json()["url"]
    assert httpx.get(signed).status_code == 200
    response = tenant.api.delete(f"/api/assets/{asset['id']}")
    assert response.status_code == 200 and response.json() == {"success": True}
    assert_error(tenant.api.get(f"/api/assets/{asset['id']}"), 404, "not_found")
    assert_error(httpx.get(asset["publicUrl"]), 404, "not_found")
    assert_error(httpx.get(signed), 404, "not_found")
    assert_error(tenant.api.delete(f"/api/assets/{asset['id']}"), 404, "not_found")
    assert tenant.api.get("/api/assets").json()["total"] == 0


def test_folder_delete_moves_assets_to_root(tenant) -> None:
    folder = tenant.api.post("/api/folders", json={"name": "f"}).json()["id"]
    sub = tenant.api.post("/api/folders", json={"name": "s", "parentId": folder}).json()["id"]
    a = upload(tenant.api, folderId=folder).json()["id"]
    b = upload(tenant.api, folderId=sub).json()["id"]
    assert tenant.api.delete(f"/api/folders/{folder}").status_code == 200
    for asset_id in (a, b):
        assert tenant.api.get(f"/api/assets/{asset_id}").json()["folderId"] is None
    root = tenant.api.get("/api/assets", params={"folderId": ""}).json()
    assert {x["id"] for x in root["assets"]} == {a, b}


def test_signed_url(tenant) -> None:
    asset = upload(tenant.api, b"secret", "s.txt").json()
    response = tenant.api.get(f"/api/assets/{asset['id']}/url")
    assert response.status_code == 200
    body = response.json()
    assert body["expiresIn"] == 3600
    assert body["asset"] == {k: asset[k] for k in ("id", "name", "mimeType", "size")}
    assert body["url"].startswith(asset["publicUrl"] + "?")
    assert "expires=" in body["url"] and "signature=" in body["url"]
    assert httpx.get(body["url"]).content == b"secret"
    short = tenant.api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": 1}).json()
    assert short["expiresIn"] == 1
    longest = tenant.api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": 604800})
    assert longest.status_code == 200


@pytest.mark.parametrize("value", ["0", "-5", "604801", "1.5", "60.0", "soon"])
def test_signed_url_expiry_out_of_range_is_400(tenant, value) -> None:
    asset = upload(tenant.api).json()
    assert_error(
        tenant.api.get(f"/api/assets/{asset['id']}/url", params={"expiresIn": value}), 400, "invalid_request"
    )


def test_unknown_asset_url_is_404(tenant) -> None:
    assert_error(tenant.api.get("/api/assets/ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9/url"), 404, "not_found")


def test_asset_endpoints_need_a_key(anon) -> None:
    for method, path in [
        ("GET", "/api/assets"),
        ("POST", "/api/assets"),
        ("GET", "/api/assets/ast_x"),
        ("DELETE", "/api/assets/ast_x"),
        ("GET", "/api/assets/ast_x/url"),
    ]:
        assert_error(anon.request(method, path), 401, "unauthorized")


@pytest.mark.parametrize(
    ("filename", "expected_name"),
    [("dir/sub/photo.jpg", "photo.jpg"), ("C:\\Users\\me\\cv.pdf", "cv.pdf"), ("..", "file"), ("", "file")],
)
def test_default_name_is_the_file_name(tenant, filename, expected_name) -> None:
    response = upload(tenant.api, b"x", filename, "application/octet-stream")
    assert response.status_code == 201, response.text
    assert response.json()["name"] == expected_name


def test_chunked_body_past_the_limit_is_cut_off(tenant) -> None:
    """Without a Content-Length, edge counts the body itself and stops it at the limit."""
    ctype, body = multipart_stream(size=MAX_FILE_BYTES + 3 * 1024 * 1024, filename="huge.bin")
    response = tenant.api.post("/api/assets", content=body, headers={"content-type": ctype})
    assert_error(response, 413, "file_too_large")
    assert tenant.api.get("/api/assets").json()["total"] == 0
