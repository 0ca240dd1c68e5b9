"""POST /internal/v1/scan/{key}: a stored object streamed to a real clamd (coffer_testkit.clamd:
its own configuration, the EICAR test signature as its database). Coffer's largest upload
(100 MiB) is streamed whole and passes; a stream past clamd's StreamMaxLength is never passed:
503 ``scanner_unavailable``, which edge retries and then marks ``unscanned`` (issue 48; the
retries over real processes: tests/e2e/test_scan.py)."""

from __future__ import annotations

import bz2
import io
import socket
import struct
import tarfile
import threading
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from coffer_blob.config import Settings
from coffer_blob.main import create_app
from coffer_blob.storage.fs import FsStorage
from coffer_kit.contract.limits import MAX_FILE_BYTES
from coffer_kit.internal import INTERNAL_TOKEN_HEADER
from coffer_testkit.clamd import EICAR, SIGNATURE, Clamd, running_clamd
from coffer_testkit.testing import app_client, assert_error, pattern_chunks

from .support import ORG, TOKEN, new_asset_id, upload
from .test_archives import CLAMD_READS, UNREAD
from .test_cdn import key_path
from .test_uploads import big_body, post

pytestmark = [pytest.mark.anyio, pytest.mark.processes]  # a real clamd
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def clamd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clamd]:
    with running_clamd(tmp_path_factory.mktemp("clamd")) as running:
        yield running


@pytest.fixture(scope="module")
def small_clamd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clamd]:
    """A clamd that takes streams of at most 1 MiB."""
    with running_clamd(tmp_path_factory.mktemp("clamd-1m"), stream_max_length="1M") as running:
        yield running


async def _scanning(settings: Settings, clamd: Clamd) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"blob_clamd_url": clamd.url}))
    async with app_client(app, "http://blob.internal", {INTERNAL_TOKEN_HEADER: TOKEN}) as client:
        yield client


@pytest.fixture
async def scanning(settings: Settings, clamd: Clamd) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _scanning(settings, clamd):
        yield client


@pytest.fixture
async def scanning_1m(settings: Settings, small_clamd: Clamd) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _scanning(settings, small_clamd):
        yield client


async def test_the_largest_upload_is_streamed_whole_and_passes(
    scanning: httpx.AsyncClient, blob_dir: Path
) -> None:
    assert MAX_FILE_BYTES == 100 * MIB  # what the clamd configurations are sized for
    # Written through the store's own writer (what an upload commits; uploads are tested in
    # test_uploads.py): the scan is what is timed here, 17 s for 100 MiB at load 14.
    key = f"{ORG}/{new_asset_id()}/big.bin"
    writer = FsStorage(blob_dir).open_writer(key)
    for chunk in pattern_chunks(MAX_FILE_BYTES):
        writer.write(chunk)
    writer.commit(content_type="application/octet-stream", sha256="0" * 64)
    scanned = await scanning.post(f"/internal/v1/scan/{key}")
    assert scanned.status_code == 200, scanned.text
    assert scanned.json()["result"] == "clean"
    assert scanned.json()["size"] == MAX_FILE_BYTES  # every byte went to clamd


async def test_eicar_is_infected_with_its_signature(scanning: httpx.AsyncClient) -> None:
    stored = await upload(scanning, EICAR, filename="eicar.com")
    scanned = await scanning.post(f"/internal/v1/scan/{stored.json()['key']}")
    assert scanned.status_code == 200, scanned.text
    assert (scanned.json()["result"], scanned.json()["signature"]) == ("infected", f"{SIGNATURE}.UNOFFICIAL")


async def test_a_stream_past_clamds_limit_is_never_passed(scanning_1m: httpx.AsyncClient) -> None:
    stored = await post(scanning_1m, big_body(2 * MIB))
    assert stored.status_code == 201, stored.text
    key = stored.json()["key"]
    assert_error(await scanning_1m.post(f"/internal/v1/scan/{key}"), 503, "scanner_unavailable")
    # Below the limit the same clamd answers: it was the size, not the daemon.
    small = await upload(scanning_1m, b"a small clean file")
    scanned = await scanning_1m.post(f"/internal/v1/scan/{small.json()['key']}")
    assert scanned.json()["result"] == "clean"


async def test_an_archive_clamd_could_not_read_whole_is_never_passed(scanning: httpx.AsyncClient) -> None:
    """EICAR zipped 20 deep (past clamd's MaxRecursion, 17): clamd stops before it, and said
    OK until AlertExceedsMax; it is 503 now, as a stream past the size limit, never clean."""
    data, name = EICAR, "eicar.com"
    for depth in range(20):
        data, name = _zip_of(name, data), f"l{depth}.zip"
    stored = await upload(scanning, data, filename="deep.zip")
    scanned = await scanning.post(f"/internal/v1/scan/{stored.json()['key']}")
    body = assert_error(scanned, 503, "scanner_unavailable")
    assert "Heuristics.Limits.Exceeded" in body["message"]
    # One level down it is read whole, and found.
    shallow = await upload(scanning, _zip_of("eicar.com", EICAR), filename="one.zip")
    assert (await scanning.post(f"/internal/v1/scan/{shallow.json()['key']}")).json()["result"] == "infected"


async def test_eicar_in_a_zip64_archive_is_never_passed(scanning: httpx.AsyncClient) -> None:
    """clamd answers OK for EICAR in a zip64 entry, at the top, nested in an ordinary ZIP, in a
    .tar.gz or in a bzip2 stream (coffer_blob.archives): blob does not pass what clamd did not
    read. An ordinary ZIP of the
    same is found, and a clean one passes."""
    zip64 = _zip_of("eicar.com", EICAR, zip64=True)
    tarred = io.BytesIO()
    with tarfile.open(fileobj=tarred, mode="w:gz") as archive:
        member = tarfile.TarInfo("inner.zip")
        member.size = len(zip64)
        archive.addfile(member, io.BytesIO(zip64))
    for data in (zip64, _zip_of("inner.zip", zip64), tarred.getvalue(), bz2.compress(zip64)):
        stored = await upload(scanning, data, filename="archive.zip")
        body = assert_error(
            await scanning.post(f"/internal/v1/scan/{stored.json()['key']}"), 503, "scanner_unavailable"
        )
        assert "a zip64 archive" in body["message"]
    ordinary = await upload(scanning, _zip_of("inner.zip", _zip_of("eicar.com", EICAR)), filename="a.zip")
    assert (await scanning.post(f"/internal/v1/scan/{ordinary.json()['key']}")).json()["result"] == "infected"
    clean = await upload(scanning, _zip_of("inner.zip", _zip_of("notes.txt", b"fine")), filename="b.zip")
    assert (await scanning.post(f"/internal/v1/scan/{clean.json()['key']}")).json()["result"] == "clean"


def _zip_of(name: str, data: bytes, *, zip64: bool = False) -> bytes:
    out = io.BytesIO()
    with (
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open(name, "w", force_zip64=zip64) as entry,
    ):
        entry.write(data)
    return out.getvalue()


@pytest.mark.parametrize("answer", [b"\xff\xfe\xfd\n", b"stream: nonsense\n"])
async def test_a_clamd_answering_nonsense_is_unavailable(settings: Settings, answer: bytes) -> None:
    """An answer that is not UTF-8 was a 500 (clamav-client's decode error escaped)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def answer_once() -> None:
            conn, _ = listener.accept()
            with conn, conn.makefile("rb") as stream:
                stream.readline()  # zINSTREAM
                while (size := struct.unpack("!L", stream.read(4))[0]) != 0:
                    stream.read(size)
                conn.sendall(answer)

        answering = threading.Thread(target=answer_once, daemon=True)
        answering.start()
        port = listener.getsockname()[1]
        app = create_app(settings.model_copy(update={"blob_clamd_url": f"tcp://127.0.0.1:{port}"}))
        async with app_client(app, "http://blob.internal", {INTERNAL_TOKEN_HEADER: TOKEN}) as client:
            key = (await upload(client, b"hello")).json()["key"]
            assert_error(await client.post(f"/internal/v1/scan/{key}"), 503, "scanner_unavailable")
        answering.join(10)


async def test_a_clean_scan_of_an_object_in_the_trash_leaves_it_withheld(
    scanning: httpx.AsyncClient, cdn: httpx.AsyncClient
) -> None:
    """The scan releases its own hold only (test_held.py): an asset deleted while its scan ran
    stays unreachable, as its trash row says, until it is restored."""
    key = (await upload(scanning, b"deleted while its scan ran")).json()["key"]
    trashed = await scanning.put(f"/internal/v1/held/{key}", json={"held": True, "reason": "trash"})
    assert trashed.status_code == 200, trashed.text
    scanned = await scanning.post(f"/internal/v1/scan/{key}")
    assert scanned.status_code == 200 and scanned.json()["result"] == "clean", scanned.text
    assert_error(await cdn.get(key_path(key)), 404, "not_found")
    restored = await scanning.put(f"/internal/v1/held/{key}", json={"held": False, "reason": "trash"})
    assert restored.status_code == 200, restored.text
    assert (await cdn.get(key_path(key))).status_code == 200


@pytest.mark.parametrize("form", sorted(UNREAD))
async def test_eicar_in_a_form_clamd_does_not_read_is_never_passed(
    scanning: httpx.AsyncClient, form: str
) -> None:
    """clamd (1.4.6) answers OK for each (test_archives.UNREAD: an LZMA entry, local headers the
    central directory contradicts or does not list, a second bzip2 stream, a gzip member after
    zero bytes, a tar after a tar's end): blob does not pass what clamd did not read."""
    build, why = UNREAD[form]
    stored = await upload(scanning, build(EICAR), filename="archive.bin")
    body = assert_error(
        await scanning.post(f"/internal/v1/scan/{stored.json()['key']}"), 503, "scanner_unavailable"
    )
    assert why in body["message"]


@pytest.mark.parametrize("form", sorted(CLAMD_READS))
async def test_eicar_in_a_form_clamd_reads_is_infected(scanning: httpx.AsyncClient, form: str) -> None:
    """The neighbours of those forms, which blob does not refuse: clamd reads them, and finds EICAR."""
    stored = await upload(scanning, CLAMD_READS[form](EICAR), filename="archive.bin")
    scanned = await scanning.post(f"/internal/v1/scan/{stored.json()['key']}")
    assert scanned.status_code == 200, scanned.text
    assert scanned.json()["result"] == "infected"
