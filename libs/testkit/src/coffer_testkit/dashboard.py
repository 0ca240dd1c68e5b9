"""A signed-in dashboard user for in-process tests: posting like the dashboard's pages do."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from coffer_testkit.testing import TLS

SAME_ORIGIN = {"sec-fetch-site": "same-origin"}
COOKIE = "__Host-coffer_session"


@dataclass
class Browser:
    """A signed-in user with an organization, posting like the dashboard's pages do."""

    http: httpx.Client
    org_id: str
    csrf: str
    email: str = ""

    @property
    def files(self) -> str:
        return f"/dashboard/o/{self.org_id}/files"

    def post(self, path: str, data: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
        return self.http.post(path, data={"csrf_token": self.csrf, **(data or {})}, **kwargs)

    def upload_xhr(self, data: bytes, name: str = "f.bin", folder: str = "") -> httpx.Response:
        query = f"?folder={folder}" if folder else ""
        return self.http.post(
            f"{self.files}/upload{query}",
            files={"file": (name, data, "application/octet-stream")},
            headers={"x-csrf-token": self.csrf},
        )

    def upload_form(self, parts: list[tuple[str, Any]], folder: str = "") -> httpx.Response:
        """A plain form post: the parts in this order (httpx writes data fields first)."""
        boundary = "----coffer" + secrets.token_hex(8)
        body = b""
        for name, value in parts:
            if isinstance(value, bytes):
                head = f'Content-Disposition: form-data; name="{name}"; filename="plain.txt"\r\n'
                head += "Content-Type: text/plain\r\n"
            else:
                head, value = f'Content-Disposition: form-data; name="{name}"\r\n', value.encode()
            body += f"--{boundary}\r\n{head}\r\n".encode() + value + b"\r\n"
        body += f"--{boundary}--\r\n".encode()
        query = f"?folder={folder}" if folder else ""
        return self.http.post(
            f"{self.files}/upload{query}",
            content=body,
            headers={"content-type": f"multipart/form-data; boundary={boundary}"},
        )

    def counts(self) -> tuple[int, int]:
        """Bytes and files as the files page shows them (metadata's usage)."""
        page = self.http.get(self.files).text
        used = re.search(r'id="usage-bytes">([\d,]+)<', page)
        count = re.search(r'id="usage-count">([\d,]+)<', page)
        assert used and count, page[:2000]
        return int(used.group(1).replace(",", "")), int(count.group(1).replace(",", ""))


def sign_up(edge_url: str, org_name: str = "Files") -> Browser:
    http = httpx.Client(base_url=edge_url, headers=SAME_ORIGIN, timeout=60, verify=TLS)
    email = f"files-{secrets.token_hex(4)}@example.com"
    answer = http.post(
        "/dashboard/register", data={"email": email, "password": "pw-" + secrets.token_urlsafe(16)}
    )
    assert answer.status_code == 303, answer.text
    # The cookie is Secure: httpx keeps it to https, so it is sent by hand over loopback http.
    http.headers["cookie"] = f"{COOKIE}={answer.cookies[COOKIE]}"
    page = http.get("/dashboard/orgs/new").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf
    made = http.post("/dashboard/orgs/new", data={"csrf_token": csrf.group(1), "name": org_name})
    assert made.status_code == 303, made.text
    return Browser(http, made.headers["location"].rsplit("/", 1)[1], csrf.group(1), email)


def audit_once(browser: Browser, shown: Callable[[str], bool], path: str = "") -> str:
    """The audit page (or its export at ``path``) once ``shown`` holds: changes to files reach
    it through metadata's events and edge's relay, a moment after the change."""
    deadline = time.monotonic() + 15
    while not shown(text := browser.http.get(f"/dashboard/o/{browser.org_id}/audit{path}").text):
        assert time.monotonic() < deadline, text
    return text
