"""edge's own metrics (request metrics come from coffer-kit)."""

from prometheus_client import Counter, Histogram

from coffer_kit.metrics import LATENCY_BUCKETS

AUTH_CACHE = Counter(
    "coffer_auth_cache_requests_total",
    "Principal lookups at edge, by cache result: hit, miss (a call to auth), shared (a miss"
    " answered by a call to auth already on its way for the same key), or refused (a key auth"
    " refused moments ago).",
    ["result"],
)
RATE_LIMIT_FALLBACKS = Counter(
    "coffer_ratelimit_redis_failures_total",
    "Times Redis could not be reached by the rate limiter, which then counts in process for 5 s.",
)
UPLOADS = Counter("coffer_uploads_total", "Uploads finished, by outcome.", ["outcome"])
UPLOAD_BYTES = Counter("coffer_upload_bytes_total", "Bytes of files stored by successful uploads.")
UPLOAD_DURATION = Histogram(
    "coffer_upload_duration_seconds",
    "Time from request to answer of an upload, by outcome.",
    ["outcome"],
    buckets=LATENCY_BUCKETS,
)
SWEPT = Counter(
    "coffer_sweeper_items_total",
    "Stale upload intents, tombstones and uploads of gone minters the sweeper handled, by outcome.",
    ["kind", "outcome"],
)
EXPIRY_SWEEPS = Counter(
    "coffer_expiry_sweeps_total",
    "Expiry sweeps run (expire what is due, then purge the trash past its retention), by outcome.",
    ["outcome"],
)
DASHBOARD_LOGINS = Counter(
    "coffer_dashboard_logins_total",
    "Dashboard sign-in attempts, by outcome: success, failed, throttled.",
    ["outcome"],
)
