"""Issue 50 through edge, in process on both databases: metadata and tags set by every upload
path (the multipart form, an upload token's form, tus ``Upload-Metadata``) and by PATCH; a bad
value refused with 400 naming the field before anything is kept; the list filters."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from coffer_harness.api import Tenant, used_bytes
from coffer_harness.inprocess import answered
from coffer_testkit.testing import assert_error

META = {"product": "sku-9", "n": 3, "hero": True}
TUS = {"Tus-Resumable": "1.0.0"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def form_upload(api: httpx.Client, url: str = "/api/assets", **fields: str) -> httpx.Response:
    return api.post(url, files={"file": ("a.txt", b"hello", "text/plain")}, data=fields)


def tus_upload(api: httpx.Client, metadata: str, data: bytes = b"hello") -> httpx.Response:
    created = api.post(
        "/api/uploads/tus", headers={**TUS, "Upload-Length": str(len(data)), "Upload-Metadata": metadata}
    )
    if created.status_code != 201:
        return created
    path = urlsplit(created.headers["location"]).path
    headers = {**TUS, "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}
    done = api.patch(path, content=data, headers=headers)
    assert done.status_code == 204, done.text
    return api.get(f"/api/assets/{done.headers['coffer-asset-id']}")


def test_every_upload_path_and_patch_round_trip_metadata_and_tags(tenant: Tenant) -> None:
    api = tenant.api
    by_form = form_upload(api, metadata=json.dumps(META), tags="b,a")
    assert by_form.status_code == 201, by_form.text
    token = api.post("/api/upload-tokens", json={}).json()
    by_token = form_upload(httpx.Client(base_url=str(api.base_url)), path_of(token["url"]), tags="t")
    assert by_token.status_code == 201, by_token.text
    by_tus = tus_upload(api, f"filename {b64('t.txt')},metadata {b64(json.dumps(META))},tags {b64('x,y')}")
    assert by_tus.status_code == 200, by_tus.text
    got = [api.get(f"/api/assets/{r.json()['id']}").json() for r in (by_form, by_token, by_tus)]
    assert [(a["metadata"], a["tags"]) for a in got] == [(META, ["a", "b"]), ({}, ["t"]), (META, ["x", "y"])]
    patched = api.patch(
        f"/api/assets/{got[0]['id']}", json={"metadata": {"n": None, "k": "v"}, "tags": {"add": ["c"]}}
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["metadata"], patched.json()["tags"]) == (
        {"product": "sku-9", "hero": True, "k": "v"},
        ["a", "b", "c"],
    )


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"metadata": "{not json"}, "metadata"),
        ({"metadata": json.dumps({"k": "v" * 300})}, "metadata.k"),
        ({"metadata": json.dumps({f"k{i}": 1 for i in range(40)})}, "metadata"),
        ({"tags": "fine,not fine"}, "tags[1]"),
    ],
)
def test_a_bad_upload_field_is_400_naming_it_and_nothing_is_kept(
    tenant: Tenant, fields: dict[str, str], field: str
) -> None:
    error = assert_error(form_upload(tenant.api, **fields), 400, "invalid_request")
    assert error["details"]["field"] == field
    assert tenant.api.get("/api/assets").json()["total"] == 0
    assert used_bytes(tenant.api) == 0


def test_bad_tus_metadata_is_400_at_creation(tenant: Tenant) -> None:
    bad = f"filename {b64('t.txt')},tags {b64('a b')}"
    created = tenant.api.post(
        "/api/uploads/tus", headers={**TUS, "Upload-Length": "5", "Upload-Metadata": bad}
    )
    assert_error(created, 400, "invalid_request")
    assert created.json()["error"]["details"]["field"] == "tags[0]"


def test_patch_refuses_out_of_bounds_with_the_field_named(tenant: Tenant) -> None:
    asset = form_upload(tenant.api).json()
    url = f"/api/assets/{asset['id']}"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"metadata": {"k": {"deep": 1}}}, "metadata.k"),
        ({"tags": {"add": [f"t{i}" for i in range(33)]}}, "tags.add"),
        ({"tags": {"add": ["ok"], "remove": ["ok"]}}, "tags"),
        ({"tags": ["ok"]}, "tags"),
        ({"metadata": "x"}, "metadata"),
    ]
    for body, field in cases:
        error = assert_error(tenant.api.patch(url, json=body), 400, "invalid_request")
        assert error["details"]["field"] == field, body


def test_a_number_postgresql_would_write_out_past_the_bounds_is_refused(tenant: Tenant) -> None:
    """PostgreSQL writes a JSON number back without an exponent: 1e20 was stored and came back
    as a 21-digit integer, and the asset's next metadata PATCH was then refused over that key.
    Such numbers are refused on the way in, on both databases; the ones kept read back equal."""
    asset = form_upload(tenant.api).json()
    url = f"/api/assets/{asset['id']}"
    for number in ("1e20", "-9.3e18", "1e300", "1e-300"):
        body = b'{"metadata": {"big": ' + number.encode() + b"}}"
        refused = tenant.api.patch(url, content=body, headers={"content-type": "application/json"})
        assert assert_error(refused, 400, "invalid_request")["details"] == {"field": "metadata.big"}, number
    kept = {"small": 1.2345678901234567e-20, "half": 0.5, "near": 4.6e18}
    assert tenant.api.patch(url, json={"metadata": kept}).json()["metadata"] == kept
    again = tenant.api.patch(url, json={"metadata": {"other": "x"}})
    assert again.status_code == 200, again.text
    assert tenant.api.get(url).json()["metadata"] == {**kept, "other": "x"}


def jpeg(width: int = 60, height: int = 30) -> bytes:
    import pyvips

    image = pyvips.Image.black(width, height, bands=3).new_from_image([200, 40, 40])
    return bytes(image.copy(interpretation="srgb").jpegsave_buffer(Q=90))


def test_an_uploaded_jpeg_gains_its_image_facts_and_asset_updated_and_a_pdf_none(
    stack: Any, tenant: Tenant
) -> None:
    import time

    from sqlalchemy import create_engine, text

    api = tenant.api
    # A blob process starts its image workers with the first image (a fork server: about 3.5 s
    # on a loaded 2-core machine, docs/api.md): that one is waited for without the 5 s bound.
    warm = api.post("/api/assets", files={"file": ("w.jpg", jpeg(8, 8), "image/jpeg")}).json()
    until = time.monotonic() + 60
    while api.get(f"/api/assets/{warm['id']}").json()["image"] is None:
        assert time.monotonic() < until
        time.sleep(0.1)
    photo = api.post("/api/assets", files={"file": ("p.jpg", jpeg(), "image/jpeg")}).json()
    doc = api.post("/api/assets", files={"file": ("d.pdf", b"%PDF-1.4 x", "application/pdf")}).json()
    assert photo["image"] is None and photo["placeholder"] is None  # never on the upload's path
    deadline = time.monotonic() + 5
    while (seen := api.get(f"/api/assets/{photo['id']}").json())["image"] is None:
        assert time.monotonic() < deadline, "no image facts within 5 s"
        time.sleep(0.05)
    assert seen["image"] == {"width": 60, "height": 30, "orientation": 1}
    assert len(seen["placeholder"]) == 28  # a BlurHash of 4×3 components: 6 + 2 × 11 characters
    listed = api.get("/api/assets", params={"mediaType": "image/*", "maxSize": "100000"}).json()["assets"]
    assert (listed[0]["id"], listed[0]["image"]) == (photo["id"], seen["image"])
    # Sizes are bytes to 2^63 - 1: a filter above 100,000 is a filter, not the offset's bound.
    sizes = {"minSize": "1", "maxSize": str(100 * 2**20)}
    assert api.get("/api/assets", params=sizes).json()["total"] == api.get("/api/assets").json()["total"] > 0
    assert api.get("/api/assets", params={"minSize": str(2**63 - 1)}).json()["assets"] == []
    for params in ({"minSize": str(2**63)}, {"maxSize": "1e6"}):
        refused = api.get("/api/assets", params=params)
        assert_error(refused, 400, "invalid_request")
        assert refused.json()["error"]["details"]["field"] == next(iter(params)), params
    engine = create_engine(stack.metadata_database_url)
    with engine.connect() as conn:
        events = conn.execute(
            text("SELECT data, changes FROM events WHERE type = 'asset.updated' AND organization_id = :o"),
            {"o": tenant.org_id},
        ).all()
    engine.dispose()
    announced = [json.loads(e.data) for e in events if json.loads(e.data)["id"] == photo["id"]]
    assert [(a["image"], a["placeholder"]) for a in announced] == [(seen["image"], seen["placeholder"])]
    assert all(json.loads(e.changes) == {"image": None, "placeholder": None} for e in events)
    assert api.get(f"/api/assets/{doc['id']}").json()["image"] is None


def test_only_an_image_wakes_the_facts_relay(tenant: Tenant) -> None:
    """A file no image facts are computed for costs metadata no facts claim: the relay still
    looks once a second (edge_facts_interval_seconds), never once per upload."""
    import time

    def claims() -> float:
        return answered("metadata", "POST", "/internal/v1/facts/claim")

    before, started = claims(), time.monotonic()
    for n in range(15):
        assert form_upload(tenant.api).status_code == 201
        assert tus_upload(tenant.api, f"filename {b64(f'{n}.txt')}").status_code == 200
    seconds = time.monotonic() - started
    # One claim per second the loop took, and one more either side of it; 30 uploads woke 30.
    assert claims() - before <= seconds + 2, (claims() - before, seconds)


def token_tus_upload(anon: httpx.Client, token: dict[str, Any], metadata: str) -> httpx.Response:
    """A tus upload with an upload token (no key): creation, then the one PATCH to its capability URL."""
    created = anon.post(
        path_of(token["url"]).replace("/api/uploads?", "/api/uploads/tus?"),
        headers={**TUS, "Upload-Length": "5", "Upload-Metadata": metadata},
    )
    if created.status_code != 201:
        return created
    parts = urlsplit(created.headers["location"])
    headers = {**TUS, "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}
    done = anon.patch(f"{parts.path}?{parts.query}", content=b"hello", headers=headers)
    assert done.status_code == 204, done.text
    return done


def test_an_upload_token_fixes_or_forbids_the_assets_expiry_metadata_and_tags(
    tenant: Tenant, anon: httpx.Client
) -> None:
    """Issues 47 and 50: what a token fixes wins over what the upload says, by the form and by
    tus, and what the upload says in their place is not even read (a past ``expiresAt`` and a
    bad tag here, which an upload of its own would have refused); a token that forbids metadata
    refuses an upload carrying some (400, token not spent)."""
    api = tenant.api
    expires = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    fixed = {"assetExpiresAt": expires.isoformat(), "metadata": {"order": "o-1", "n": 2}, "tags": ["inbox"]}
    own = {"metadata": json.dumps({"mine": "x"}), "tags": "mine,not mine", "expiresAt": "2020-01-01T00:00Z"}
    stored = []
    by_form = form_upload(anon, path_of(api.post("/api/upload-tokens", json=fixed).json()["url"]), **own)
    assert by_form.status_code == 201, by_form.text
    stored.append(by_form.json()["id"])
    tus_meta = ",".join(f"{k} {b64(v)}" for k, v in {"filename": "t.txt", **own}.items())
    by_tus = token_tus_upload(anon, api.post("/api/upload-tokens", json=fixed).json(), tus_meta)
    assert by_tus.status_code == 204, by_tus.text
    stored.append(by_tus.headers["coffer-asset-id"])
    for asset_id in stored:
        asset = api.get(f"/api/assets/{asset_id}").json()
        assert (asset["metadata"], asset["tags"]) == (fixed["metadata"], fixed["tags"])
        assert datetime.fromisoformat(asset["expiresAt"]) == expires

    strict = {"acceptMetadata": False}
    token = api.post("/api/upload-tokens", json=strict).json()
    refused = form_upload(anon, path_of(token["url"]), tags="t")
    assert assert_error(refused, 400, "invalid_request")["details"] == {"field": "tags"}
    refused = token_tus_upload(anon, token, f"filename {b64('t.txt')},metadata {b64('{}')}")
    assert assert_error(refused, 400, "invalid_request")["details"] == {"field": "metadata"}
    plain = form_upload(anon, path_of(token["url"]), name="plain.txt")  # the token was not spent
    assert plain.status_code == 201, plain.text
    assert (plain.json()["metadata"], plain.json()["tags"], plain.json()["expiresAt"]) == ({}, [], None)


def test_a_tus_header_that_the_tokens_metadata_takes_past_its_bound_is_400_token_kept(
    tenant: Tenant, anon: httpx.Client
) -> None:
    """The client's Upload-Metadata was bounded alone; with the token's fixed metadata added it
    passed the bound: a 500, and the token spent."""
    fixed = {"metadata": {f"k{i:02}": "v" * 50 for i in range(32)}}
    token = tenant.api.post("/api/upload-tokens", json=fixed).json()
    header = f"filename {b64('a.txt')},pad {b64('x' * 5600)}"
    assert len(header) <= 8192
    refused = token_tus_upload(anon, token, header)
    assert assert_error(refused, 400, "invalid_request")["details"] == {"field": "Upload-Metadata"}
    kept = token_tus_upload(anon, token, f"filename {b64('a.txt')}")  # not spent
    assert kept.status_code == 204, kept.text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"assetExpiresAt": "tomorrow"}, "assetExpiresAt"),
        ({"assetExpiresAt": "2020-01-01T00:00:00Z"}, "assetExpiresAt"),
        ({"assetExpiresAt": "+10m", "expiresIn": 3600}, "assetExpiresAt"),
        ({"metadata": {"k": "v" * 300}}, "metadata.k"),
        ({"metadata": "text"}, "metadata"),
        ({"tags": ["not fine"]}, "tags[0]"),
        ({"tags": ["a", "a"]}, "tags"),
        ({"acceptMetadata": "no"}, "acceptMetadata"),
    ],
)
def test_what_a_token_fixes_is_checked_at_minting(tenant: Tenant, body: dict[str, Any], field: str) -> None:
    if body.get("assetExpiresAt") == "+10m":
        body = {**body, "assetExpiresAt": (datetime.now(UTC) + timedelta(minutes=10)).isoformat()}
    refused = tenant.api.post("/api/upload-tokens", json=body)
    assert assert_error(refused, 400, "invalid_request")["details"] == {"field": field}


def test_an_instant_outside_years_1_to_9999_in_utc_is_400_naming_its_field(tenant: Tenant) -> None:
    """Well-formed times whose UTC falls before year 1 or after 9999, on every path that reads one."""
    api = tenant.api
    asset = form_upload(api).json()
    for value in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        tus = {
            **TUS,
            "Upload-Length": "5",
            "Upload-Metadata": f"filename {b64('t.txt')},expiresAt {b64(value)}",
        }
        answers = [
            ("expiresAt", form_upload(api, expiresAt=value)),
            ("expiresAt", api.patch(f"/api/assets/{asset['id']}", json={"expiresAt": value})),
            ("expiresAt", api.post("/api/uploads/tus", headers=tus)),
            ("assetExpiresAt", api.post("/api/upload-tokens", json={"assetExpiresAt": value})),
        ]
        for name in ("expiresBefore", "createdAfter", "createdBefore"):
            answers.append((name, api.get("/api/assets", params={name: value})))
        for field, answer in answers:
            error = assert_error(answer, 400, "invalid_request")
            assert error["details"]["field"] == field, (value, str(answer.request.url))
    assert api.get("/api/assets").json()["total"] == 1
    assert api.get("/api/uploads").json()["total"] == 0


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ('{"k": "a\\u0000b"}', "metadata.k"),  # PostgreSQL's jsonb cannot hold it
        ('{"k": "a\\u001bb"}', "metadata.k"),
        ('{"k": "\\ud800"}', "metadata.k"),  # a lone surrogate: no UTF-8 writes it
        ('{"k\\n": "v"}', "metadata.k\n"),
        ('{"\\ud800": "v"}', "metadata.?"),
    ],
)
def test_text_no_database_can_store_is_400_on_every_path(tenant: Tenant, metadata: str, field: str) -> None:
    api = tenant.api
    asset = form_upload(api).json()
    as_json = {"content-type": "application/json"}
    tus_meta = f"filename {b64('t.txt')},metadata {b64(metadata)}"
    answers = [
        form_upload(api, metadata=metadata),
        api.patch(f"/api/assets/{asset['id']}", content=f'{{"metadata": {metadata}}}', headers=as_json),
        api.post("/api/uploads/tus", headers={**TUS, "Upload-Length": "5", "Upload-Metadata": tus_meta}),
        api.post("/api/upload-tokens", content=f'{{"metadata": {metadata}}}', headers=as_json),
    ]
    for answer in answers:
        error = assert_error(answer, 400, "invalid_request")
        # edge's JSON parser refuses a lone surrogate as it reads a JSON body
        as_body = "ud800" in metadata and answer.request.headers.get("content-type") == "application/json"
        named = "body" if as_body else field
        assert error["details"]["field"] == named, str(answer.request.url)
    assert api.get("/api/assets").json()["total"] == 1
    assert api.get("/api/uploads").json()["total"] == 0
    assert api.get(f"/api/assets/{asset['id']}").json()["metadata"] == {}


def test_meta_filter_values_follow_what_metadata_can_hold(tenant: Tenant) -> None:
    """A tab or line break is kept; a value no asset can hold is 400; a number JSON cannot write
    (NaN, Infinity) or one beyond 64 bits matches as the string it is."""
    api = tenant.api
    meta = {"note": "line 1\r\nline\t2", "k": "NaN", "big": "99999999999999999999999", "n": 3}
    made = form_upload(api, metadata=json.dumps(meta))
    assert made.status_code == 201, made.text
    assert api.get(f"/api/assets/{made.json()['id']}").json()["metadata"] == meta
    form_upload(api, metadata=json.dumps({"k": "Infinity", "n": 2**63 - 1}))

    def found(**params: str) -> list[str]:
        answer = api.get("/api/assets", params=params)
        assert answer.status_code == 200, answer.text
        return [a["id"] for a in answer.json()["assets"]]

    assert found(**{"meta[k]": "NaN"}) == [made.json()["id"]]
    assert found(**{"meta[note]": meta["note"]}) == [made.json()["id"]]
    assert found(**{"meta[big]": meta["big"]}) == [made.json()["id"]]
    assert len(found(**{"meta[k]": "Infinity"})) == 1
    assert found(**{"meta[k]": "-Infinity"}) == found(**{"meta[n]": str(2**63)}) == []
    assert len(found(**{"meta[n]": str(2**63 - 1)})) == 1
    # A key sent twice is two conditions (metadata ANDs them): edge sent metadata the last one.
    both = api.get("/api/assets", params=[("meta[n]", "3"), ("meta[n]", str(2**63 - 1))])
    assert both.status_code == 200 and both.json()["assets"] == []
    eleven = api.get("/api/assets", params=[("tag", f"t{i}") for i in range(11)])
    assert assert_error(eleven, 400, "invalid_request")["details"]["field"] == "tag"
    schema = {
        p["name"]: p["schema"]
        for p in api.get("/api/openapi.json").json()["paths"]["/api/assets"]["get"]["parameters"]
    }
    assert schema["tag"]["maxItems"] == 10 and "maxLength" not in schema["tag"]  # (a list's bound)
    for value in ("a\x00b", "a\x1bb"):
        refused = api.get("/api/assets", params={"meta[k]": value})
        assert assert_error(refused, 400, "invalid_request")["details"] == {"field": "meta.k"}
    for name in ("meta[k", "meta[k]x", "meta[x"):  # were ignored: every asset, unfiltered
        refused = api.get("/api/assets", params={name: "v"})
        assert assert_error(refused, 400, "invalid_request")["details"] == {"field": "meta"}, name
