"""The SDK against the real stack: every route, the models, the errors and the retries."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import coffer_client as cc
from coffer_client import AsyncCoffer, Coffer, RetryPolicy

pytestmark = pytest.mark.e2e


def test_configuration_from_environment(stack: Any, tenant: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COFFER_URL", stack.edge_url + "/")
    monkeypatch.setenv("COFFER_API_KEY", tenant.key)
    monkeypatch.setenv("COFFER_ORGANIZATION_ID", tenant.org_id)
    with Coffer() as c:
        assert c.base_url == stack.edge_url
        assert c.organization_id == tenant.org_id
        assert c.list_folders() == []
        # The key never shows in a repr (logs, tracebacks).
        assert tenant.key not in repr(c) and tenant.key not in repr(c._settings)
    monkeypatch.delenv("COFFER_API_KEY")
    with pytest.raises(cc.ConfigurationError, match="COFFER_API_KEY"):
        Coffer()


def test_folders(sdk: Coffer) -> None:
    photos = sdk.create_folder("photos")
    y2024 = sdk.create_folder("2024", photos.id)
    assert [f.name for f in sdk.list_folders()] == ["photos"]
    assert [f.id for f in sdk.list_folders(photos.id)] == [y2024.id]
    got = sdk.get_folder(y2024.id)
    assert got.path_str == "/photos/2024" and got.parent_id == photos.id
    assert sdk.resolve_folder("/photos/2024") == sdk.resolve_folder("photos/2024/")
    assert sdk.resolve_folder("/") is None

    renamed = sdk.update_folder(y2024.id, name="twenty-four")
    assert renamed.name == "twenty-four" and renamed.parent_id == photos.id
    moved = sdk.update_folder(y2024.id, parent_id=None)
    assert moved.parent_id is None
    with pytest.raises(cc.FolderCycle) as cycle:
        sdk.update_folder(photos.id, parent_id=photos.id)
    assert cycle.value.status == 409 and cycle.value.code == "folder_cycle"

    with pytest.raises(cc.Conflict):
        sdk.create_folder("photos")
    deep = sdk.make_folders("/a/b/c")
    assert deep is not None and sdk.get_folder(deep.id).path_str == "/a/b/c"
    assert sdk.make_folders("/a/b/c") == deep  # parents=True: an existing folder is fine
    with pytest.raises(cc.Conflict):
        sdk.make_folders("/a/b/c", parents=False)
    with pytest.raises(cc.NotFound, match="/x"):
        sdk.make_folders("/x/y", parents=False)

    sdk.delete_folder(photos.id)
    with pytest.raises(cc.NotFound) as missing:
        sdk.get_folder(photos.id)
    e = missing.value
    assert (e.status, e.code) == (404, "not_found") and e.request_id and e.message


def test_errors_carry_the_envelope(stack: Any, sdk: Coffer) -> None:
    with pytest.raises(cc.BadRequest) as bad:
        sdk.create_folder("a/b")
    assert bad.value.status == 400 and bad.value.code == "invalid_request"
    with pytest.raises(cc.NotFound):
        sdk.get_asset("ast_doesnotexist")
    with pytest.raises(cc.NotFound):
        sdk.resolve_folder("/no/such")
    with Coffer(stack.edge_url, "cof_org_" + "x" * 30) as wrong, pytest.raises(cc.Unauthorized) as unauth:
        wrong.list_folders()
    assert unauth.value.status == 401 and unauth.value.request_id
    assert isinstance(unauth.value, cc.APIError) and isinstance(unauth.value, cc.CofferError)


def test_assets(sdk: Coffer, tmp_path: Path) -> None:
    folder = sdk.create_folder("docs")
    src = tmp_path / "report.txt"
    src.write_bytes(b"hello coffer\n" * 1000)
    seen: list[tuple[int, int | None]] = []
    a = sdk.upload(src, folder_id=folder.id, progress=lambda d, t: seen.append((d, t)))
    assert (a.name, a.size, a.folder_id, a.mime_type) == ("report.txt", 13000, folder.id, "text/plain")
    assert a.sha256 == hashlib.sha256(src.read_bytes()).hexdigest()
    assert seen[-1] == (13000, 13000)

    b = sdk.upload(io.BytesIO(b"\x89PNG..."), name="pic.png", filename="upload.bin")
    assert (b.name, b.size, b.folder_id) == ("pic.png", 7, None)
    assert sdk.get_asset(b.id) == b

    assert {x.id for x in sdk.list_assets()} == {a.id, b.id}
    assert [x.id for x in sdk.list_assets(cc.ROOT)] == [b.id]
    assert [x.id for x in sdk.list_assets(folder.id)] == [a.id]
    assert [x.id for x in sdk.list_assets(q="REPORT")] == [a.id]
    assert [x.name for x in sdk.list_assets(sort="name")] == ["pic.png", "report.txt"]
    assert [x.name for x in sdk.list_assets(sort="-size")] == ["report.txt", "pic.png"]
    assert sdk.resolve_asset("/docs/report.txt") == sdk.get_asset(a.id)

    moved = sdk.update_asset(a.id, name="final.txt", folder_id=None)
    assert (moved.name, moved.folder_id, moved.key, moved.public_url) == (
        "final.txt",
        None,
        a.key,
        a.public_url,
    )

    signed = sdk.signed_url(a.id, expires_in=60)
    assert signed.expires_in == 60 and signed.asset.size == 13000
    assert httpx.get(signed.url).content == src.read_bytes()

    dest = tmp_path / "out.txt"
    progress: list[int] = []
    assert sdk.download(a.id, dest, progress=lambda d, _t: progress.append(d)) == 13000
    assert dest.read_bytes() == src.read_bytes() and progress[-1] == 13000
    assert not list(tmp_path.glob(".out.txt.*"))  # no temporary file left behind
    stream = io.BytesIO()
    sdk.download(b.id, stream)
    assert stream.getvalue() == b"\x89PNG..."

    sdk.delete_asset(a.id)
    with pytest.raises(cc.NotFound):
        sdk.get_asset(a.id)
    assert httpx.get(signed.url).status_code == 404


def test_list_assets_is_lazy_over_pages(stack: Any, tenant: Any) -> None:
    requests: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [requests.append]})
    with Coffer(stack.edge_url, tenant.key, http_client=http) as c:
        ids = [c.upload(io.BytesIO(b"x" * i), filename=f"f{i}.txt").id for i in range(5)]
        requests.clear()
        it = c.list_assets(page_size=2)
        assert requests == []  # nothing fetched before iterating
        first = next(it)
        assert first.id == ids[-1] and len(requests) == 1  # newest first, one page
        rest = [a.id for a in it]
        assert [first.id, *rest] == ids[::-1] and len(requests) == 3
        # By cursor (issue 49): a first page without a count, then each page's nextCursor.
        assert requests[0].url.params["total"] == "false" and "cursor" not in requests[0].url.params
        assert all("cursor" in r.url.params and "offset" not in r.url.params for r in requests[1:])
        page = c.assets_page(limit=2, offset=4)
        assert (page.total, page.limit, page.offset, len(page.assets)) == (5, 2, 4, 1)
        assert page.next_cursor is None
    http.close()


def test_usage(sdk: Coffer, tenant: Any) -> None:
    sdk.upload(io.BytesIO(b"a" * 1000), filename="a.bin")
    sdk.upload(io.BytesIO(b"b" * 24), filename="b.bin")
    u = sdk.usage()
    assert (u.organization_id, u.used_bytes, u.asset_count) == (tenant.org_id, 1024, 2)
    assert u.quota_bytes > 0


def test_upload_tokens(sdk: Coffer) -> None:
    folder = sdk.create_folder("inbox")
    token = sdk.create_upload_token(
        folder_id=folder.id, max_bytes=100, content_types=["text/*"], expires_in=60
    )
    assert token.token.startswith("cof_upl_") and token.expires_in == 60
    a = sdk.upload_with_token(token, io.BytesIO(b"from a browser"), filename="note.txt")
    assert (a.folder_id, a.name, a.size) == (folder.id, "note.txt", 14)
    with pytest.raises(cc.Unauthorized):  # single use
        sdk.upload_with_token(token.url, io.BytesIO(b"again"), filename="note.txt")
    small = sdk.create_upload_token(max_bytes=4)
    with pytest.raises(cc.FileTooLarge):
        sdk.upload_with_token(small, io.BytesIO(b"too big"), filename="x.txt")
    typed = sdk.create_upload_token(content_types=["image/*"])
    with pytest.raises(cc.UnsupportedMediaType):
        sdk.upload_with_token(typed, io.BytesIO(b"text"), filename="x.txt")


def test_too_large_is_refused_before_sending(sdk: Coffer, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with big.open("wb") as fh:
        fh.truncate(cc.MAX_FILE_BYTES + 1)  # sparse: no disk used
    with pytest.raises(cc.FileTooLarge) as e:
        sdk.upload(big)
    assert e.value.status == 413 and e.value.code == "file_too_large"


def test_async_client(stack: Any, tenant: Any, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 5))

    async def flow() -> None:
        async with AsyncCoffer(stack.edge_url, tenant.key) as c:
            f = await c.create_folder("async")
            assert (await c.get_folder(f.id)).path_str == "/async"
            deep = await c.make_folders("/async/x/y")
            assert deep is not None and await c.resolve_folder("/async/x/y") == deep
            with pytest.raises(cc.NotFound):
                await c.resolve_folder("/async/nope")
            seen: list[int] = []
            uploads = await asyncio.gather(
                *(
                    c.upload(src, folder_id=f.id, name=f"n{i}.bin", progress=lambda d, _t: seen.append(d))
                    for i in range(3)
                )
            )
            assert {u.size for u in uploads} == {src.stat().st_size}
            assert max(seen) == src.stat().st_size
            names = [a.name async for a in c.list_assets(f.id, sort="name", page_size=2)]
            assert names == ["n0.bin", "n1.bin", "n2.bin"]
            out = tmp_path / "back.bin"
            await c.download(uploads[0].id, out)
            assert out.read_bytes() == src.read_bytes()
            assert (await c.resolve_asset("/async/n1.bin")).id == uploads[1].id
            await c.update_asset(uploads[0].id, name="renamed.bin")
            assert (await c.get_asset(uploads[0].id)).name == "renamed.bin"
            assert (await c.usage()).asset_count == 3
            await c.delete_asset(uploads[0].id)
            with pytest.raises(cc.NotFound):
                await c.get_asset(uploads[0].id)
            await c.delete_folder(f.id)
            tok = await c.create_upload_token()
            assert (await c.upload_with_token(tok, io.BytesIO(b"t"), filename="t.txt")).size == 1

    asyncio.run(flow())


# --- retries ------------------------------------------------------------------------------------


def _scripted(answers: list[Any]) -> tuple[httpx.Client, list[float]]:
    """A transport playing back answers in order (responses or exceptions to raise), noting when each
    request came: the retry policy is what is under test here, not the service."""
    times: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        times.append(time.monotonic())
        request.read()
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    return httpx.Client(transport=httpx.MockTransport(handler)), times


def _unavailable(retry_after: str) -> httpx.Response:
    body = {"error": {"code": "unavailable", "message": "database down", "requestId": "req_1"}}
    return httpx.Response(503, json=body, headers={"retry-after": retry_after})


def test_503_retry_honours_retry_after() -> None:
    http, times = _scripted([_unavailable("1"), httpx.Response(200, json={"folders": []})])
    with Coffer("http://coffer.test", "k", http_client=http, retry=RetryPolicy(initial_wait=0.01)) as c:
        assert c.list_folders() == []
    assert len(times) == 2 and times[1] - times[0] >= 0.95
    http, times = _scripted([_unavailable("0")] * 3)
    with (
        Coffer(
            "http://coffer.test", "k", http_client=http, retry=RetryPolicy(attempts=3, initial_wait=0.01)
        ) as c,
        pytest.raises(cc.Unavailable) as e,
    ):
        c.list_folders()
    assert len(times) == 3 and e.value.request_id == "req_1" and e.value.code == "unavailable"


def test_connection_failures_are_retried_only_when_safe(tmp_path: Path) -> None:
    policy = RetryPolicy(attempts=3, initial_wait=0.01)
    # A read failure after a POST was sent: the folder may exist; no second try.
    http, times = _scripted([httpx.ReadError("reset"), httpx.Response(201)])
    with (
        Coffer("http://coffer.test", "k", http_client=http, retry=policy) as c,
        pytest.raises(cc.TransportError),
    ):
        c.create_folder("x")
    assert len(times) == 1
    # The same failure on a GET is retried.
    http, times = _scripted([httpx.ReadError("reset"), httpx.Response(200, json={"folders": []})])
    with Coffer("http://coffer.test", "k", http_client=http, retry=policy) as c:
        assert c.list_folders() == []
    assert len(times) == 2
    # A connection refused (nothing sent) is retried even for an upload, reading the file again.
    src = tmp_path / "f.txt"
    src.write_text("data")
    http, times = _scripted(
        [httpx.ConnectError("refused"), httpx.ConnectError("refused"), httpx.ConnectError("x")]
    )
    with (
        Coffer("http://coffer.test", "k", http_client=http, retry=policy) as c,
        pytest.raises(cc.TransportError),
    ):
        c.upload(src)
    assert len(times) == 3
    # A stream that cannot be read twice is never retried.
    http, times = _scripted([httpx.ConnectError("refused"), httpx.Response(201)])

    class OneWay(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, _b: Any) -> int:
            return 0

    with (
        Coffer("http://coffer.test", "k", http_client=http, retry=policy) as c,
        pytest.raises(cc.TransportError),
    ):
        c.upload(OneWay(), filename="pipe")  # type: ignore[arg-type]
    assert len(times) == 1


def test_a_real_refused_connection_is_a_transport_error(unused_port: int) -> None:
    port = unused_port
    policy = RetryPolicy(attempts=2, initial_wait=0.01)
    with (
        Coffer(f"http://127.0.0.1:{port}", "k", retry=policy) as c,
        pytest.raises(cc.TransportError, match="Connect"),
    ):
        c.list_folders()


def test_timeouts_are_settable(stack: Any, tenant: Any) -> None:
    with Coffer(stack.edge_url, tenant.key, timeout=httpx.Timeout(5.0, connect=1.0)) as c:
        assert c._http.timeout.connect == 1.0
        assert c.list_folders() == []
