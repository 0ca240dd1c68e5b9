"""The services' default ports on one machine (the embedded default), defined once.

Every setting that names a port or a loopback URL defaults from here, and so does the
launcher; the Helm chart keeps its own table (charts/coffer/templates/_helpers.tpl,
``coffer.spec``), which its tests hold to these values.
"""

from __future__ import annotations

EDGE = 8080
AUTH = 8081
METADATA = 8082
BLOB = 8083
CDN = 8090
# metadata's webhook dispatcher role: health and metrics only.
WEBHOOKS = 8084
# edge's health and metrics listener, never exposed publicly.
EDGE_INTERNAL = 9080

LOOPBACK = "127.0.0.1"


def loopback_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}"
