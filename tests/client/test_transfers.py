"""100 MiB through the SDK and the command line with the client's memory measured, bytes compared."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from coffer_client import Coffer

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(MIB):
            h.update(chunk)
    return h.hexdigest()


def test_sdk_moves_100_mib_holding_a_few_mib(sdk: Coffer, big_file: Any, tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        asset = sdk.upload(big_file.path)
        _, upload_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        out = tmp_path / "back.bin"
        sdk.download(asset.id, out)
        _, download_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(json.dumps({"upload_peak": upload_peak, "download_peak": download_peak}))
    assert asset.size == big_file.size and asset.sha256 == big_file.sha256
    assert sha256(out) == big_file.sha256
    # Measured: 2.4 MiB for the upload (the 1 MiB chunk read, the one being sent) and 4.6 MiB for
    # the download (httpx's read buffers and the 1 MiB chunks regrouped for the file); a body built
    # in memory would be above 100 MiB.
    assert upload_peak < 8 * MIB, upload_peak
    assert download_peak < 8 * MIB, download_peak


MEASURE = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
# ru_maxrss of the only child this process waited for: the coffer command, in KiB on Linux.
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)
"""


def peak_rss(cli: Any, *argv: str) -> int:
    exe = str(Path(sys.executable).parent / "coffer")
    r = subprocess.run(
        [sys.executable, "-c", MEASURE, exe, *argv],
        env={**os.environ, **cli.env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    kib, code = r.stdout.split()
    assert code == "0", r.stderr
    return int(kib) * 1024


def test_cli_moves_100_mib_in_bounded_memory(cli: Any, sdk: Coffer, big_file: Any, tmp_path: Path) -> None:
    baseline = peak_rss(cli, "ls", "--json")  # the interpreter, the imports and one request
    up = peak_rss(cli, "upload", str(big_file.path), "-q")
    (asset,) = list(sdk.list_assets())
    assert asset.sha256 == big_file.sha256
    out = tmp_path / "down.bin"
    down = peak_rss(cli, "download", asset.id, "-o", str(out), "-q")
    assert sha256(out) == big_file.sha256
    print(json.dumps({"baseline": baseline, "upload": up, "download": down}))
    # Measured: baseline 47.4 MiB; upload +2.6 MiB, download +3.6 MiB above it.
    assert up - baseline < 16 * MIB, (baseline, up)
    assert down - baseline < 16 * MIB, (baseline, down)


def test_a_refused_big_upload_reports_the_refusal(
    stack: Any, sdk: Coffer, big_file: Any, new_tenant: Any
) -> None:
    """The service answers 401 (or 413 over quota) before reading 100 MiB: the client reports that
    answer, not the broken pipe that follows it."""
    import coffer_client as cc

    with Coffer(stack.edge_url, "cof_org_" + "Q" * 30) as wrong, pytest.raises(cc.Unauthorized):
        wrong.upload(big_file.path)
    assert list(sdk.list_assets()) == []
    small = new_tenant("small", quota_bytes=MIB)
    with Coffer(stack.edge_url, small.key) as c, pytest.raises(cc.QuotaExceeded) as e:
        c.upload(big_file.path)
    assert e.value.status == 413 and e.value.details.get("quotaBytes") == MIB
