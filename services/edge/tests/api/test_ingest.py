"""Safe ingest (issue 48) through the public API, on both databases: the detected type on every
upload path, the organization's ``enforce`` mode against upload tokens' contentTypes and its
own allowed list (415 with both types, nothing stored or counted), and the CDN's sandbox for a
file that is active content by either type. Scanning over real processes and a real clamd:
tests/e2e/test_scan.py."""

from __future__ import annotations

import time
from typing import Any

import httpx

from coffer_harness.inprocess import answered
from coffer_testkit.testing import assert_error

from .test_tus import create, meta, patch

GIF = (  # a 1x1 GIF
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,"
    b"\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)
HTML = b"<!DOCTYPE html><html><body><script>document.title = 'ran'</script></body></html>\n"
JPEG_ONLY = ["image/jpeg"]
SETTLE_SECONDS = 5.0  # edge caches the principal and the rules (0.25 s here, at most 5 s)
AUTH_CACHE_SECONDS = 0.25  # edge_auth_cache_seconds of these tests' stack (conftest.py)


def upload(api: httpx.Client, name: str, data: bytes, content_type: str) -> httpx.Response:
    return api.post("/api/assets", files={"file": (name, data, content_type)})


def token_upload(
    api: httpx.Client, tenant: Any, name: str, data: bytes, content_type: str, **scope: Any
) -> httpx.Response:
    minted = tenant.api.post("/api/upload-tokens", json=scope)
    assert minted.status_code == 201, minted.text
    return api.post(minted.json()["url"], files={"file": (name, data, content_type)})


def test_every_upload_path_records_the_detected_type(stack, tenant) -> None:
    asset = upload(tenant.api, "photo.jpg", GIF, "image/jpeg").json()
    assert (asset["mimeType"], asset["detectedType"]) == ("image/jpeg", "image/gif")
    assert asset["scanStatus"] is None and asset["scanSignature"] is None  # scanning is off
    assert tenant.api.get(f"/api/assets/{asset['id']}").json() == asset
    assert tenant.api.get("/api/assets").json()["assets"] == [asset]

    with httpx.Client(base_url=stack.edge_url) as anonymous:
        by_token = token_upload(
            anonymous, tenant, "photo.jpg", GIF, "image/jpeg", contentTypes=["image/jpeg"]
        )
    # record mode (the default): the token's contentTypes meet the declared type, as before.
    assert by_token.status_code == 201, by_token.text
    assert (by_token.json()["mimeType"], by_token.json()["detectedType"]) == ("image/jpeg", "image/gif")

    created = create(tenant.api, len(GIF), meta(filename="clip.jpg", filetype="image/jpeg"))
    assert created.status_code == 201, created.text
    done = patch(tenant.api, created.headers["location"], GIF, 0)
    assert done.status_code == 204, done.text
    resumable = tenant.api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    assert (resumable["mimeType"], resumable["detectedType"]) == ("image/jpeg", "image/gif")


def test_html_declared_as_an_image_is_sandboxed_on_the_cdn(tenant) -> None:
    asset = upload(tenant.api, "cat.png", HTML, "image/png").json()
    assert (asset["mimeType"], asset["detectedType"]) == ("image/png", "text/html")
    served = httpx.get(asset["publicUrl"])
    assert served.status_code == 200 and served.content == HTML
    assert served.headers["content-security-policy"] == "sandbox"
    assert served.headers["x-content-type-options"] == "nosniff"
    assert served.headers["content-type"] == "image/png"  # the declared type, as the contract says


def counted(tenant: Any) -> int:
    """What the quota counts (GET /api/usage, exact)."""
    return tenant.api.get("/api/usage").json()["usedBytes"]  # type: ignore[no-any-return]


def set_ingest(admin, org_id: str, *args: str) -> dict[str, Any]:
    return admin("set-ingest", "--org", org_id, *args)  # type: ignore[no-any-return]


def until_refused(attempt, status: int = 415) -> httpx.Response:
    """Poll until the new setting reaches edge (its principal cache)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while (response := attempt()).status_code != status:
        assert time.monotonic() < deadline, f"still {response.status_code}: {response.text}"
        time.sleep(0.1)
    return response  # type: ignore[no-any-return]


def test_enforce_matches_a_tokens_content_types_against_the_bytes(stack, admin, tenant) -> None:
    shown = set_ingest(admin, tenant.org_id, "--ingest", "enforce")
    assert shown["ingestMode"] == "enforce"
    before = counted(tenant)
    with httpx.Client(base_url=stack.edge_url) as anonymous:
        refused = until_refused(
            lambda: token_upload(
                anonymous, tenant, "photo.jpg", GIF, "image/jpeg", contentTypes=["image/jpeg"]
            )
        )
        error = assert_error(refused, 415, "unsupported_media_type")
        assert error["details"] == {"declared": "image/jpeg", "detected": "image/gif"}
        # A real JPEG's first bytes pass; an image/* token takes the GIF whatever its name.
        jpeg = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + b"\x00" * 64
        ok = token_upload(anonymous, tenant, "real.jpg", jpeg, "image/jpeg", contentTypes=JPEG_ONLY)
        assert ok.status_code == 201, ok.text
        ok = token_upload(anonymous, tenant, "photo.jpg", GIF, "image/jpeg", contentTypes=["image/*"])
        assert ok.status_code == 201, ok.text
    assert counted(tenant) == before + len(jpeg) + len(GIF)  # the refused one counted nothing
    assert tenant.api.get("/api/assets").json()["total"] == 2


def test_enforce_takes_every_content_type_a_token_can_be_minted_with(stack, admin, tenant) -> None:
    """A token minted with a wildcard in a subtype (``image/g*``), a type of any shape
    (``*/gif``), 100 types or a subtype of 100 characters could upload nothing under
    ``enforce``: blob held them to the organization list's narrower grammar, and the client got
    400 naming blob's internal ``allow``. They are now matched as minted."""
    set_ingest(admin, tenant.org_id, "--ingest", "enforce")
    many = [f"application/x-{n:03d}-{'y' * 236}" for n in range(99)] + ["image/gif"]
    with httpx.Client(base_url=stack.edge_url) as anonymous:
        refused = until_refused(  # (once enforce has reached edge)
            lambda: token_upload(anonymous, tenant, "a.gif", GIF, "image/gif", contentTypes=["image/j*"])
        )
        assert_error(refused, 415, "unsupported_media_type")
        for types in (["image/g*"], ["*/gif"], many, ["image/" + "g" * 100, "image/gif"]):
            stored = token_upload(anonymous, tenant, "a.gif", GIF, "image/gif", contentTypes=types)
            assert stored.status_code == 201, (types[:2], stored.text)
            assert stored.json()["detectedType"] == "image/gif"


def test_a_resumable_upload_under_enforce_is_never_served_before_its_type_is_matched(
    monkeypatch, stack, admin, tenant, anon
) -> None:
    """Its last byte published the file served, then edge matched its type: a file refused was
    downloadable until terminated, and for good had that check failed (no asset, no upload to
    end it). Under enforce the file is now published held, and released once its type passes."""
    from coffer_edge.clients.upload_tokens import UploadTokenClient
    from coffer_kit.contract.errors import CofferError

    place, failures = UploadTokenClient.place, [CofferError(503, "unavailable", "auth is down")]

    async def failing_once(self, *args, **kwargs):
        if failures:
            raise failures.pop()
        return await place(self, *args, **kwargs)

    set_ingest(admin, tenant.org_id, "--ingest", "enforce")
    until_refused(lambda: token_upload(anon, tenant, "a.gif", GIF, "image/gif", contentTypes=JPEG_ONLY))
    monkeypatch.setattr(UploadTokenClient, "place", failing_once)
    minted = tenant.api.post("/api/upload-tokens", json={"contentTypes": ["image/*"]}).json()
    created = anon.post(
        f"/api/uploads/tus?token={minted['token']}",
        headers={"Tus-Resumable": "1.0.0", "Upload-Length": str(len(GIF)),
                 "Upload-Metadata": meta(filename="a.gif", filetype="image/gif")},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    location = created.headers["location"]
    assert_error(patch(anon, location, GIF, 0), 503, "unavailable")  # published; not yet matched
    upload_id = location.split("?")[0].rsplit("/", 1)[1]
    asset_id = stack.metadata_scalar(f"SELECT asset_id FROM tus_uploads WHERE id = '{upload_id}'")
    published = f"{stack.public_cdn_url}/{tenant.org_id}/{asset_id}/a.gif"
    assert httpx.get(published).status_code == 404
    done = patch(anon, location, GIF, 0)  # the client's retry
    assert done.status_code == 204, done.text
    assert httpx.get(published).content == GIF


def test_enforce_matches_a_tokens_content_types_on_a_resumable_upload(admin, tenant, anon) -> None:
    """A token-minted tus upload is held to the token's contentTypes at its last byte, as a
    multipart one is: 415 with both types, nothing kept or counted, the token given back."""
    set_ingest(admin, tenant.org_id, "--ingest", "enforce")
    minted = tenant.api.post("/api/upload-tokens", json={"contentTypes": JPEG_ONLY}).json()
    before = counted(tenant)

    def resumable(name: str, data: bytes) -> httpx.Response:
        created = anon.post(
            f"/api/uploads/tus?token={minted['token']}",
            headers={"Tus-Resumable": "1.0.0", "Upload-Length": str(len(data)),
                     "Upload-Metadata": meta(filename=name, filetype="image/jpeg")},
        )  # fmt: skip
        assert created.status_code == 201, created.text
        return patch(anon, created.headers["location"], data, 0)

    # (edge asks auth for the rules at the last byte; none are cached yet for this organization)
    error = assert_error(resumable("photo.jpg", GIF), 415, "unsupported_media_type")
    assert error["details"] == {"declared": "image/jpeg", "detected": "image/gif"}
    assert tenant.api.get("/api/assets").json()["total"] == 0
    assert counted(tenant) == before
    assert tenant.api.get("/api/uploads").json()["total"] == 0
    # The token is not spent by a refused file: the right one goes through it.
    jpeg = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + b"\x00" * 64
    done = resumable("real.jpg", jpeg)
    assert done.status_code == 204, done.text
    asset = tenant.api.get(f"/api/assets/{done.headers['coffer-asset-id']}").json()
    assert (asset["mimeType"], asset["detectedType"]) == ("image/jpeg", "image/jpeg")
    assert counted(tenant) == before + len(jpeg)


def test_resumable_completions_share_the_rules_for_the_cache_bound(admin, tenant) -> None:
    """edge keeps an organization's rules as long as a principal (0.25 s here, 5 s by default):
    a burst of resumable uploads asks auth once per interval, not once per upload, and a change
    reaches the completions within the bound."""

    def asks() -> float:
        return answered("auth", "GET", "/internal/v1/orgs/{org_id}/ingest")

    def resumable(name: str, data: bytes) -> httpx.Response:
        created = create(tenant.api, len(data), meta(filename=name, filetype="image/png"))
        assert created.status_code == 201, created.text
        return patch(tenant.api, created.headers["location"], data, 0)

    before, started = asks(), time.monotonic()
    for n in range(20):
        assert resumable(f"{n}.png", HTML).status_code == 204
    intervals = (time.monotonic() - started) / AUTH_CACHE_SECONDS
    assert asks() - before <= intervals + 1, (asks() - before, intervals)
    set_ingest(admin, tenant.org_id, "--ingest", "enforce", "--allowed-types", "image/*")
    refused = until_refused(lambda: resumable("page.png", HTML))
    assert assert_error(refused, 415, "unsupported_media_type")["details"]["detected"] == "text/html"


def test_enforce_with_the_organizations_allowed_list(admin, tenant) -> None:
    set_ingest(admin, tenant.org_id, "--ingest", "enforce", "--allowed-types", "image/*,application/pdf")
    refused = until_refused(lambda: upload(tenant.api, "cat.png", HTML, "image/png"))
    error = assert_error(refused, 415, "unsupported_media_type")
    assert error["details"] == {"declared": "image/png", "detected": "text/html"}
    assert tenant.api.get("/api/assets").json()["total"] == 0
    assert counted(tenant) == 0
    assert upload(tenant.api, "photo.jpg", GIF, "image/jpeg").status_code == 201
    # A resumable upload: refused when its last byte shows what it is, nothing kept.
    created = create(tenant.api, len(HTML), meta(filename="page.png", filetype="image/png"))
    assert created.status_code == 201, created.text
    error = assert_error(
        patch(tenant.api, created.headers["location"], HTML, 0), 415, "unsupported_media_type"
    )
    assert error["details"] == {"declared": "image/png", "detected": "text/html"}
    assert tenant.api.get("/api/assets").json()["total"] == 1
    assert counted(tenant) == len(GIF)
    # record mode again: the list is not applied.
    set_ingest(admin, tenant.org_id, "--ingest", "record")
    until_refused(lambda: upload(tenant.api, "cat.png", HTML, "image/png"), status=201)


def test_enforce_refuses_active_content_declared_behind_an_images_bytes(admin, tenant) -> None:
    """A GIF's first bytes, then HTML, declared text/html: the detected type (image/gif)
    passes `image/*`, but the CDN serves the declared type, so a wildcard must not let it in
    (as it does not let in a detected SVG). Stored before, and served as text/html inline."""
    polyglot = GIF + b"<html><script>alert(document.domain)</script></html>"
    set_ingest(admin, tenant.org_id, "--ingest", "enforce", "--allowed-types", "image/*")
    refused = until_refused(lambda: upload(tenant.api, "page.html", polyglot, "text/html"))
    error = assert_error(refused, 415, "unsupported_media_type")
    assert error["details"] == {"declared": "text/html", "detected": "image/gif"}
    created = create(tenant.api, len(polyglot), meta(filename="page.html", filetype="text/html"))
    assert created.status_code == 201, created.text
    refused = patch(tenant.api, created.headers["location"], polyglot, 0)
    assert assert_error(refused, 415, "unsupported_media_type")["details"]["declared"] == "text/html"
    assert tenant.api.get("/api/assets").json()["total"] == 0
    # Every XML type renders as a document too (+xml ones, XSL): refused the same way; an SVG
    # behind a GIF declared application/atom+xml was let in.
    svg = GIF + b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>"
    for declared in ("application/atom+xml", "application/rss+xml", "application/mathml+xml", "text/xsl"):
        error = assert_error(upload(tenant.api, "feed.xml", svg, declared), 415, "unsupported_media_type")
        assert error["details"]["declared"] == declared
    # Named, it is let in; so is the same file declared as what its bytes are.
    assert upload(tenant.api, "page.gif", polyglot, "image/gif").status_code == 201
    set_ingest(admin, tenant.org_id, "--ingest", "enforce", "--allowed-types", "image/*,text/html")
    until_refused(lambda: upload(tenant.api, "page.html", polyglot, "text/html"), status=201)


def test_bad_settings_are_refused(admin, tenant) -> None:
    import pytest

    for args in (("--ingest", "strict"), ("--allowed-types", "image/<x>"), ("--scan", "sometimes")):
        with pytest.raises(Exception):  # noqa: B017, PT011 - the CLI exits non-zero
            set_ingest(admin, tenant.org_id, *args)


def test_the_dashboard_shows_and_sets_the_rules_and_enforces_them(stack) -> None:
    from coffer_testkit.dashboard import sign_up

    browser = sign_up(stack.edge_url)
    try:
        settings = f"/dashboard/o/{browser.org_id}/settings"
        page = browser.http.get(settings).text
        assert 'id="save-ingest"' in page and 'value="record" checked' in page
        bad = browser.post(f"{settings}/ingest", {"ingest": "enforce", "allowed": "image/<x>", "scan": "off"})
        assert bad.status_code == 400 and "allowedTypes" in bad.text
        saved = browser.post(
            f"{settings}/ingest", {"ingest": "enforce", "allowed": "image/*", "scan": "async"}
        )
        assert saved.status_code == 303, saved.text
        page = browser.http.get(settings).text
        assert (
            'value="enforce" checked' in page
            and 'value="image/*"' in page
            and 'value="async" checked' in page
        )

        # The dashboard's own upload path keeps to them: HTML is refused, a GIF is kept and shown.
        deadline = time.monotonic() + SETTLE_SECONDS
        while (refused := browser.upload_xhr(HTML, "cat.png")).status_code != 415:
            assert time.monotonic() < deadline, refused.text
            time.sleep(0.1)
        assert refused.json()["error"]["details"] == {"declared": "image/png", "detected": "text/html"}
        made = browser.upload_xhr(GIF, "photo.jpg")
        assert made.status_code == 201, made.text
        shown = browser.http.get(made.json()["page"]).text
        assert 'id="asset-detected-type">image/gif' in shown
        assert 'id="asset-scan">Pending' in shown  # no scanner in these tests: it stays pending
    finally:
        browser.http.close()


# The authorization matrix of the dashboard's ingest settings ---------------------------------

# Each row changes one of the three rules of organization A (the others as they are by default).
INGEST_ROWS = {
    "detection mode": {"ingest": "enforce", "allowed": "", "scan": "off"},
    "allowed types": {"ingest": "record", "allowed": "image/*", "scan": "off"},
    "scan mode": {"ingest": "record", "allowed": "", "scan": "block"},
}
# What each caller gets: A's owner the change; a member of A 403 (the rules are the owners',
# auth refuses), also when they own another organization; a user who is no member of A 404
# (no existence oracle); nobody signed in goes to the sign-in page.
INGEST_EXPECTED = {
    "owner": 303,
    "member": 403,
    "member of A who owns B": 403,
    "owner of another organization": 404,
    "anonymous": 303,
}
DEFAULT_RULES = {"ingestMode": "record", "allowedTypes": None, "scanMode": "off"}


def test_only_owners_change_the_ingest_settings(stack, admin) -> None:
    from coffer_testkit.dashboard import SAME_ORIGIN, sign_up

    owner = sign_up(stack.edge_url, "A")
    member, both, outsider = (sign_up(stack.edge_url, n) for n in ("Member's own", "B", "C"))
    for user in (member, both):
        admin("add-member", "--org", owner.org_id, "--user", user.email, "--role", "member")
    anonymous = httpx.Client(base_url=stack.edge_url, headers=SAME_ORIGIN, timeout=30)
    people = {
        "owner": owner,
        "member": member,
        "member of A who owns B": both,
        "owner of another organization": outsider,
        "anonymous": anonymous,
    }
    path = f"/dashboard/o/{owner.org_id}/settings/ingest"

    def rules() -> dict[str, Any]:
        shown = set_ingest(admin, owner.org_id)
        return {k: shown[k] for k in DEFAULT_RULES}

    wrong = []
    try:
        for caller, who in people.items():
            for row, form in INGEST_ROWS.items():
                if isinstance(who, httpx.Client):
                    answer = who.post(path, data={"csrf_token": "none", **form})
                else:
                    answer = who.post(path, form)
                expected = INGEST_EXPECTED[caller]
                changed = rules() != DEFAULT_RULES
                if answer.status_code != expected:
                    wrong.append(f"{caller}, {row}: {answer.status_code}, expected {expected}")
                elif caller == "anonymous" and "/dashboard/login" not in answer.headers["location"]:
                    wrong.append(f"{caller}, {row}: redirected to {answer.headers['location']}")
                elif changed != (caller == "owner"):
                    wrong.append(f"{caller}, {row}: the rules {'changed' if changed else 'stayed'}")
                set_ingest(admin, owner.org_id, "--ingest", "record", "--allowed-types", "", "--scan", "off")
    finally:
        for b in (owner, member, both, outsider):
            b.http.close()
        anonymous.close()
    assert not wrong, "\n".join(wrong)
