"""Shared helpers for tests: free ports, waiting for services."""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, *, timeout: float = 30.0) -> None:
    """Poll ``url`` until it answers 200, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not become healthy in {timeout}s ({last!r})")


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert the response is the contract's error envelope with this status and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["requestId"] == response.headers["x-request-id"]
    return error  # type: ignore[no-any-return]
