"""How services are served: the heap trimmed when a service falls idle."""

from __future__ import annotations

import asyncio

import pytest

from coffer_kit import serve


async def _never_called(_scope: object, _receive: object, _send: object) -> None:
    raise AssertionError


def test_the_heap_is_trimmed_once_requests_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    server = serve._Server(serve.server_config(serve.Listener(_never_called, "127.0.0.1", 0)))
    state = server.server_state
    monkeypatch.setattr(serve, "release_free_memory", lambda: trims.append(state.total_requests))

    async def seconds(n: int) -> None:
        for _ in range(n):
            await server.on_tick(0)

    async def scenario() -> None:
        await seconds(2)
        assert trims == []  # nothing answered: nothing to trim
        server.server_state.total_requests = 5
        await seconds(1)
        assert trims == []  # answered in the last second: still busy
        await seconds(1)
        assert trims == [5]  # a second without requests: trimmed
        await seconds(3)
        assert trims == [5]  # once per idle spell
        server.server_state.total_requests = 6
        server.server_state.tasks.add(asyncio.ensure_future(asyncio.sleep(0)))
        await seconds(2)
        assert trims == [5]  # a request in flight
        await asyncio.gather(*server.server_state.tasks)
        server.server_state.tasks.clear()
        await seconds(1)
        assert trims == [5, 6]

    asyncio.run(scenario())
