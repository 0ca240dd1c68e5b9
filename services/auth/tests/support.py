"""Helpers for auth's tests: the internal API as edge calls it."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy.engine import Engine
from sqlmodel import Session

from coffer_auth.models import DashboardSession
from coffer_kit.db import writer


def session_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def strong_password() -> str:
    return secrets.token_urlsafe(18)


class Api:
    """The internal API as edge calls it."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def call(
        self, method: str, path: str, *, token: str | None = None, org: str | None = None, **kwargs: Any
    ) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["x-session-hash"] = session_hash(token)
        if org is not None:
            headers["x-organization-id"] = org
        return await self.client.request(method, "/internal/v1" + path, headers=headers, **kwargs)

    async def register(
        self, email: str | None = None, password: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        body = {
            "email": email or f"u{secrets.token_hex(4)}@example.com",
            "password": password or strong_password(),
        }
        r = await self.call("POST", "/users", json={**body, **extra})
        assert r.status_code == 201, r.text
        out: dict[str, Any] = r.json()
        out["password"] = body["password"]
        return out

    async def org(self, token: str, name: str = "Acme") -> dict[str, Any]:
        r = await self.call("POST", "/orgs", token=token, json={"name": name})
        assert r.status_code == 201, r.text
        out: dict[str, Any] = r.json()
        return out


def age_session(engine: Engine, session_id: str, **deltas: timedelta) -> None:
    """Move a session's timestamps into the past, as time passing would."""
    with Session(writer(engine)) as s:
        row = s.get(DashboardSession, session_id)
        assert row is not None
        for field, delta in deltas.items():
            setattr(row, field, getattr(row, field) - delta)
        s.add(row)
        s.commit()


async def join(
    api: Api, owner: dict[str, Any], org_id: str, who: dict[str, Any], role: str = "member"
) -> None:
    made = await api.call(
        "POST",
        f"/orgs/{org_id}/invitations",
        token=owner["token"],
        json={"email": who["user"]["email"], "role": role},
    )
    assert made.status_code == 201, made.text
    token_hash = hashlib.sha256(made.json()["token"].encode()).hexdigest()
    accepted = await api.call(
        "POST", "/invitations/accept", token=who["token"], json={"tokenHash": token_hash}
    )
    assert accepted.status_code == 200, accepted.text
