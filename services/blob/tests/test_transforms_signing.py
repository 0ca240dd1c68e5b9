"""Signed transformed URLs (issue 26): the signature covers the transform's canonical form, so a
changed transform is refused, and an untransformed signature is unchanged and covers no transform."""

from __future__ import annotations

import secrets
import time

from coffer_blob import signing
from coffer_kit.contract import transforms as params

KEY = "org_1/ast_1/photo.jpg"


def _canonical(query: dict[str, str]) -> str:
    transform = params.parse(query, signed=True)
    assert transform is not None
    return transform.canonical()


def test_the_signature_covers_the_transform() -> None:
    secret = secrets.token_bytes(32)
    expires = int(time.time()) + 600
    wanted = _canonical({"w": "300", "fmt": "webp"})
    sent = signing.signature(secret, KEY, expires, wanted)
    now = time.time()
    assert signing.check(secret, KEY, str(expires), sent, now=now, transform=wanted) is None
    # Another spelling of the same transform is the same variant: still valid.
    same = _canonical({"fmt": "webp", "w": "300", "q": "80", "fit": "cover"})
    assert signing.check(secret, KEY, str(expires), sent, now=now, transform=same) is None
    tampered = [{"w": "301", "fmt": "webp"}, {"w": "300", "fmt": "png"}, {"w": "300", "h": "9"}]
    for query in tampered:
        refusal = signing.check(secret, KEY, str(expires), sent, now=now, transform=_canonical(query))
        assert refusal is not None
    # Dropping the transform (the original) or reusing the original's signature for a transform fails.
    assert signing.check(secret, KEY, str(expires), sent, now=now) is not None
    plain = signing.signature(secret, KEY, expires)
    assert signing.check(secret, KEY, str(expires), plain, now=now) is None
    assert signing.check(secret, KEY, str(expires), plain, now=now, transform=wanted) is not None
