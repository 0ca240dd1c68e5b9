"""A disk-backed blob process loads neither boto3 nor a database library (issue 16: idle RSS).

Each check imports the service the way ``coffer-blob serve`` does, in a fresh interpreter.
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

PROBE = """
import json, sys
import coffer_blob.cli, coffer_blob.main
coffer_blob.main.create_app()
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


@functools.cache  # one interpreter for both checks
def loaded_packages() -> frozenset[str]:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    return frozenset(json.loads(out))


def test_blob_on_disk_imports_no_s3_client_nor_database_library() -> None:
    loaded = loaded_packages()
    assert "python_multipart" in loaded  # the upload parser is there
    assert not loaded & {"boto3", "botocore", "requests", "sqlalchemy", "aiohttp", "smart_open"}


def test_blob_loads_the_transform_pool_and_the_tus_hasher_on_first_use() -> None:
    # pebble (the transform workers) and rehashes (a resumable upload's hash state): 0.6 MiB of
    # idle RSS each, in a process that may never transform nor see a tus chunk.
    assert not loaded_packages() & {"pebble", "rehashes"}
