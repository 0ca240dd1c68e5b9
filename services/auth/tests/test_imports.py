"""What auth loads at start (issue 27: idle RSS).

The check imports the service the way ``coffer-auth serve`` does, in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# A fresh interpreter is a process start (1 to 2 s of CPU): with the end-to-end tier (make test),
# not in make test-fast.
pytestmark = pytest.mark.e2e

PROBE = """
import json, sys
import coffer_auth.cli, coffer_auth.main
coffer_auth.main.create_app()
print(json.dumps(sorted(sys.modules)))
"""


def test_auth_loads_no_postgresql_dialect_before_it_talks_to_postgresql() -> None:
    # 2.3 MiB of idle RSS in a SQLite-backed auth: admin.touch_key imports the engine's own.
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    assert "sqlalchemy.dialects.postgresql" not in json.loads(out)
