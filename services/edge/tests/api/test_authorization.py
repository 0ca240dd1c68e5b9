# ruff: noqa: ARG005 (each route takes the resources, which some do not use)
"""The authorization matrix (issue 23): every public route, by every kind of caller, with the
exact status. The resource under test always belongs to organization A.

Callers: A's organization key; the personal keys of A's owner and of a member of A alone; the
personal key of a user in A and B, without ``x-organization-id`` (400), naming A, naming B
(acting in B), and naming C, where the user is no member (403); B's organization key; no key.
Acting in another organization, a caller gets 403 for A's folders and assets (contract §5) and
404 for A's upload tokens, transform presets and webhooks; its lists hold nothing of A's.
Changing transform presets, and anything of webhooks (CONTRACT §11), is for organization keys
and owners: a member's personal key gets 403 (``member``), in either of its organizations.
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

from coffer_kit.contract.ids import new_id
from coffer_testkit.testing import TLS

OK, IN_B, NO_KEY, NO_ORG, NOT_MEMBER = "ok", "in_b", "no_key", "no_org", "not_member"
MEMBER, MEMBER_IN_B = "member", "member_in_b"  # a member's personal key, acting in A or in B


@dataclass(frozen=True)
class Route:
    """One public route: how to call it on a fresh resource of A, and what it answers."""

    name: str
    call: Callable[[httpx.Client, dict[str, str]], httpx.Response]
    ok: int
    in_b: int  # a caller acting in another organization
    listing: bool = False  # answers A's callers with A's data, others with their own
    member: int | None = None  # a member (not an owner) acting in A, when not ``ok``
    member_in_b: int | None = None  # a member acting in B, when not ``in_b``

    def expected(self, kind: str) -> int:
        if kind == MEMBER:
            return self.ok if self.member is None else self.member
        if kind == MEMBER_IN_B:
            return self.in_b if self.member_in_b is None else self.member_in_b
        return self.ok if kind == OK else self.in_b if kind == IN_B else EXPECTED[kind]


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
        Route(
            "PATCH /api/folders/{id} (default expiry)",
            lambda c, r: c.patch(f"/api/folders/{r['folder']}", json={"expiryDays": 30}),
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
        # An organization's open uploads (issue 44): its own listed; another's is 404.
        Route("GET /api/uploads", lambda c, r: c.get("/api/uploads"), 200, 200, listing=True),
        Route(
            "DELETE /api/uploads/{id}",
            lambda c, r: c.delete(f"/api/uploads/{r['tus'].rsplit('/', 1)[1]}"),
            200,
            404,
        ),
        # Webhooks (CONTRACT §11): organization keys and owners; another organization's is 404.
        Route(
            "GET /api/webhooks",
            lambda c, r: c.get("/api/webhooks"),
            200,
            200,
            listing=True,
            member=403,
            member_in_b=403,
        ),
        Route(
            "POST /api/webhooks",
            lambda c, r: c.post("/api/webhooks", json=HOOK),
            201,
            201,
            member=403,
            member_in_b=403,
        ),
        Route(
            "GET /api/webhooks/{id}",
            lambda c, r: c.get(f"/api/webhooks/{r['webhook']}"),
            200,
            404,
            member=403,
            member_in_b=403,
        ),
        Route(
            "PATCH /api/webhooks/{id}",
            lambda c, r: c.patch(f"/api/webhooks/{r['webhook']}", json={"description": "d"}),
            200,
            404,
            member=403,
            member_in_b=403,
        ),
        Route(
            "DELETE /api/webhooks/{id}",
            lambda c, r: c.delete(f"/api/webhooks/{r['webhook']}"),
            200,
            404,
            member=403,
            member_in_b=403,
        ),
        Route(
            "POST /api/webhooks/{id}/rotate-secret",
            lambda c, r: c.post(f"/api/webhooks/{r['webhook']}/rotate-secret"),
            200,
            404,
            member=403,
            member_in_b=403,
        ),
        Route(
            "POST /api/webhooks/{id}/test",
            lambda c, r: c.post(f"/api/webhooks/{r['webhook']}/test"),
            202,
            404,
            member=403,
            member_in_b=403,
        ),
        Route(
            "GET /api/webhooks/{id}/deliveries",
            lambda c, r: c.get(f"/api/webhooks/{r['webhook']}/deliveries"),
            200,
            404,
            member=403,
            member_in_b=403,
        ),
        Route(
            "POST /api/webhooks/{id}/deliveries/{did}/redeliver",
            lambda c, r: c.post(f"/api/webhooks/{r['webhook']}/deliveries/{r['delivery']}/redeliver"),
            202,
            404,
            member=403,
            member_in_b=403,
        ),
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
            member_in_b=403,
        ),
        Route(
            "DELETE /api/transform-presets/{name}",
            lambda c, r: c.delete(f"/api/transform-presets/{r['preset']}"),
            200,
            404,
            member=403,
            member_in_b=403,
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
        # The trash (issue 47; A keeps one): members restore and purge only what they deleted
        # (A's organization key trashed r["trashed"]); permanent deletes, emptying the trash
        # and the retention are for organization keys and owners.
        Route("GET /api/trash", lambda c, r: c.get("/api/trash"), 200, 200, listing=True),
        Route("GET /api/trash/settings", lambda c, r: c.get("/api/trash/settings"), 200, 200),
        Route(
            "PUT /api/trash/settings",
            lambda c, r: c.put("/api/trash/settings", json={"retentionDays": 7}),
            200,
            200,
            member=403,
            member_in_b=403,
        ),
        Route(
            "POST /api/trash/{id}/restore",
            lambda c, r: c.post(f"/api/trash/{r['trashed']}/restore"),
            200,
            403,
            member=403,
            member_in_b=403,
        ),
        Route(
            "DELETE /api/trash/{id}",
            lambda c, r: c.delete(f"/api/trash/{r['trashed']}"),
            200,
            403,
            member=403,
            member_in_b=403,
        ),
        Route(
            "DELETE /api/trash", lambda c, r: c.delete("/api/trash"), 200, 200, member=403, member_in_b=403
        ),
        Route(
            "DELETE /api/assets/{id}?permanent=true",
            lambda c, r: c.delete(f"/api/assets/{r['asset']}", params={"permanent": "true"}),
            200,
            403,
            member=403,
            member_in_b=403,
        ),
        Route(
            "GET /api/assets?expiresBefore",
            lambda c, r: c.get("/api/assets", params={"expiresBefore": "2100-01-01T00:00:00Z"}),
            200,
            200,
            listing=True,
        ),
    ]


# A public address: URLs are checked (CONTRACT §11), and nothing is sent in process.
HOOK = {"url": "https://93.184.215.34/hook", "events": ["asset.created"]}


TUS = {"Tus-Resumable": "1.0.0"}
TUS_CHUNK = {"Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"}


def _tus_create(client: httpx.Client, name: str, folder: str | None = None) -> httpx.Response:
    metadata = "filename " + base64.b64encode(name.encode()).decode()
    if folder is not None:
        metadata += ",folderId " + base64.b64encode(folder.encode()).decode()
    return client.post("/api/uploads/tus", headers={**TUS, "Upload-Length": "1", "Upload-Metadata": metadata})


EXPECTED = {NO_KEY: 401, NO_ORG: 400, NOT_MEMBER: 403}
CALLERS = {
    "A's organization key": OK,
    "A's owner's personal key": OK,
    "personal key of a member of A alone": MEMBER,
    "personal key of a user in A and B, naming A": MEMBER,
    "personal key of a user in A and B, naming B": MEMBER_IN_B,
    "personal key of a user in A and B, no header": NO_ORG,
    "personal key of a user in A and B, naming C": NOT_MEMBER,
    "B's organization key": IN_B,
    "no key": NO_KEY,
}


@pytest.fixture
def world(stack: Any, admin: Any) -> Any:
    """Organizations A, B and C, their people and keys; ``client(caller)`` sends as one."""
    a, b, c = (admin("create-org", "--name", name)["id"] for name in ("A", "B", "C"))
    admin("set-trash-retention", "--org", a, "--days", "7")  # (before any key of A is used)

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
        name: httpx.Client(base_url=stack.edge_url, headers=h, timeout=30, verify=TLS)
        for name, h in headers.items()
    }
    yield clients
    for client in clients.values():
        client.close()


# Resources made together, and so replaced together: a folder always holds an asset.
_TOGETHER = {
    "folder": ("folder", "asset"),
    "asset": ("folder", "asset"),
    "tus": ("tus", "tus_id"),
    "tus_id": ("tus", "tus_id"),
    "webhook": ("webhook", "delivery"),
    "delivery": ("webhook", "delivery"),
}


class Resources(dict[str, str]):
    """A's resources, each made the first time a route asks for it (its call reads
    ``r["folder"]`` and so on), in the state it always has (a folder holds an asset), and kept
    for the next route until a call may have changed it: a call that is not a GET or HEAD and
    succeeds spends what it read, and the next route that asks gets a new one. A caller refused
    everywhere thus pays for each resource once. ``everything()`` makes them all, for a listing
    that must not show them to another organization."""

    def __init__(self, a: httpx.Client) -> None:
        super().__init__()
        self._a = a
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __missing__(self, key: str) -> str:
        a = self._a
        if key in ("folder", "asset"):
            self["folder"] = a.post("/api/folders", json={"name": new_id("f")}).json()["id"]
            data = {"folderId": self["folder"]}
            self["asset"] = a.post("/api/assets", files={"file": ("a.txt", b"a")}, data=data).json()["id"]
        elif key == "token":
            self["token"] = a.post("/api/upload-tokens", json={}).json()["id"]
        elif key in ("tus", "tus_id"):
            self["tus"] = urlsplit(_tus_create(a, "a.bin").headers["location"]).path
            self["tus_id"] = self["tus"].rsplit("/", 1)[1]  # (what a listing would show of it)
        elif key == "preset":
            # One name, replaced each time: the routes never pile up past the 20 presets allowed.
            preset = a.put("/api/transform-presets/house-style", json={"w": 300, "fmt": "webp"})
            assert preset.status_code == 200, preset.text
            self["preset"] = "house-style"
        elif key == "trashed":  # an asset in A's trash (A keeps a trash: see ``world``)
            self["trashed"] = a.post("/api/assets", files={"file": ("t.txt", b"t")}).json()["id"]
            assert a.delete(f"/api/assets/{self['trashed']}").status_code == 200
        elif key in ("webhook", "delivery"):
            self["webhook"] = a.post("/api/webhooks", json=HOOK).json()["id"]
            self["delivery"] = a.post(f"/api/webhooks/{self['webhook']}/test").json()["id"]
        else:
            raise KeyError(key)
        return super().__getitem__(key)

    def everything(self) -> Resources:
        for key in ("folder", "token", "tus", "preset", "trashed", "webhook"):
            self[key]
        self.read.clear()
        return self

    def spend(self, answer: httpx.Response) -> None:
        """Forget what ``answer``'s call read when it may have changed it."""
        if answer.request.method not in ("GET", "HEAD") and answer.status_code < 400:
            for key in self.read:
                for spent in _TOGETHER.get(key, (key,)):
                    if spent == "webhook" and spent in self:
                        self.drop_webhook()
                    self.pop(spent, None)
        self.read.clear()

    def drop_webhook(self) -> None:
        """An organization holds at most 10 webhooks: never keep one."""
        if "webhook" in self:
            self._a.delete(f"/api/webhooks/{super().__getitem__('webhook')}")


@pytest.mark.parametrize("caller", list(CALLERS))
def test_every_route_answers_every_caller_as_the_matrix_says(world: Any, caller: str) -> None:
    resources = Resources(world["A's organization key"])
    kind = CALLERS[caller]
    wrong: list[str] = []
    for route in _routes():
        if route.listing:
            resources.everything()
        answer = route.call(world[caller], resources)
        expected = route.expected(kind)
        if answer.status_code != expected:
            wrong.append(f"{route.name}: {answer.status_code}, expected {expected} ({answer.text[:120]})")
        elif expected >= 400 and answer.request.method != "HEAD" and "error" not in answer.json():
            wrong.append(f"{route.name}: {expected} without the error envelope")
        elif (
            route.listing
            and kind in (IN_B, MEMBER_IN_B)
            and any(v in answer.text for v in resources.values())
        ):
            wrong.append(f"{route.name}: lists A's resources to another organization")
        resources.spend(answer)
    resources.drop_webhook()
    assert not wrong, "\n".join(wrong)
