# ruff: noqa: ARG005 (each route takes the resources, which some do not use)
"""The authorization matrix (issue 23): every public route, by every kind of caller, with the
exact status. The resource under test always belongs to organization A.

Callers: A's organization key; the personal keys of A's owner and of a member of A alone; the
personal key of a user in A and B, without ``x-organization-id`` (400), naming A, naming B
(acting in B), and naming C, where the user is no member (403); B's organization key; no key.
Acting in another organization, a caller gets 403 for A's folders and assets (contract §5) and
404 for A's upload tokens and transform presets; its lists hold nothing of A's. Changing
transform presets (CONTRACT §10) is for organization keys and owners: a member's personal key
is 403, in either of its organizations.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from coffer_kit.ids import new_id

OK, IN_B, NO_KEY, NO_ORG, NOT_MEMBER = "ok", "in_b", "no_key", "no_org", "not_member"


@dataclass(frozen=True)
class Route:
    """One public route: how to call it on a fresh resource of A, and what it answers."""

    name: str
    call: Callable[[httpx.Client, dict[str, str]], httpx.Response]
    ok: int
    in_b: int  # a caller acting in another organization
    listing: bool = False  # answers A's callers with A's data, others with their own
    member: int | None = None  # a member's (not an owner's) personal key, where it differs


def _routes() -> list[Route]:
    return [
        Route("GET /api/folders", lambda c, r: c.get("/api/folders"), 200, 200, listing=True),
        Route("POST /api/folders", lambda c, r: c.post("/api/folders", json={"name": new_id("n")}), 201, 201),
        Route(
            "POST /api/folders (in A's)",
            lambda c, r: c.post("/api/folders", json={"name": "x", "parentId": r["folder"]}),
            201,
            403,
        ),
        Route("GET /api/folders/{id}", lambda c, r: c.get(f"/api/folders/{r['folder']}"), 200, 403),
        Route(
            "PATCH /api/folders/{id}",
            lambda c, r: c.patch(f"/api/folders/{r['folder']}", json={"name": "renamed"}),
            200,
            403,
        ),
        Route("DELETE /api/folders/{id}", lambda c, r: c.delete(f"/api/folders/{r['folder']}"), 200, 403),
        Route("GET /api/assets", lambda c, r: c.get("/api/assets"), 200, 200, listing=True),
        Route(
            "GET /api/assets?folderId",
            lambda c, r: c.get("/api/assets", params={"folderId": r["folder"]}),
            200,
            403,
        ),
        Route(
            "POST /api/assets", lambda c, r: c.post("/api/assets", files={"file": ("f.txt", b"f")}), 201, 201
        ),
        Route(
            "POST /api/assets (into A's)",
            lambda c, r: c.post(
                "/api/assets", files={"file": ("f.txt", b"f")}, data={"folderId": r["folder"]}
            ),
            201,
            403,
        ),
        Route("GET /api/assets/{id}", lambda c, r: c.get(f"/api/assets/{r['asset']}"), 200, 403),
        Route(
            "PATCH /api/assets/{id}",
            lambda c, r: c.patch(f"/api/assets/{r['asset']}", json={"name": "renamed"}),
            200,
            403,
        ),
        Route("DELETE /api/assets/{id}", lambda c, r: c.delete(f"/api/assets/{r['asset']}"), 200, 403),
        Route("GET /api/assets/{id}/url", lambda c, r: c.get(f"/api/assets/{r['asset']}/url"), 200, 403),
        Route("GET /api/usage", lambda c, r: c.get("/api/usage"), 200, 200),
        Route("POST /api/upload-tokens", lambda c, r: c.post("/api/upload-tokens", json={}), 201, 201),
        Route(
            "POST /api/upload-tokens (into A's)",
            lambda c, r: c.post("/api/upload-tokens", json={"folderId": r["folder"]}),
            201,
            403,
        ),
        Route(
            "DELETE /api/upload-tokens/{id}",
            lambda c, r: c.delete(f"/api/upload-tokens/{r['token']}"),
            200,
            404,
        ),
        # Resumable uploads (CONTRACT §9): another organization's upload is 404.
        Route("POST /api/uploads/tus", lambda c, r: _tus_create(c, "f.bin"), 201, 201),
        Route(
            "POST /api/uploads/tus (into A's)", lambda c, r: _tus_create(c, "f.bin", r["folder"]), 201, 403
        ),
        Route("HEAD /api/uploads/tus/{id}", lambda c, r: c.head(r["tus"], headers=TUS), 200, 404),
        Route(
            "PATCH /api/uploads/tus/{id}",
            lambda c, r: c.patch(r["tus"], content=b"a", headers={**TUS, **TUS_CHUNK}),
            204,
            404,
        ),
        Route("DELETE /api/uploads/tus/{id}", lambda c, r: c.delete(r["tus"], headers=TUS), 204, 404),
        # Image transform presets (CONTRACT §10): members read, organization keys and owners write.
        Route(
            "GET /api/transform-presets", lambda c, r: c.get("/api/transform-presets"), 200, 200, listing=True
        ),
        Route(
            "GET /api/transform-presets/{name}",
            lambda c, r: c.get(f"/api/transform-presets/{r['preset']}"),
            200,
            404,
        ),
        Route(
            "PUT /api/transform-presets/{name}",
            lambda c, r: c.put(f"/api/transform-presets/{new_id('p')[-8:].lower()}", json={"w": 99}),
            200,
            200,
            member=403,
        ),
        Route(
            "DELETE /api/transform-presets/{name}",
            lambda c, r: c.delete(f"/api/transform-presets/{r['preset']}"),
            200,
            404,
            member=403,
        ),
        Route(
            "GET /api/assets/{id}/url?preset",
            lambda c, r: c.get(f"/api/assets/{r['asset']}/url", params={"preset": r["preset"]}),
            200,
            403,
        ),
        Route(
            "GET /api/assets/{id}/url?w",
            lambda c, r: c.get(f"/api/assets/{r['asset']}/url", params={"w": "64", "fmt": "webp"}),
            200,
            403,
        ),
    ]


TUS = {"Tus-Resumable": "1.0.0"}
TUS_CHUNK = {"Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}


def _tus_create(client: httpx.Client, name: str, folder: str | None = None) -> httpx.Response:
    metadata = "filename " + base64.b64encode(name.encode()).decode()
    if folder is not None:
        metadata += ",folderId " + base64.b64encode(folder.encode()).decode()
    return client.post("/api/uploads/tus", headers={**TUS, "Upload-Length": "1", "Upload-Metadata": metadata})


EXPECTED = {NO_KEY: 401, NO_ORG: 400, NOT_MEMBER: 403}
# Callers whose key is a member's, not an owner's, in the organization they act in.
MEMBERS = {
    "personal key of a member of A alone",
    "personal key of a user in A and B, naming A",
    "personal key of a user in A and B, naming B",
}
CALLERS = {
    "A's organization key": OK,
    "A's owner's personal key": OK,
    "personal key of a member of A alone": OK,
    "personal key of a user in A and B, naming A": OK,
    "personal key of a user in A and B, naming B": IN_B,
    "personal key of a user in A and B, no header": NO_ORG,
    "personal key of a user in A and B, naming C": NOT_MEMBER,
    "B's organization key": IN_B,
    "no key": NO_KEY,
}


@pytest.fixture
def world(stack: Any, admin: Any) -> Any:
    """Organizations A, B and C, their people and keys; ``client(caller)`` sends as one."""
    a, b, c = (admin("create-org", "--name", name)["id"] for name in ("A", "B", "C"))

    def person(*orgs: str, role: str = "member") -> str:
        user = admin(
            "create-user",
            "--email",
            f"{new_id('u')[-8:].lower()}@example.com",
            "--password",
            "pw-" + secrets.token_urlsafe(18),  # never "-…", which argparse takes for an option
        )
        for org in orgs:
            admin("add-member", "--org", org, "--user", user["id"], "--role", role)
        return str(admin("create-key", "--org", orgs[0], "--user", user["id"])["key"])

    multi = person(a, b)
    headers = {
        "A's organization key": {"x-api-key": admin("create-key", "--org", a)["key"]},
        "A's owner's personal key": {"x-api-key": person(a, role="owner")},
        "personal key of a member of A alone": {"x-api-key": person(a)},
        "personal key of a user in A and B, naming A": {"x-api-key": multi, "x-organization-id": a},
        "personal key of a user in A and B, naming B": {"x-api-key": multi, "x-organization-id": b},
        "personal key of a user in A and B, no header": {"x-api-key": multi},
        "personal key of a user in A and B, naming C": {"x-api-key": multi, "x-organization-id": c},
        "B's organization key": {"x-api-key": admin("create-key", "--org", b)["key"]},
        "no key": {},
    }
    clients = {
        name: httpx.Client(base_url=stack.edge_url, headers=h, timeout=30) for name, h in headers.items()
    }
    yield clients
    for client in clients.values():
        client.close()


def _fresh_resources(a: httpx.Client) -> dict[str, str]:
    folder = a.post("/api/folders", json={"name": new_id("f")}).json()["id"]
    asset = a.post("/api/assets", files={"file": ("a.txt", b"a")}, data={"folderId": folder}).json()["id"]
    token = a.post("/api/upload-tokens", json={}).json()["id"]
    tus = urlsplit(_tus_create(a, "a.bin").headers["location"]).path
    # One name, replaced each time: the routes never pile up past the 20 presets allowed.
    assert a.put("/api/transform-presets/house-style", json={"w": 300, "fmt": "webp"}).status_code == 200
    return {"folder": folder, "asset": asset, "token": token, "tus": tus, "preset": "house-style"}


@pytest.mark.parametrize("caller", list(CALLERS))
def test_every_route_answers_every_caller_as_the_matrix_says(world: Any, caller: str) -> None:
    owner_a = world["A's organization key"]
    wrong: list[str] = []
    for route in _routes():
        resources = _fresh_resources(owner_a)
        answer = route.call(world[caller], resources)
        kind = CALLERS[caller]
        expected = route.ok if kind == OK else route.in_b if kind == IN_B else EXPECTED[kind]
        if route.member is not None and caller in MEMBERS:
            expected = route.member
        if answer.status_code != expected:
            wrong.append(f"{route.name}: {answer.status_code}, expected {expected} ({answer.text[:120]})")
        elif expected >= 400 and answer.request.method != "HEAD" and "error" not in answer.json():
            wrong.append(f"{route.name}: {expected} without the error envelope")
        elif route.listing and kind == IN_B and any(v in answer.text for v in resources.values()):
            wrong.append(f"{route.name}: lists A's resources to another organization")
    assert not wrong, "\n".join(wrong)
