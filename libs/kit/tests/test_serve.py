"""How services are served: the heap trimmed when a service falls idle; a listener with a loop
of its own."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from coffer_kit import serve
from coffer_testkit.testing import free_port, wait_healthy


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


def test_a_stop_wakes_the_server_between_its_ticks() -> None:
    """An idle server wakes once a second (tick_seconds), not ten times; a stop, from another
    thread as serve()'s signal handler does for a listener with its own loop, ends it at once.
    With an hour between ticks, only the wake can end it within the join's bound."""
    server = serve._Server(serve.server_config(serve.Listener(_never_called, "127.0.0.1", 0)))
    server.config.lifespan = "off"
    server.tick_seconds = 3600
    thread = threading.Thread(target=asyncio.run, args=(server.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not (server.started and server._woken is not None):  # in main_loop, between ticks
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    server.exit()
    thread.join(timeout=20)
    assert not thread.is_alive()


# Two listeners in one process: "busy" blocks its loop (as parsing an upload would, were it slow)
# until the test writes a line to the process's stdin; "quick" answers at once. Run as a real
# process, since serve() handles SIGTERM.
_TWO_LISTENERS = """
import sys, time
from coffer_kit.serve import Listener, serve

async def busy(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/block":
        print("blocking", flush=True)
        sys.stdin.readline()  # blocks this listener's loop until the test closes stdin
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"busy"})

async def quick(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"quick"})

busy_port, quick_port, own = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "own"
serve([Listener(busy, "127.0.0.1", busy_port), Listener(quick, "127.0.0.1", quick_port, own_loop=own)])
"""


@pytest.mark.e2e  # a served process of its own
@pytest.mark.parametrize("own_loop", [True, False])
def test_a_listener_with_its_own_loop_never_waits_for_the_others(own_loop: bool, tmp_path: Path) -> None:
    """blob's CDN host is served so (issue 23): downloads never wait while an upload is parsed."""
    busy_port, quick_port = free_port(), free_port()
    script = tmp_path / "two.py"
    script.write_text(_TWO_LISTENERS)
    mode = "own" if own_loop else "shared"
    argv = [sys.executable, str(script), str(busy_port), str(quick_port), mode]
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for port in (busy_port, quick_port):
            wait_healthy(f"http://127.0.0.1:{port}/", timeout=30)
        assert process.stdin is not None and process.stdout is not None
        with ThreadPoolExecutor(2) as pool:
            try:
                blocking = pool.submit(httpx.get, f"http://127.0.0.1:{busy_port}/block", timeout=30)
                assert process.stdout.readline() == "blocking\n"
                quick = pool.submit(httpx.get, f"http://127.0.0.1:{quick_port}/", timeout=30)
                if own_loop:
                    # Answered while the busy loop is still blocked (it stays so until released).
                    assert quick.result(timeout=20).text == "quick"
                    assert not blocking.done()
                else:
                    # The control: on the shared loop nothing answers while it is blocked. A
                    # window of many times a quick answer's few milliseconds, not a wait for a
                    # condition.
                    with pytest.raises(TimeoutError):
                        quick.result(timeout=0.25)
            finally:
                process.stdin.close()  # the release (readline meets the end of input), failed or not
            assert blocking.result().text == "busy"
            assert quick.result().text == "quick"
    finally:
        process.terminate()
        process.wait(timeout=30)


# A served process answers how many objects the collector has frozen, and whether an object made
# at start-up is among them (gc.get_referrers never looks in the permanent generation).
_FROZEN = """
import gc, sys
from coffer_kit.serve import Listener, serve

made_at_start_up = [[] for _ in range(1000)]

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    frozen = gc.get_freeze_count()
    seen = bool(gc.get_referrers(made_at_start_up[0]))
    body = f"{frozen} {seen}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})

serve([Listener(app, "127.0.0.1", int(sys.argv[1]))])
"""


def _served_answer(tmp_path: Path, source: str) -> str:
    """Run ``source`` (a script serving one listener on the port it is given) as a process of
    its own, and answer what its ``GET /`` answers."""
    port = free_port()
    script = tmp_path / "served.py"
    script.write_text(source)
    process = subprocess.Popen([sys.executable, str(script), str(port)])
    try:
        wait_healthy(f"http://127.0.0.1:{port}/", timeout=30)
        return httpx.get(f"http://127.0.0.1:{port}/", timeout=30).text
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.e2e  # a served process of its own
def test_start_up_objects_are_left_out_of_later_collections(tmp_path: Path) -> None:
    """Issue 28: a traced request's spans outlive it, so collections run; the full ones no longer
    walk the start-up heap."""
    frozen, seen = _served_answer(tmp_path, _FROZEN).split()
    assert int(frozen) > 1000
    assert seen == "False"


# A served process frees four 1 MiB buffers at a time, over and over (as a body streaming
# through is copied piece by piece), and answers the page faults it took per round.
_CHURN = """
import resource, sys
from coffer_kit.serve import Listener, serve

def churn():
    buffers = [b"x" * (1 << 20) for _ in range(4)]
    del buffers

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(200):
        churn()
    per_round = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 200
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(per_round).encode()})

serve([Listener(app, "127.0.0.1", int(sys.argv[1]))])
"""


def test_freed_buffers_are_reused_without_faulting_their_pages_in_again(tmp_path: Path) -> None:
    """With glibc's own thresholds each round hands the buffers' 1,024 pages back to the
    kernel and faults them in again (992 faults a round measured here without the setting);
    served, the heap keeps them."""
    assert float(_served_answer(tmp_path, _CHURN)) < 10
