"""PUT /internal/v1/held/{key} on both drivers: an object is held back from every download, signed
or not, for its malware scan (issue 48) or for the trash (issue 47). The two holds are flags of
their own, so a scan that passes while the asset is in the trash releases only the scan's
(before they were apart, a deleted file's URLs served again once its scan passed; the scan
itself against a real clamd: test_scan.py)."""

from __future__ import annotations

import httpx
import pytest

from coffer_blob.config import Settings
from coffer_testkit.testing import assert_error

from .support import ORG, new_asset_id, upload
from .test_cdn import key_path, signed_path

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["fs", "s3"])
def settings(request: pytest.FixtureRequest) -> Settings:
    return request.getfixturevalue("settings" if request.param == "fs" else "s3_settings")  # type: ignore[no-any-return]


async def hold(api: httpx.AsyncClient, key: str, held: bool, reason: str | None = None) -> httpx.Response:
    body: dict[str, object] = {"held": held}
    if reason is not None:
        body["reason"] = reason
    return await api.put(f"/internal/v1/held/{key}", json=body)


async def served(api: httpx.AsyncClient, cdn: httpx.AsyncClient, key: str) -> bool:
    """Whether the object's bare key and its signed URL serve it (both, or neither)."""
    bare = await cdn.get(key_path(key))
    signed = await cdn.get(await signed_path(api, key))
    assert bare.status_code == signed.status_code, (bare.status_code, signed.status_code)
    if bare.status_code == 404:
        assert_error(bare, 404, "not_found")
        assert (await cdn.head(key_path(key))).status_code == 404
    return bare.status_code == 200


async def test_the_scans_hold_and_the_trashs_are_apart(
    api: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    key = (await upload(api, b"deleted right after its upload")).json()["key"]
    assert await served(api, cdn, key)

    # In the trash; then its scan passes, which releases the scan's hold: still not served.
    assert (await hold(api, key, True, "trash")).status_code == 200
    assert not await served(api, cdn, key)
    released = await hold(api, key, False)  # no reason: the scan's, as before issue 47's
    assert released.status_code == 200 and released.json() == {"held": False, "reason": "scan"}
    assert not await served(api, cdn, key)

    # Restored while a scan holds it: still not served until the scan passes.
    assert (await hold(api, key, True, "scan")).status_code == 200
    assert (await hold(api, key, False, "trash")).status_code == 200
    assert not await served(api, cdn, key)
    assert (await hold(api, key, False, "scan")).status_code == 200
    assert await served(api, cdn, key)

    # Each is idempotent.
    for reason in ("scan", "trash"):
        assert (await hold(api, key, False, reason)).status_code == 200
    assert await served(api, cdn, key)


async def test_a_hold_for_no_such_reason_or_object_is_refused(api: httpx.AsyncClient) -> None:
    key = (await upload(api)).json()["key"]
    assert (await hold(api, key, True, "audit")).status_code in (400, 422)
    assert_error(await hold(api, f"{ORG}/{new_asset_id()}/none.bin", True, "trash"), 404, "not_found")
