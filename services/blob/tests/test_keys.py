"""File names, keys, media types and URL signatures."""

from __future__ import annotations

import pytest

from coffer_blob import signing
from coffer_kit.contract import keys

ORG, AST = "org_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9", "ast_01JD4Z3X6Q8ZK3Q0W5N6M7P8R9"


@pytest.mark.parametrize(
    ("uploaded", "stored"),
    [
        ("photo.jpg", "photo.jpg"),
        ("résumé final.pdf", "résumé final.pdf"),
        ("e\u0301te\u0301.txt", "été.txt"),  # NFC
        ("日本語のファイル.png", "日本語のファイル.png"),
        ("../../etc/passwd", "..-..-etc-passwd"),
        ("C:\\Users\\me\\notes.txt", "C:-Users-me-notes.txt"),
        ("a?b#c%d.txt", "a-b-c-d.txt"),
        ("tab\there\nnew\x7fdel\x85nel.txt", "tab-here-new-del-nel.txt"),
        ("%meta.json", "-meta.json"),
        ("", "file"),
        (None, "file"),
        (".", "file"),
        ("..", "file"),
        ("...", "..."),
        (".hidden", ".hidden"),
    ],
)
def test_sanitize_filename(uploaded: str | None, stored: str) -> None:
    assert keys.sanitize_filename(uploaded) == stored
    assert keys.sanitize_filename(stored) == stored  # idempotent


@pytest.mark.parametrize(
    ("uploaded", "suffix"),
    [
        ("é" * 200 + ".jpeg", ".jpeg"),
        ("a" * 300 + ".tar.gz", ".gz"),
        ("x" * 300, "x"),
        ("a" * 300 + "." + "e" * 40, "a"),  # an overlong "extension" is cut with the rest
        ("€" * 120, "€"),
    ],
)
def test_long_names_are_capped_at_255_bytes(uploaded: str, suffix: str) -> None:
    stored = keys.sanitize_filename(uploaded)
    assert len(stored.encode()) <= 255
    assert len(stored.encode()) > 250
    assert stored.endswith(suffix)
    assert keys.sanitize_filename(stored) == stored


def test_keys() -> None:
    assert keys.object_key(ORG, AST, "a/b.txt") == f"{ORG}/{AST}/a-b.txt"
    assert keys.is_valid_key(f"{ORG}/{AST}/a-b.txt")
    for bad in (
        f"{ORG}/{AST}",
        f"{ORG}/{AST}/",
        f"{ORG}/{AST}/a/b",
        f"{ORG}/{AST}/..",
        f"{ORG}/{AST}/%meta.json",
        f"{ORG}/{AST}/a%20b",
        f"{ORG}/{AST}/e\u0301",  # not NFC
        f"usr_1/{AST}/x",
        f"{ORG}/fld_1/x",
        f"{ORG}/ast_../x",
        "",
    ):
        assert not keys.is_valid_key(bad), bad


@pytest.mark.parametrize(
    ("declared", "filename", "expected"),
    [
        ("image/png", "x.bin", "image/png"),
        ("text/plain; charset=utf-8", "x.txt", "text/plain"),
        ("Image/PNG", "x", "image/png"),
        ("application/octet-stream", "photo.png", "image/png"),
        (None, "doc.pdf", "application/pdf"),
        ("", "page.html", "text/html"),
        ("not a type", "doc.pdf", "application/pdf"),
        (None, "archive.tar.gz", "application/gzip"),
        (None, "noext", "application/octet-stream"),
        ("application/octet-stream", "x.unknownext", "application/octet-stream"),
        ("application/vnd.api+json", "x", "application/vnd.api+json"),
    ],
)
def test_mime_type(declared: str | None, filename: str, expected: str) -> None:
    assert keys.choose_mime_type(declared, filename) == expected


@pytest.mark.parametrize(
    "content_type",
    [
        "text/html",
        "application/xhtml+xml",
        "image/svg+xml",
        "text/xml",
        "application/xml",
        "application/atom+xml",
        "text/javascript",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "text/xsl",
    ],
)
def test_active_content(content_type: str) -> None:
    assert keys.is_active_content(content_type)


@pytest.mark.parametrize(
    "content_type", ["image/png", "application/pdf", "application/json", "text/plain", "video/mp4"]
)
def test_passive_content(content_type: str) -> None:
    assert not keys.is_active_content(content_type)


def test_signatures() -> None:
    secret, key = b"s3cret", f"{ORG}/{AST}/a.txt"
    sig = signing.signature(secret, key, 2_000_000_000)
    assert "=" not in sig and len(sig) == 43  # base64url of 32 bytes, no padding
    assert signing.check(secret, key, "2000000000", sig, now=1_900_000_000) is None
    assert signing.check(secret, key, "2000000000", sig, now=2_000_000_000) == "The signed URL has expired."
    refused = [
        (b"other", key, "2000000000", sig),
        (secret, key + "x", "2000000000", sig),
        (secret, key, "2000000001", sig),
        (secret, key, "02000000000", sig),
        (secret, key, "2000000000", sig[:-1]),
        (secret, key, "2000000000", sig + "="),
        (secret, key, "2e9", sig),
        (secret, key, "", sig),
        (secret, key, "2000000000", "é" + sig[1:]),
    ]
    for args in refused:
        assert signing.check(*args, now=1_900_000_000) is not None, args
