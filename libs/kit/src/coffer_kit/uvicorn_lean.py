"""uvicorn's server without its command line: 2.2 MiB less in every served process.

``import uvicorn`` (or of any of its modules) first runs the package's ``__init__``, which
imports ``uvicorn.main``: the command line (click) and the reload and multi-process
supervisors (watchfiles, multiprocessing). A Coffer service never uses them; it builds a
``Config`` and runs a ``Server`` (coffer_kit.serve). So, unless uvicorn is imported already,
this module puts the package in ``sys.modules`` with only ``Config`` in it (all that uvicorn's
own modules take from it) and runs the real ``__init__`` the first time any other name is
asked of it: ``uvicorn.run``, ``uvicorn.Server`` and ``uvicorn.__version__`` work as ever.
Import uvicorn's parts from here (measured: docs/performance.md, idle RSS).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from typing import Any


def _install() -> None:
    if "uvicorn" in sys.modules:
        return
    spec = importlib.util.find_spec("uvicorn")
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError("uvicorn")
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader
    lock = threading.RLock()
    loading = False

    def rest_of_uvicorn(name: str) -> Any:
        # The package's own __init__, once, in its own namespace: afterwards it is the whole
        # package. Another thread asking meanwhile waits for it; a name asked by the
        # __init__ itself is missing, as in any module still being imported.
        nonlocal loading
        with lock:
            if not loading and "__getattr__" in package.__dict__:
                loading = True
                try:
                    loader.exec_module(package)
                    del package.__getattr__
                finally:
                    loading = False
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'uvicorn' has no attribute {name!r}") from None

    package.__getattr__ = rest_of_uvicorn  # type: ignore[method-assign]
    sys.modules["uvicorn"] = package
    config = importlib.import_module("uvicorn.config")
    package.Config = config.Config  # type: ignore[attr-defined]


_install()

from uvicorn.config import Config  # noqa: E402
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402
from uvicorn.server import Server  # noqa: E402

__all__ = ["Config", "HttpToolsProtocol", "Server"]
