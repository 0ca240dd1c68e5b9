"""Private assets (CONTRACT §12) from the SDK, sync and async alike, and the ``coffer`` command:
``upload --private``, ``ls`` showing the visibility, ``coffer visibility``, and ``url --public``
refused for a private asset."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from coffer_client import AsyncCoffer, Coffer


def test_sdk_private_assets(stack: Any, tenant: Any, sdk: Coffer, tmp_path: Path) -> None:
    src = tmp_path / "s.txt"
    src.write_bytes(b"secret")
    private = sdk.upload(src, visibility="private")
    assert (private.visibility, private.public_url) == ("private", None)
    signed = sdk.signed_url(private.id)
    assert httpx.get(signed.url).content == b"secret"
    assert httpx.get(signed.url.split("?", 1)[0]).status_code == 404
    public = sdk.upload(src, name="open.txt")
    assert public.visibility == "public" and public.public_url
    assert [a.id for a in sdk.list_assets(visibility="private")] == [private.id]
    assert sdk.assets_page(visibility="public").total == 1
    made_public = sdk.update_asset(private.id, visibility="public")
    assert made_public.public_url and made_public.visibility == "public"
    token = sdk.create_upload_token(visibility="private")
    assert sdk.upload_with_token(token, src).visibility == "private"

    async def flow() -> None:
        async with AsyncCoffer(stack.edge_url, tenant.key) as c:
            a = await c.upload(src, visibility="private")
            assert a.public_url is None
            assert (await c.update_asset(a.id, visibility="public")).visibility == "public"
            ids = [x.id async for x in c.list_assets(visibility="private")]
            assert a.id not in ids and len(ids) == 1  # the token's upload
            t = await c.create_upload_token(visibility="private")
            assert (await c.upload_with_token(t, src)).public_url is None

    asyncio.run(flow())


def test_cli_private_assets(cli: Any, sdk: Coffer, tmp_path: Path) -> None:
    src = tmp_path / "plan.txt"
    src.write_text("plan\n")
    r = cli("upload", str(src), "--private", "--json")
    assert r.exit_code == 0, r.stderr
    (asset,) = json.loads(r.stdout)["uploaded"]
    assert (asset["visibility"], asset["publicUrl"]) == ("private", None)
    line = cli.proc("ls", "/").stdout
    assert f"\t{asset['id']}\tprivate\n" in line
    r = cli("url", asset["id"], "--public")
    assert r.exit_code == 1 and "private" in r.stderr
    signed = cli("url", asset["id"]).stdout.strip()
    assert httpx.get(signed).content == b"plan\n"

    r = cli("visibility", asset["id"], "public")
    assert (r.exit_code, r.stdout) == (0, f"public\t{asset['id']}\n")
    assert httpx.get(sdk.get_asset(asset["id"]).public_url or "").content == b"plan\n"
    assert cli("visibility", "/plan.txt").stdout == f"public\t{asset['id']}\n"
    r = cli("visibility", asset["id"], "secret")
    assert r.exit_code == 2
    assert json.loads(cli("visibility", asset["id"], "private", "--json").stdout)["publicUrl"] is None
    r = cli("upload", str(src), "--public", "--json")
    assert json.loads(r.stdout)["uploaded"][0]["visibility"] == "public"
