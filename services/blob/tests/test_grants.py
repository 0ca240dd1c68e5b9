"""Signed URLs die with their authority (coffer_blob.grants), in process on both drivers: the
``by`` parameter under the signature, the revocations edge relays, the CDN's refusal within its
cache's 2 s, and the pruning of revocations no URL can need any more."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import pytest
import pyvips

from coffer_blob import grants, signing
from coffer_blob.config import Settings
from coffer_blob.storage import Storage, make_driver, write_small
from coffer_kit.contract.ids import new_id
from coffer_kit.contract.wire import MAX_REVOCATIONS
from coffer_testkit.testing import assert_error

from .support import END, MULTIPART, ORG, SECRET, file_part, new_asset_id

pytestmark = pytest.mark.anyio

REVOKED = "This signed URL was revoked: the key or member that made it no longer acts."
MALFORMED = "The signed URL is malformed."
DATA = b"bytes under a grant"
# Longer than the CDN's revocation cache (2 s), with room for a slow machine.
WAIT_SECONDS = 6.0


@pytest.fixture(params=["fs", "s3"])
def settings(request: pytest.FixtureRequest) -> Settings:
    """Every test on both drivers; one transform worker (started only by the transform test)."""
    chosen: Settings = request.getfixturevalue("settings" if request.param == "fs" else "s3_settings")
    return chosen.model_copy(update={"cdn_transform_workers": 1})


@pytest.fixture
def storage(settings: Settings) -> Iterator[Storage]:
    """The store the apps use, opened beside them (to look at, or plant, revocation objects)."""
    driver = make_driver(settings)
    yield driver
    driver.close()


def key_authority() -> str:
    return f"key:{new_id('key')}"


def user_authority() -> str:
    return f"user:{new_id('usr')}"


async def put(api: httpx.AsyncClient, org: str = ORG, data: bytes = DATA, filename: str = "a.bin") -> str:
    """Upload ``data`` as a new asset of ``org``; its key."""
    body = file_part(data, filename=filename) + END
    response = await api.post(
        f"/internal/v1/uploads/{org}/{new_asset_id()}", content=body, headers={"content-type": MULTIPART}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["key"])


async def sign(api: httpx.AsyncClient, key: str, by: str | None = None, **extra: Any) -> str:
    """The CDN path and query of a signed URL for ``key``, made under ``by``."""
    body: dict[str, Any] = {"key": key, "expiresIn": 600, **extra}
    if by is not None:
        body["by"] = by
    response = await api.post("/internal/v1/sign", json=body)
    assert response.status_code == 200, response.text
    url = urlsplit(response.json()["url"])
    return f"{url.path}?{url.query}"


def query_of(path: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(path).query, keep_blank_values=True)


def with_query(path: str, query: list[tuple[str, str]]) -> str:
    return f"{urlsplit(path).path}?{urlencode(query)}"


async def revoke(api: httpx.AsyncClient, *entries: tuple[str, str, int]) -> httpx.Response:
    """POST (organization, authority, revokedAt) revocations as edge relays them."""
    body = {
        "revocations": [
            {"seq": seq, "organizationId": org, "authority": authority, "revokedAt": at}
            for seq, (org, authority, at) in enumerate(entries)
        ]
    }
    return await api.post("/internal/v1/grant-revocations", json=body)


async def revoked(api: httpx.AsyncClient, *entries: tuple[str, str, int]) -> None:
    response = await revoke(api, *entries)
    assert response.status_code == 200, response.text
    assert response.json() == {"stored": len(entries)}


async def refused_within(cdn: httpx.AsyncClient, path: str, seconds: float = WAIT_SECONDS) -> None:
    """Poll ``path`` until the CDN refuses it as revoked (failing after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        response = await cdn.get(path)
        if response.status_code == 403 or time.monotonic() > deadline:
            break
        assert response.status_code == 200, response.text
        await asyncio.sleep(0.05)
    error = assert_error(response, 403, "forbidden")
    assert error["message"] == REVOKED


async def served(cdn: httpx.AsyncClient, path: str, data: bytes = DATA) -> None:
    response = await cdn.get(path)
    assert response.status_code == 200, response.text
    assert response.content == data


def signed_by(key: str, tag: str, issued: int, expires: int | None = None) -> str:
    """A genuine URL for ``key`` under ``tag``, made at ``issued`` (as blob would have then)."""
    expires = expires or int(time.time()) + 600
    by = f"{tag}.{issued}"
    signature = signing.signature(SECRET.encode(), key, expires, by=by)
    return f"/{key}?{urlencode({'expires': expires, 'by': by, 'signature': signature})}"


def tag_of(org: str, authority: str) -> str:
    return signing.grant_tag(SECRET.encode(), org, authority)


def test_the_grant_tag_is_the_truncated_hmac_of_organization_and_authority() -> None:
    authority = key_authority()
    message = b"coffer-cdn-grant-v1\x00" + ORG.encode() + b"\x00" + authority.encode()
    digest = hmac.new(SECRET.encode(), message, hashlib.sha256).digest()
    expected = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()[:22]
    assert tag_of(ORG, authority) == expected
    assert tag_of(ORG, user_authority()) != expected
    assert tag_of(new_id("org"), authority) != expected
    assert signing.grant_tag(b"another secret", ORG, authority) != expected


def test_a_url_without_by_keeps_its_v1_signature() -> None:
    """Every URL made before ``by`` existed still verifies: the v1 messages are unchanged."""
    key, expires, secret = f"{ORG}/{new_asset_id()}/a.bin", int(time.time()) + 600, SECRET.encode()

    def v1(*fields: bytes) -> str:
        digest = hmac.new(secret, b"\x00".join(fields), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    plain = v1(b"coffer-cdn-url-v1", str(expires).encode(), key.encode())
    transformed = v1(b"coffer-cdn-url-transform-v1", str(expires).encode(), b"preset=thumb", key.encode())
    assert signing.signature(secret, key, expires) == plain
    assert signing.signature(secret, key, expires, "preset=thumb") == transformed
    by = f"{tag_of(ORG, key_authority())}.{int(time.time())}"
    assert signing.signature(secret, key, expires, by=by) not in (plain, transformed)
    assert signing.check(secret, key, str(expires), plain, now=time.time(), by=by) is not None


async def test_a_url_made_under_an_authority_serves_until_it_is_revoked(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    key = await put(api)
    authority = key_authority()
    before = int(time.time())
    path = await sign(api, key, by=authority)
    query = query_of(path)
    assert [name for name, _ in query] == ["expires", "by", "signature"]
    tag, issued = dict(query)["by"].split(".")
    assert tag == tag_of(ORG, authority) and before <= int(issued) <= time.time()
    await served(cdn, path)  # and the CDN now holds "not revoked" for this tag
    await revoked(api, (ORG, authority, int(time.time())))
    await refused_within(cdn, path)
    response = await cdn.get(path)
    assert response.headers["access-control-allow-origin"] == "*"


async def test_a_url_made_after_the_revocation_serves(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    """A URL made once the revocation has settled serves (a member added back); one made before
    it, or within SETTLE_SECONDS after it, is refused: edge may still act on a deleted key's
    cached answer for 5 s, and the clocks of auth and blob may differ."""
    key = await put(api)
    authority = user_authority()
    at = int(time.time()) - grants.SETTLE_SECONDS - 10
    await revoked(api, (ORG, authority, at))
    await served(cdn, await sign(api, key, by=authority))
    tag = tag_of(ORG, authority)
    for issued in (at + grants.SETTLE_SECONDS, at + 5, at, at - 1, at - 3600):
        error = assert_error(await cdn.get(signed_by(key, tag, issued)), 403, "forbidden")
        assert error["message"] == REVOKED
    await served(cdn, signed_by(key, tag, at + grants.SETTLE_SECONDS + 1))


async def test_a_revocation_ends_its_authority_in_its_organization_only(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    other_org = new_id("org")
    key, elsewhere = await put(api), await put(api, other_org)
    gone, kept = key_authority(), key_authority()
    paths = {
        "gone": await sign(api, key, by=gone),
        "kept": await sign(api, key, by=kept),
        "user": await sign(api, key, by=user_authority()),
        "elsewhere": await sign(api, elsewhere, by=gone),
        "untagged": await sign(api, key),
    }
    await revoked(api, (ORG, gone, int(time.time())))
    error = assert_error(await cdn.get(paths.pop("gone")), 403, "forbidden")
    assert error["message"] == REVOKED
    for path in paths.values():
        await served(cdn, path)


async def test_a_url_without_by_keeps_its_form_and_its_life(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    key = await put(api)
    authority = key_authority()
    path = await sign(api, key)
    query = dict(query_of(path))
    assert list(query) == ["expires", "signature"]
    assert query["signature"] == signing.signature(SECRET.encode(), key, int(query["expires"]))
    await revoked(api, (ORG, authority, int(time.time()) + 60))
    await served(cdn, path)


async def test_by_cannot_be_stripped_added_or_changed(api: httpx.AsyncClient, cdn: httpx.AsyncClient) -> None:
    key = await put(api)
    authority = key_authority()
    path = await sign(api, key, by=authority)
    await served(cdn, path)
    query = query_of(path)
    by = dict(query)["by"]
    tag, issued = by.split(".")

    def replaced(value: str) -> str:
        return with_query(path, [(n, value if n == "by" else v) for n, v in query])

    invalid = [
        with_query(path, [(n, v) for n, v in query if n != "by"]),  # stripped
        replaced(f"{tag_of(ORG, key_authority())}.{issued}"),  # another authority
        replaced(f"{tag}.{int(issued) + 1}"),  # made later than it was
        replaced(f"{tag}.{int(issued) - 1}"),
    ]
    for bad in invalid:
        error = assert_error(await cdn.get(bad), 403, "forbidden")
        assert error["message"] == "The URL signature is not valid.", bad
    malformed = ["", tag, f"{tag}.", f"{tag}.0{issued}", f"{tag[:-1]}.{issued}", f"{tag}!.{issued}"]
    malformed.append(f"{by}\n")
    for value in malformed:
        error = assert_error(await cdn.get(replaced(value)), 403, "forbidden")
        assert error["message"] == MALFORMED, value
    doubled = with_query(path, [*query, ("by", by)])
    assert_error(await cdn.get(doubled), 403, "forbidden")
    # A v1 URL given a by (so that it would name an authority not yet revoked) is no longer genuine.
    untagged = await sign(api, key)
    added = with_query(untagged, [*query_of(untagged)[:1], ("by", by), *query_of(untagged)[1:]])
    error = assert_error(await cdn.get(added), 403, "forbidden")
    assert error["message"] == "The URL signature is not valid."


async def test_a_tampered_url_is_refused_before_any_revocation_is_read(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = await put(api)
    reads: list[str] = []
    original = grants.read

    def counting(storage: Storage, name: str) -> int | None:
        reads.append(name)
        return original(storage, name)

    monkeypatch.setattr(grants, "read", counting)
    tag = tag_of(ORG, key_authority())
    expired = signed_by(key, tag, int(time.time()) - 7200, expires=int(time.time()) - 3600)
    forged = signed_by(key, tag, int(time.time())).replace("signature=", "signature=A")
    for path in (expired, forged):
        assert_error(await cdn.get(path), 403, "forbidden")
    assert reads == []
    await served(cdn, signed_by(key, tag, int(time.time())))
    assert reads == [grants.revocation_key(ORG, tag)]


@pytest.mark.processes  # a transform worker renders the variant
async def test_a_transformed_url_with_by_serves_and_is_revoked(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    image = bytes(pyvips.Image.black(64, 48, bands=3).new_from_image([200, 100, 50]).jpegsave_buffer())
    key = await put(api, data=image, filename="photo.jpg")
    authority = user_authority()
    path = await sign(api, key, by=authority, transform={"w": 32, "fmt": "png"})
    assert [name for name, _ in query_of(path)][-3:] == ["expires", "by", "signature"]
    response = await cdn.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    assert pyvips.Image.new_from_buffer(response.content, "").width == 32
    # The transform and by are both under the signature.
    assert_error(await cdn.get(path.replace("w=32", "w=31")), 403, "forbidden")
    stripped = with_query(path, [(n, v) for n, v in query_of(path) if n != "by"])
    assert_error(await cdn.get(stripped), 403, "forbidden")
    await revoked(api, (ORG, authority, int(time.time())))
    await refused_within(cdn, path)


@pytest.mark.parametrize(
    "entry",
    [
        {"organizationId": ORG, "authority": "key:abc", "revokedAt": 1},
        {"organizationId": ORG, "authority": "admin:usr_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", "revokedAt": 1},
        {"organizationId": ORG, "authority": "key:usr_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", "revokedAt": 1},
        {"organizationId": "org_1", "authority": "key:key_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", "revokedAt": 1},
        {"organizationId": "../x", "authority": "key:key_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", "revokedAt": 1},
        {"organizationId": ORG, "authority": "key:key_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", "revokedAt": -1},
        {"organizationId": ORG, "authority": "key:key_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", "revokedAt": "1"},
        {"organizationId": ORG, "authority": "key:key_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"},
    ],
)
async def test_revocations_refuse_bad_input(api: httpx.AsyncClient, entry: dict[str, Any]) -> None:
    body = {"revocations": [{"seq": 1, **entry}]}
    assert_error(await api.post("/internal/v1/grant-revocations", json=body), 400, "invalid_request")


async def test_revocations_take_a_full_batch_and_no_more(api: httpx.AsyncClient, storage: Storage) -> None:
    authority, at = key_authority(), int(time.time())
    full = [(ORG, authority, at - i) for i in range(MAX_REVOCATIONS)]
    response = await revoke(api, *full)  # ~150 KB of JSON: past the 64 KiB default body bound
    assert response.status_code == 200, response.text
    assert response.json() == {"stored": MAX_REVOCATIONS}
    # One authority: one object, holding the latest time.
    assert grants.read(storage, grants.revocation_key(ORG, tag_of(ORG, authority))) == at
    assert_error(await revoke(api, *full, (ORG, authority, at)), 400, "invalid_request")
    unauthenticated = await api.post(
        "/internal/v1/grant-revocations", json={"revocations": []}, headers={"x-coffer-internal-token": "no"}
    )
    assert_error(unauthenticated, 401, "unauthorized")


async def test_revocations_are_idempotent_and_keep_the_latest(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient, storage: Storage
) -> None:
    key = await put(api)
    authority = key_authority()
    tag = tag_of(ORG, authority)
    at = int(time.time())
    for _ in range(2):
        await revoked(api, (ORG, authority, at))
    await revoked(api, (ORG, authority, at - 100))  # an older one, relayed late
    assert grants.read(storage, grants.revocation_key(ORG, tag)) == at
    error = assert_error(await cdn.get(signed_by(key, tag, at - 50)), 403, "forbidden")
    assert error["message"] == REVOKED


async def test_stale_revocations_are_pruned(api: httpx.AsyncClient, storage: Storage) -> None:
    now = int(time.time())
    stale_at, fresh_at = now - grants.STALE_SECONDS - 10, now - grants.STALE_SECONDS + 3600
    other_org = new_id("org")
    planted = {
        "stale": grants.revocation_key(ORG, tag_of(ORG, key_authority())),
        "fresh": grants.revocation_key(ORG, tag_of(ORG, key_authority())),
        "elsewhere": grants.revocation_key(other_org, tag_of(other_org, key_authority())),
    }
    for name, key in planted.items():
        body = json.dumps({"revokedAt": fresh_at if name == "fresh" else stale_at}).encode()
        write_small(storage, key, body, content_type="application/json", private=True)
    new, too_old = user_authority(), user_authority()
    await revoked(api, (ORG, new, now), (ORG, too_old, stale_at))
    assert storage.stat(planted["stale"]) is None
    assert grants.read(storage, planted["fresh"]) == fresh_at
    assert grants.read(storage, planted["elsewhere"]) == stale_at  # another organization: not this call's
    assert grants.read(storage, grants.revocation_key(ORG, tag_of(ORG, new))) == now
    # A revocation that could refuse no live URL is not written at all.
    assert storage.stat(grants.revocation_key(ORG, tag_of(ORG, too_old))) is None


async def test_a_damaged_revocation_object_stops_no_batch(api: httpx.AsyncClient, storage: Storage) -> None:
    """One unreadable object under an organization's grants/ failed every batch that touched
    the organization (500), and edge's relay, which sends the same batch until it is stored,
    stalled behind it for every organization. It reads as no revocation and is replaced."""
    authority = key_authority()
    damaged = grants.revocation_key(ORG, tag_of(ORG, authority))
    write_small(storage, damaged, b"{not json", content_type="application/json", private=True)
    at = int(time.time())
    await revoked(api, (ORG, authority, at), (ORG, user_authority(), at))
    assert grants.read(storage, damaged) == at
