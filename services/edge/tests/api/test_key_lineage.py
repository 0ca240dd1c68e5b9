"""A key made by an owner's personal key ends with that owner's authority, end to end: the
audit's reproduction (the removed owner's key refused, the key it made still minting keys
and upload tokens), and its demotion twin."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx
import pytest

from coffer_kit.contract.ids import new_id


def client(stack: Any, key: str) -> httpx.Client:
    return httpx.Client(base_url=stack.edge_url, headers={"x-api-key": key}, timeout=30)


def refused_within_cache_bound(api: httpx.Client) -> int:
    """The status edge answers once its cached answer for the key (5 s) has passed."""
    deadline = time.monotonic() + 5
    while (status := api.get("/api/keys/self").status_code) == 200:
        assert time.monotonic() < deadline, "a key outlived its maker's owner"
        time.sleep(0.05)
    return status


@pytest.mark.parametrize("how", ["remove-member", "set-role"])
def test_an_organization_key_made_by_an_owners_key_ends_when_the_owner_goes(
    stack: Any, tenant: Any, admin: Any, how: str
) -> None:
    def owner() -> dict[str, Any]:
        email = f"{new_id('u')[-8:].lower()}@example.com"
        user = admin("create-user", "--email", email, "--password", "pw-" + secrets.token_urlsafe(18))
        admin("add-member", "--org", tenant.org_id, "--user", user["id"], "--role", "owner")
        return dict(user)

    owner()  # (an organization keeps an owner)
    user = owner()
    personal = str(admin("create-key", "--org", tenant.org_id, "--user", user["id"])["key"])
    with client(stack, personal) as mine:
        made = mine.post("/api/keys", json={"kind": "organization", "name": "ci"})
        assert made.status_code == 201, made.text
    with client(stack, made.json()["key"]) as child:
        assert child.post("/api/keys", json={"name": "ci-cdn"}).status_code == 201
        extra = ["--role", "member"] if how == "set-role" else []
        admin(how, "--org", tenant.org_id, "--user", user["id"], *extra)
        assert refused_within_cache_bound(child) == 401
        assert child.post("/api/keys", json={}).status_code == 401
        minted = child.post("/api/upload-tokens", json={"maxBytes": 10, "expiresIn": 60})
        assert minted.status_code == 401, minted.text
    assert tenant.api.get("/api/keys/self").status_code == 200  # the organization's own key acts on
