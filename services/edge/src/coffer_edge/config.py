"""Edge settings (``COFFER_EDGE_*``, the other services' URLs, plus the shared ``COFFER_*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coffer_kit import ports
from coffer_kit.settings import BaseServiceSettings


class EdgeTuning(BaseModel):
    """Edge's internal tuning; an operator never needs to change it."""

    model_config = ConfigDict(extra="forbid")

    # How long an upload relay waits for blob to take one chunk (1 MiB at most) before it gives
    # up with 503: blob stalled, not the client (waiting for the client is not counted).
    blob_write_timeout_seconds: float = 30.0
    # How long an upload's body may send nothing before edge stops reading it: 408 for a
    # one-shot upload (nothing kept, the reservation released), and for a tus PATCH the end of
    # the chunk (what arrived is kept, as when the client goes away).
    client_idle_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    # How long edge remembers that auth refused a key (401), asking auth nothing meanwhile.
    auth_negative_cache_seconds: float = Field(default=2.0, ge=0, le=5)
    # A scan that blob cannot run (clamd down or unset) is retried after
    # scan_backoff_seconds × 2^attempt, at most scan_retries times, then the asset is
    # `unscanned`.
    scan_retries: int = Field(default=5, ge=0, le=20)
    scan_backoff_seconds: float = Field(default=10.0, gt=0, le=3600)
    # Scans this edge asks blob for at once (blob bounds its own, COFFER_BLOB_SCAN_CONCURRENCY).
    scan_concurrency: int = Field(default=2, ge=1, le=64)


class Settings(BaseServiceSettings):
    edge_host: str = "127.0.0.1"
    edge_port: int = ports.EDGE
    # Metrics and health only; never exposed publicly.
    edge_internal_port: int = ports.EDGE_INTERNAL
    auth_url: str = ports.loopback_url(ports.AUTH)
    metadata_url: str = ports.loopback_url(ports.METADATA)
    blob_url: str = ports.loopback_url(ports.BLOB)
    # How long an auth answer may be reused; the contract bounds it at 5 s.
    edge_auth_cache_seconds: float = 5.0
    edge_auth_cache_size: int = 10_000
    # Requests per API key, in the ``limits`` notation ("100/second", "6000/minute").
    edge_rate_limit: str = "100/second"
    # Failed authentications (unknown, deleted or expired keys) per client address; past it
    # the address gets 429 without auth being asked (issue 23).
    edge_auth_failure_limit: str = "30/minute"
    # Shared rate-limit counters for several edges; in-process counters when unset.
    redis_url: str | None = None
    # Every rate-limit counter's key starts with this, so installs sharing one Redis never
    # share counters (the chart sets its release's name).
    redis_key_prefix: str = Field(
        default="coffer", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$"
    )
    # The sweeper: how often it runs (0 = never, in this process), and when intents and
    # tombstones count as stale. An intent must outlive the slowest upload.
    sweep_interval_seconds: float = 60.0
    sweep_intent_age_seconds: float = 3600.0
    sweep_tombstone_age_seconds: float = 60.0
    # Issue 47: how often the expiry sweeper looks for expired assets and trashed assets past
    # their retention (0 = not in this process). The constant EXPIRY_INTERVAL_SECONDS (30 s)
    # keeps expiry within two minutes; tests shorten it.
    edge_expiry_interval_seconds: float = Field(default=30.0, ge=0, le=60)
    # The audit relay (coffer_edge.audit_relay): it runs after each change this edge makes and
    # at least this often (for other edges' changes and retries); 0 = not in this process.
    edge_audit_relay_interval_seconds: float = Field(default=5.0, ge=0)
    # The scan relay (coffer_edge.scans, issue 48): it looks for due malware scans this often
    # (0 = not in this process); its retries are EdgeTuning's.
    edge_scan_interval_seconds: float = Field(default=1.0, ge=0)
    # The image facts relay (coffer_edge.facts, issue 50): it looks for images whose facts are
    # due this often, and at once after an image's upload (0 = not in this process).
    edge_facts_interval_seconds: float = Field(default=1.0, ge=0)
    # The revocation relay (coffer_edge.revocations): it carries auth's ended authorities to
    # blob this often, and at once after this edge ends one (0 = not in this process). With
    # the CDN's 2 s lookup cache it bounds how long a signed URL outlives its key or member.
    edge_revocation_interval_seconds: float = Field(default=1.0, ge=0, le=2)

    # The dashboard (docs/dashboard.md). Off: an API-only install, no /dashboard routes.
    dashboard_enabled: bool = True
    # Public address of the dashboard; its origin is what the CSRF check accepts.
    # Default: ``${COFFER_BASE_URL}/dashboard``.
    dashboard_url: str | None = None
    # open | invite | closed; production mode must set it (auth enforces it, edge shows it).
    dashboard_signup: Literal["open", "invite", "closed"] | None = None
    # Sign-in, registration and reset posts per client IP, in the ``limits`` notation.
    dashboard_ip_limit: str = "20/minute"
    # Proxies whose X-Forwarded-For names the client (uvicorn's --forwarded-allow-ips): a
    # comma-separated list of addresses or networks, "*" for any. Unset: loopback only.
    # Production mode with the dashboard needs it said: the proxies, or "none" when clients
    # reach edge directly (without it, every client behind an ingress shares one address in
    # the sign-in throttle and the failed-authentication limit).
    trusted_proxies: str | None = None
    # Edge's internal tuning (EdgeTuning): not an operator's setting, so not in
    # docs/operations.md; tests set it through the constructor (or, for a process,
    # COFFER_EDGE_TUNING as JSON).
    edge_tuning: EdgeTuning = Field(default_factory=EdgeTuning)
    # Tests only: one more key expiry choice, in seconds (e.g. 60), to watch a key expire.
    dashboard_extra_key_expiry_seconds: int | None = None

    @field_validator("dashboard_signup", mode="before")
    @classmethod
    def _unset_signup(cls, value: object) -> object:
        """An empty COFFER_DASHBOARD_SIGNUP (as a chart may render it) means unset."""
        return None if value == "" else value

    @model_validator(mode="after")
    def _dashboard(self) -> Settings:
        if self.dashboard_url is None:
            self.dashboard_url = self.base_url + "/dashboard"
        self.dashboard_url = self.dashboard_url.rstrip("/")
        if self.dashboard_enabled and self.mode == "production":
            if not self.dashboard_url.startswith("https://"):
                raise ValueError(
                    "the dashboard needs an https COFFER_BASE_URL (or COFFER_DASHBOARD_URL) in production "
                    "mode: browsers drop its Secure session cookie on plain http; "
                    "set COFFER_DASHBOARD_ENABLED=false for an API-only install"
                )
            if self.dashboard_signup is None:
                raise ValueError(
                    "COFFER_DASHBOARD_SIGNUP (open, invite or closed) must be set in production mode"
                )
            if not self.trusted_proxies:
                raise ValueError(
                    "COFFER_TRUSTED_PROXIES must be set in production mode: the addresses or networks "
                    "of the proxies in front of edge (the ingress controller), whose X-Forwarded-For "
                    "names the client, or 'none' when clients reach edge directly; otherwise every "
                    "client behind the proxy shares its address in the sign-in throttle"
                )
        return self

    @property
    def forwarded_allow_ips(self) -> str | None:
        """uvicorn's --forwarded-allow-ips: the trusted proxies; "" for ``none`` (no peer, not
        even loopback: uvicorn's own default trusts 127.0.0.1); None, unset: that default."""
        if self.trusted_proxies == "none":
            return ""
        return self.trusted_proxies or None

    @property
    def signup(self) -> str:
        """The sign-up mode in effect: ``open`` by default in local mode."""
        return self.dashboard_signup or "open"
