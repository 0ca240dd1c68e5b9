"""schemathesis hooks for tests/e2e/test_fuzz.py (loaded through SCHEMATHESIS_HOOKS): a tus
chunk (``PATCH /api/uploads/tus/{id}``) is raw bytes of ``application/offset+octet-stream``, a
media type schemathesis has no generator for."""

from __future__ import annotations

import schemathesis
from hypothesis import strategies as st

schemathesis.openapi.media_type("application/offset+octet-stream", st.binary(max_size=4096))
