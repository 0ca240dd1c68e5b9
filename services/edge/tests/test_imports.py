"""What edge loads at start (issue 49: idle RSS against Directus): no database library.

The check imports the service the way ``coffer-edge serve`` does, in a fresh interpreter.
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
import coffer_edge.cli, coffer_edge.main
from coffer_edge.config import Settings
coffer_edge.main.create_app(Settings())
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_edge_loads_no_database_library(tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "COFFER_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, env=env)
    loaded = frozenset(json.loads(out.stdout))
    assert "fastapi" in loaded  # the probe did build the app
    # sqlalchemy alone is 20 MiB of idle RSS: edge keeps no database.
    assert not loaded & {"sqlalchemy", "sqlmodel", "psycopg", "alembic"}
