"""metadata refuses hostile input with 400, never a 500 (issue 11), on both databases."""

from __future__ import annotations

import httpx
import pytest

from coffer_kit.contract.limits import PAGE_OFFSET_MAX
from coffer_testkit.testing import assert_error

pytestmark = pytest.mark.anyio

ORG = "org_01JD0000000000000000000000"


async def test_an_offset_past_its_bound_is_400(api: httpx.AsyncClient) -> None:
    base = f"/internal/v1/orgs/{ORG}/assets"
    for offset in (PAGE_OFFSET_MAX + 1, 2**63, 10**40):
        error = assert_error(await api.get(base, params={"offset": offset}), 400, "invalid_request")
        assert error["details"]["field"] == "offset"
    # The largest offset (issue 49: deeper pages use a cursor) is a valid (empty) page.
    page = await api.get(base, params={"offset": PAGE_OFFSET_MAX})
    assert page.status_code == 200, page.text
    assert page.json()["assets"] == [] and page.json()["offset"] == PAGE_OFFSET_MAX


@pytest.mark.parametrize("body", [b'{"name": "x\\ud800y"}', b'{"name": "x", "parentId": "fld_\\ud800"}'])
async def test_a_lone_surrogate_in_a_folder_is_400(api: httpx.AsyncClient, body: bytes) -> None:
    response = await api.post(
        f"/internal/v1/orgs/{ORG}/folders", content=body, headers={"content-type": "application/json"}
    )
    assert_error(response, 400, "invalid_request")
    assert (await api.get(f"/internal/v1/orgs/{ORG}/folders")).json() == {"folders": []}


async def test_ids_with_a_nul_are_unknown(api: httpx.AsyncClient) -> None:
    base = f"/internal/v1/orgs/{ORG}"
    nul = "fld_\x00"
    assert_error(await api.get(f"{base}/folders", params={"parentId": nul}), 404, "not_found")
    assert_error(await api.get(f"{base}/assets", params={"folderId": nul}), 404, "not_found")
    assert_error(await api.get(f"{base}/assets/ast_%00"), 404, "not_found")
    assert_error(await api.delete(f"{base}/folders/fld_%00"), 404, "not_found")
    assert_error(await api.post(f"{base}/assets/ast_%00/tombstone"), 404, "not_found")
    response = await api.post(f"{base}/folders", json={"name": "a", "parentId": nul})
    assert_error(response, 404, "not_found")
