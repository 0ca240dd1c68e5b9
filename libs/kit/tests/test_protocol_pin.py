"""``coffer_kit.protocol`` subclasses uvicorn's ``HttpToolsProtocol``, which is not a public API
of uvicorn: it relies on the names below. The kit pins uvicorn to the minor version they were
checked against; an upgrade fails here first, so whoever moves the pin reads the protocol
again (and the head-bound and parser-envelope tests in test_robustness.py, the head-time tests
in test_slow_clients.py) before it lands."""

from __future__ import annotations

import importlib.metadata
import inspect

from uvicorn.protocols.http import httptools_impl

from coffer_kit.protocol import CofferHttpProtocol

PINNED_MINOR = "0.54"


def test_uvicorn_is_the_minor_version_the_protocol_was_written_for() -> None:
    installed = importlib.metadata.version("uvicorn")
    assert installed.rsplit(".", 1)[0] == PINNED_MINOR, (
        f"uvicorn {installed}: coffer_kit.protocol was checked against {PINNED_MINOR}.x; read it "
        "against the new HttpToolsProtocol, then move PINNED_MINOR and libs/kit's pin together"
    )


def test_the_internals_the_protocol_relies_on_are_there() -> None:
    base = httptools_impl.HttpToolsProtocol
    assert CofferHttpProtocol.__mro__[1] is base
    # The callbacks it overrides and calls through to, with the signatures it calls them with.
    callbacks = (
        "connection_made",
        "connection_lost",
        "data_received",
        "on_message_begin",
        "on_headers_complete",
        "on_body",
        "on_message_complete",
    )
    for name in callbacks:
        assert callable(getattr(base, name)), name
    assert list(inspect.signature(base.send_400_response).parameters) == ["self", "msg"]
    # The state it reads: set by uvicorn's own methods.
    source = inspect.getsource(base)
    state = ("parser", "url", "headers", "cycle", "transport", "server_state", "loop")
    for attribute in state:
        assert f"self.{attribute} =" in source, attribute
    cycle = inspect.getsource(httptools_impl.RequestResponseCycle)
    for attribute in ("self.response_complete", "self.disconnected"):
        assert f"{attribute} =" in cycle, attribute
    assert "default_headers" in inspect.getsource(httptools_impl)
