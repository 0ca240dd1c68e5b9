"""What metadata's two roles load at start (issue 27: idle RSS).

Each check imports a role the way ``coffer-metadata serve`` or ``dispatch`` does, in a fresh
interpreter.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

# A fresh interpreter is a process start (1 to 2 s of CPU): with the end-to-end tier (make test),
# not in make test-fast.
pytestmark = pytest.mark.e2e

PROBES = {
    "serve": "import coffer_metadata.main; coffer_metadata.main.create_app()",
    "dispatch": (
        "import coffer_metadata.webhooks.dispatch.app as d; from coffer_metadata.config import Settings; "
        "d.create_dispatcher_app(Settings())"
    ),
}


@functools.cache  # one interpreter a role
def loaded_modules(role: str) -> frozenset[str]:
    probe = f"import json, sys, coffer_metadata.cli\n{PROBES[role]}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return frozenset(json.loads(out))


def test_neither_role_loads_cryptography_before_a_secret_is_sealed_or_opened() -> None:
    # 6.5 MiB of idle RSS (webhooks.secrets.SecretBox imports it on first use).
    for role in PROBES:
        assert not {name for name in loaded_modules(role) if name.split(".")[0] == "cryptography"}, role


def test_the_dispatcher_loads_none_of_the_apis_routers() -> None:
    loaded = loaded_modules("dispatch")
    assert not loaded & {"coffer_metadata.main", "coffer_metadata.assets.router", "coffer_metadata.tus"}


def test_the_embedded_default_never_loads_the_postgresql_driver() -> None:
    # 7 MiB of idle RSS on SQLite (the PostgreSQL paths import psycopg where they run).
    for role in PROBES:
        assert not {
            name for name in loaded_modules(role) if name.split(".")[0] in ("psycopg", "psycopg_pool")
        }, role


def test_neither_role_loads_the_webhook_http_client_before_a_delivery() -> None:
    # aiohttp is 7 MiB of idle RSS: the dispatcher's first delivery loads it (send.py).
    for role in PROBES:
        assert not {name for name in loaded_modules(role) if name.split(".")[0] == "aiohttp"}, role
