"""CONTRACT §7: per-key rate limits answer 429 with Retry-After."""

from __future__ import annotations

import httpx
import pytest

from coffer_kit.testing import assert_error

pytestmark = pytest.mark.e2e


@pytest.fixture
def limited_stack(own_stack_with):
    return own_stack_with(COFFER_EDGE_RATE_LIMIT="5/minute")


def test_rate_limit_is_per_key(limited_stack, admin_for) -> None:
    admin = admin_for(limited_stack)
    org = admin("create-org", "--name", "Busy")["id"]
    first = admin("create-key", "--org", org)["key"]
    second = admin("create-key", "--org", org)["key"]
    with httpx.Client(base_url=limited_stack.edge_url) as api:
        statuses = [api.get("/api/folders", headers={"x-api-key": first}).status_code for _ in range(5)]
        assert statuses == [200] * 5
        limited = api.get("/api/folders", headers={"x-api-key": first})
        assert_error(limited, 429, "rate_limited")
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        # Another key of the same organization has its own budget.
        assert api.get("/api/folders", headers={"x-api-key": second}).status_code == 200
