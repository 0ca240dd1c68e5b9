"""Image transforms (CONTRACT §10) from the SDK and the ``coffer url`` command, against the real
stack: a typed ``Transform`` checked before any request, signed URLs whose transform the
signature covers (a changed parameter answers 403), presets on public URLs, and the refusals
(free parameters on a public URL, out-of-range values, a non-image)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import pyvips

import coffer_client as cc
from coffer_client import AsyncCoffer, Coffer, Transform


def jpeg(width: int, height: int) -> bytes:
    """A real JPEG of that size (a colour gradient, so the encoder has something to do)."""
    image = pyvips.Image.xyz(width, height).extract_band(0).cast("uchar")
    return bytes((image.bandjoin([image, image.invert()])).jpegsave_buffer(Q=85))


def decoded(data: bytes) -> tuple[int, int, str]:
    """Width, height and format (the libvips loader's name) of an image's bytes."""
    image = pyvips.Image.new_from_buffer(data, "")
    loader = str(image.get("vips-loader")).removesuffix("_buffer").removesuffix("load")
    return image.width, image.height, loader


def get(url: str) -> httpx.Response:
    """A download by URL. A new variant is computed on its first request; the first ones after
    blob starts also wait for its worker processes (8.9 s measured on a machine at load 17), so
    more than httpx's default 5 s."""
    return httpx.get(url, timeout=30)


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    path = tmp_path / "harbour.jpg"
    path.write_bytes(jpeg(1600, 1200))
    return path


# The typed Transform: what it sends, and what it refuses before a request is made.


def test_transform_params() -> None:
    assert Transform(w=800, fmt="webp").params() == {"w": "800", "fmt": "webp"}
    assert Transform(w=1, h=4096, fit="inside", fmt="auto", q=20).params() == {
        "w": "1",
        "h": "4096",
        "fit": "inside",
        "fmt": "auto",
        "q": "20",
    }
    assert Transform(preset="thumb").params() == {"preset": "thumb"}
    assert (
        Transform(preset="thumb").on("https://cdn.test/o/a/x.png")
        == "https://cdn.test/o/a/x.png?preset=thumb"
    )
    assert not Transform(preset="small").is_free and Transform(q=90).is_free


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"w": 0},
        {"w": 4097},
        {"h": -1},
        {"q": 19},
        {"q": 101},
        {"w": 10.5},
        {"w": True},
        {"fit": "fill"},
        {"fmt": "gif"},
        {"preset": ""},
        {"preset": "thumb", "w": 100},
        {"preset": "x" * 65},
    ],
)
def test_transform_refuses_what_the_contract_does(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"must|Give either|empty transform"):
        Transform(**fields)


# The SDK against the service.


def test_signed_transformed_url(sdk: Coffer, photo: Path) -> None:
    a = sdk.upload(photo)
    signed = sdk.signed_url(a.id, expires_in=120, transform=Transform(w=400, h=300, fmt="png"))
    assert signed.expires_in == 120 and signed.asset.id == a.id
    got = get(signed.url)
    assert got.status_code == 200, got.text
    assert got.headers["content-type"] == "image/png"
    assert decoded(got.content) == (400, 300, "png")

    # The signature covers the transform: another width, or the original, is refused.
    assert get(signed.url.replace("w=400", "w=401")).status_code == 403
    assert get(signed.url.replace("fmt=png", "fmt=webp")).status_code == 403
    without = "&".join(p for p in signed.url.split("?", 1)[1].split("&") if not p.startswith("w="))
    assert get(signed.url.split("?", 1)[0] + "?" + without).status_code == 403

    # A width alone keeps the aspect ratio and the source's format; never enlarged.
    wide = get(sdk.signed_url(a.id, transform=Transform(w=320)).url)
    assert decoded(wide.content) == (320, 240, "jpeg")
    huge = get(sdk.signed_url(a.id, transform=Transform(w=4000, fmt="webp")).url)
    assert decoded(huge.content) == (1600, 1200, "webp")

    # A preset on a signed URL, and the same preset on the public URL.
    thumb = get(sdk.signed_url(a.id, transform=Transform(preset="thumb")).url)
    assert thumb.headers["content-type"] == "image/webp" and decoded(thumb.content) == (256, 256, "webp")
    public = sdk.public_url(a, preset="medium")
    assert public == f"{a.public_url}?preset=medium"
    medium = get(public)
    assert medium.status_code == 200 and decoded(medium.content) == (1280, 960, "jpeg")
    assert sdk.public_url(a) == a.public_url


def test_refusals(stack: Any, new_tenant: Any, sdk: Coffer, photo: Path, tmp_path: Path) -> None:
    a = sdk.upload(photo)
    # Free parameters on the public URL: the CDN's 400 invalid_transform.
    assert a.public_url
    refused = get(a.public_url + "?w=100")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_transform"
    # An unknown preset: the service's 400, as the SDK's InvalidTransform (a BadRequest).
    with pytest.raises(cc.InvalidTransform) as bad:
        sdk.signed_url(a.id, transform=Transform(preset="no-such-preset"))
    assert bad.value.status == 400 and bad.value.code == "invalid_transform"
    assert isinstance(bad.value, cc.BadRequest)
    # A text file is no image: its transformed URL answers 415 not_an_image.
    text = tmp_path / "notes.txt"
    text.write_text("not a picture\n")
    t = sdk.upload(text)
    answer = get(sdk.signed_url(t.id, transform=Transform(w=100)).url)
    assert answer.status_code == 415 and answer.json()["error"]["code"] == "not_an_image"
    # A private asset has no public URL, transformed or not.
    private = sdk.upload(photo, visibility="private")
    with pytest.raises(ValueError, match="private"):
        sdk.public_url(private, preset="thumb")
    signed = sdk.signed_url(private.id, transform=Transform(preset="thumb"))
    assert decoded(get(signed.url).content) == (256, 256, "webp")
    # Another organization's asset, with a transform, is refused like without one.
    other = new_tenant("Elsewhere")
    with Coffer(stack.edge_url, other.key) as stranger, pytest.raises(cc.Forbidden):
        stranger.signed_url(a.id, transform=Transform(w=10))


def test_async_client_transform(stack: Any, tenant: Any, photo: Path) -> None:
    async def flow() -> None:
        async with AsyncCoffer(stack.edge_url, tenant.key) as c:
            a = await c.upload(photo)
            signed = await c.signed_url(a.id, transform=Transform(w=200, h=200, fit="contain", fmt="png"))
            async with httpx.AsyncClient() as http:
                got = await http.get(signed.url)
            # contain: the whole image inside the box, padded to it.
            assert decoded(got.content) == (200, 200, "png")
            assert c.public_url(a, preset="thumb").endswith("?preset=thumb")

    asyncio.run(flow())


# The command line.


def test_cli_url_transforms(cli: Any, photo: Path) -> None:
    r = cli("upload", str(photo), "--json")
    assert r.exit_code == 0, r.stderr
    asset_id = json.loads(r.stdout)["uploaded"][0]["id"]

    box = ("--width", "640", "--height", "640", "--fit", "inside", "--format", "webp")
    r = cli("url", asset_id, *box, "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["transform"] == {"w": "640", "h": "640", "fit": "inside", "fmt": "webp"}
    assert out["expiresIn"] == 3600
    got = get(out["url"])
    assert got.headers["content-type"] == "image/webp" and decoded(got.content) == (640, 480, "webp")

    r = cli("url", "/harbour.jpg", "--preset", "small", "--expires", "5m")
    assert r.exit_code == 0, r.stderr
    assert decoded(get(r.stdout.strip()).content) == (640, 480, "jpeg")

    r = cli("url", asset_id, "--public", "--preset", "thumb")
    assert r.exit_code == 0 and r.stdout.strip().endswith("?preset=thumb")
    assert decoded(get(r.stdout.strip()).content) == (256, 256, "webp")

    r = cli("url", asset_id, "--quality", "50", "--format", "jpeg", "--width", "100")
    small = get(r.stdout.strip())
    assert decoded(small.content) == (100, 75, "jpeg")

    # Refused before any request: exit 2 and one line on stderr.
    for argv in (
        ["--public", "--width", "100"],  # a public URL takes presets only
        ["--width", "0"],
        ["--height", "5000"],
        ["--quality", "10"],
        ["--fit", "stretch"],
        ["--format", "bmp"],
        ["--preset", "thumb", "--width", "10"],
    ):
        r = cli("url", asset_id, *argv)
        assert r.exit_code == 2, (argv, r.stdout, r.stderr)
    # Refused by the service: an unknown preset is a usage error too (400).
    r = cli("url", asset_id, "--preset", "nope")
    assert r.exit_code == 2 and "invalid_transform" in r.stderr


@pytest.mark.e2e
def test_transforms_on_postgres_and_s3(
    production_stack: Any, production_key: str, cli_for: Any, photo: Path
) -> None:
    """The same client calls on the production data path: variants are computed from, and kept in, S3."""
    with Coffer(production_stack.edge_url, production_key) as sdk:
        a = sdk.upload(photo)
        private = sdk.upload(photo, name="private.jpg", visibility="private")
        signed = sdk.signed_url(a.id, transform=Transform(w=300, h=300, fit="cover", fmt="avif", q=60))
        first, again = get(signed.url), get(signed.url)
        assert first.headers["content-type"] == "image/avif" and decoded(first.content) == (300, 300, "heif")
        assert again.content == first.content and again.headers["etag"] == first.headers["etag"]
        assert get(signed.url.replace("q=60", "q=61")).status_code == 403
        thumb = get(sdk.signed_url(private.id, transform=Transform(preset="thumb")).url)
        assert decoded(thumb.content) == (256, 256, "webp")
        assert decoded(get(sdk.public_url(a, preset="large")).content) == (1600, 1200, "jpeg")
    cli = cli_for(production_stack.edge_url, production_key)
    r = cli("url", a.id, "--height", "120", "--format", "png")
    assert r.exit_code == 0, r.stderr
    assert decoded(get(r.stdout.strip()).content) == (160, 120, "png")


def test_organization_presets(stack: Any, new_tenant: Any, sdk: Coffer, photo: Path, until: Any) -> None:
    built_in = [p.name for p in sdk.transform_presets()]
    assert built_in == ["thumb", "small", "medium", "large"]
    assert sdk.get_transform_preset("thumb") == cc.TransformPreset(
        name="thumb", built_in=True, w=256, h=256, fit="cover", fmt="webp", q=80
    )
    made = sdk.put_transform_preset("card", Transform(w=400, h=300, fit="cover", fmt="png"))
    assert (made.name, made.built_in, made.w, made.h, made.fmt) == ("card", False, 400, 300, "png")
    assert [p.name for p in sdk.transform_presets()] == [*built_in, "card"]
    a = sdk.upload(photo)
    signed = get(sdk.signed_url(a.id, transform=Transform(preset="card")).url)
    assert decoded(signed.content) == (400, 300, "png")
    # The CDN reads the organization's presets with a cache of at most 5 s.
    public = sdk.public_url(a, preset="card")
    until(lambda: get(public).status_code == 200)
    assert decoded(get(public).content) == (400, 300, "png")

    # Refusals: a preset of a preset (here), a built-in's name, a bad name (the service).
    with pytest.raises(ValueError, match="free parameters"):
        sdk.put_transform_preset("again", Transform(preset="card"))
    with pytest.raises(cc.InvalidTransform):
        sdk.put_transform_preset("thumb", Transform(w=10))
    with pytest.raises(cc.InvalidTransform):
        sdk.put_transform_preset("Bad Name", Transform(w=10))
    # Another organization neither sees nor uses it.
    other = new_tenant("Elsewhere")
    with Coffer(stack.edge_url, other.key) as stranger:
        assert [p.name for p in stranger.transform_presets()] == built_in
        with pytest.raises(cc.NotFound):
            stranger.get_transform_preset("card")
        b = stranger.upload(photo)
        with pytest.raises(cc.InvalidTransform):
            stranger.signed_url(b.id, transform=Transform(preset="card"))

    sdk.delete_transform_preset("card")
    with pytest.raises(cc.NotFound):
        sdk.get_transform_preset("card")
    with pytest.raises(cc.InvalidTransform):
        sdk.signed_url(a.id, transform=Transform(preset="card"))


def test_cli_presets(cli: Any, photo: Path) -> None:
    r = cli("presets", "ls")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines() == [
        "thumb\tbuilt-in\tw=256 h=256 fit=cover fmt=webp q=80",
        "small\tbuilt-in\tw=640 fit=cover q=80",
        "medium\tbuilt-in\tw=1280 fit=cover q=80",
        "large\tbuilt-in\tw=1920 fit=cover q=80",
    ]
    banner = ("--width", "800", "--height", "200", "--format", "jpeg", "--quality", "70")
    r = cli("presets", "set", "banner", *banner)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "banner\town\tw=800 h=200 fit=cover fmt=jpeg q=70\n"
    asset_id = json.loads(cli("upload", str(photo), "--json").stdout)["uploaded"][0]["id"]
    r = cli("url", asset_id, "--preset", "banner")
    assert decoded(get(r.stdout.strip()).content) == (800, 200, "jpeg")
    listed = json.loads(cli("presets", "ls", "--json").stdout)["presets"]
    assert [p["name"] for p in listed][-1] == "banner" and listed[-1]["builtIn"] is False

    assert cli("presets", "set", "empty", "--fit", "inside").exit_code == 2  # needs a size or format
    assert cli("presets", "set", "thumb", "--width", "10").exit_code == 2  # a built-in's name: 400
    assert cli("presets", "set", "wide", "--width", "0").exit_code == 2
    assert cli("presets", "rm", "banner").exit_code == 0
    assert cli("presets", "rm", "banner").exit_code == 3
    assert cli("url", asset_id, "--preset", "banner").exit_code == 2
