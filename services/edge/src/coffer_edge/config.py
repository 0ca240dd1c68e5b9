"""Edge settings (``COFFER_EDGE_*``, the other services' URLs, plus the shared ``COFFER_*``)."""

from __future__ import annotations

from coffer_kit.settings import BaseServiceSettings


class Settings(BaseServiceSettings):
    edge_host: str = "127.0.0.1"
    edge_port: int = 8080
    # Metrics and health only; never exposed publicly.
    edge_internal_port: int = 9080
    auth_url: str = "http://127.0.0.1:8081"
    metadata_url: str = "http://127.0.0.1:8082"
    blob_url: str = "http://127.0.0.1:8083"
    # How long an auth answer may be reused; the contract bounds it at 5 s.
    edge_auth_cache_seconds: float = 5.0
    edge_auth_cache_size: int = 10_000
    # Requests per API key, in the ``limits`` notation ("100/second", "6000/minute").
    edge_rate_limit: str = "100/second"
    # Shared rate-limit counters for several edges; in-process counters when unset.
    redis_url: str | None = None
    # The sweeper: how often it runs (0 = never, in this process), and when intents and
    # tombstones count as stale. An intent must outlive the slowest upload.
    sweep_interval_seconds: float = 60.0
    sweep_intent_age_seconds: float = 3600.0
    sweep_tombstone_age_seconds: float = 60.0
