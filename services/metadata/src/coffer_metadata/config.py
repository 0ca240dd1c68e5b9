"""Metadata settings (``COFFER_METADATA_*`` plus the shared ``COFFER_*``)."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from coffer_kit import ports
from coffer_kit.contract.limits import TUS_EXPIRY_SECONDS
from coffer_kit.contract.webhooks import DELIVERY_TIMEOUT_SECONDS
from coffer_kit.settings import BaseServiceSettings, checked_secret

# CONTRACT §11: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, then every 10 h.
DEFAULT_RETRY_SCHEDULE = "5,300,1800,7200,18000,36000"


class WebhookTuning(BaseModel):
    """The webhook dispatcher's internal tuning; an operator never needs to change it."""

    model_config = ConfigDict(extra="forbid")

    # How often the dispatcher looks for new events and due retries when not woken sooner.
    poll_seconds: float = Field(default=0.1, gt=0, le=60)
    # The shortest time between two of the dispatcher's rounds (one write transaction each):
    # sends that end meanwhile are recorded together, and new events wait at most this long
    # (plus the poll) to go out. On SQLite each round is a turn of the write lock the API's
    # uploads wait for, and each costs CPU whatever it carries. 0.1 s against 0.05 kept the
    # upload rate with an endpoint nearer the rate without; 0.2 s saved the dispatcher 0.05
    # cores more but moved that rate ratio no further, and cost deliveries 0.1-0.3 s on a
    # busy machine (docs/performance.md).
    cycle_gap_seconds: float = Field(default=0.1, ge=0, le=5)
    # How long a receiver has to answer: CONTRACT §11's 10 s. Tests shorten it (with the
    # lease) so that what waits on it, a killed dispatcher's leases, takes seconds, not tens.
    delivery_timeout_seconds: float = Field(default=DELIVERY_TIMEOUT_SECONDS, gt=0, le=60)
    # A claimed delivery is another dispatcher's to retry after this (a dispatcher that died
    # mid-send); at least 2 s longer than the time a receiver has to answer, so a lease never
    # ends mid-send.
    lease_seconds: float = Field(default=60, ge=2, le=3600)
    # Deliveries one dispatcher sends at once, and at most per endpoint (one slow receiver
    # holds no more than that, so other endpoints and organizations keep their turn).
    concurrency: int = Field(default=64, ge=1, le=1024)
    endpoint_concurrency: int = Field(default=4, ge=1, le=64)
    # The dispatcher's niceness (os.nice): on a machine it shares with the API (the embedded
    # default), a burst of uploads gets the CPU first and the deliveries catch up after it. In
    # a pod of its own (its own cgroup) it changes nothing.
    niceness: int = Field(default=10, ge=0, le=19)

    @model_validator(mode="after")
    def _lease_outlasts_a_send(self) -> WebhookTuning:
        if self.lease_seconds < self.delivery_timeout_seconds + 2:
            raise ValueError("lease_seconds must be at least delivery_timeout_seconds + 2")
        return self


class Settings(BaseServiceSettings):
    metadata_database_url: str = ""
    metadata_host: str = "127.0.0.1"
    metadata_port: int = ports.METADATA
    # Uploads one organization may have in flight at once (COFFER_METADATA_MAX_UPLOADS_IN_FLIGHT):
    # past it, a new upload is refused with 429 before any byte streams.
    metadata_max_uploads_in_flight: int = Field(default=64, ge=1)
    # A resumable upload nobody has written to for this long gives its reservation and its place
    # among the uploads in flight back (its bytes stay until it expires, 24 h after its last
    # write); its next PATCH asks for both again, 413 or 429 if they are gone
    # (COFFER_METADATA_TUS_IDLE_SECONDS, docs/security.md).
    metadata_tus_idle_seconds: float = Field(default=3600, gt=0, le=TUS_EXPIRY_SECONDS)
    # Change events (the outbox) are kept this long once relayed to the audit log, which keeps
    # them for COFFER_AUDIT_RETENTION_DAYS itself (COFFER_METADATA_EVENT_RETENTION_DAYS).
    metadata_event_retention_days: int = Field(default=7, ge=1)
    # Retention of the bookkeeping (docs/operations.md, "Retention"; coffer_metadata.retention):
    # the delivery log's attempts and finished deliveries are kept this long
    # (COFFER_METADATA_WEBHOOK_LOG_RETENTION_DAYS); each metadata process prunes every
    # COFFER_METADATA_RETENTION_INTERVAL_SECONDS (0: never), at most
    # coffer_metadata.retention.RETENTION_BATCH rows of a kind per transaction.
    metadata_webhook_log_retention_days: int = Field(default=30, ge=1, le=3650)
    metadata_retention_interval_seconds: float = Field(default=600, ge=0, le=86400)

    # Webhooks (CONTRACT §11). The key that encrypts endpoints' signing secrets at rest
    # (COFFER_METADATA_WEBHOOK_SECRET_KEY): at least 32 characters outside local mode, generated
    # in the data dir by the embedded stack. Changing it makes existing secrets unreadable.
    metadata_webhook_secret_key: SecretStr | None = None
    # Plain http endpoints are refused unless this is true (COFFER_METADATA_WEBHOOK_ALLOW_HTTP).
    metadata_webhook_allow_http: bool = False
    # Internal ranges webhooks may reach anyway, comma-separated CIDRs, e.g. "10.1.0.0/16"
    # (COFFER_METADATA_WEBHOOK_ALLOWED_NETWORKS). Empty: only public addresses.
    metadata_webhook_allowed_networks: str = ""
    # Seconds between attempts of a failing delivery, comma-separated; the last repeats
    # (COFFER_METADATA_WEBHOOK_RETRY_SCHEDULE), with ±10 % jitter.
    metadata_webhook_retry_schedule: str = DEFAULT_RETRY_SCHEDULE
    # A delivery is retried this long after its event, then given up (about 3 days).
    metadata_webhook_retry_for_seconds: float = Field(default=3 * 86400, gt=0)
    # An endpoint whose every attempt failed for this long is disabled (5 days).
    metadata_webhook_disable_after_seconds: float = Field(default=5 * 86400, gt=0)
    # The dispatcher's internal tuning (WebhookTuning): not an operator's setting, so not in
    # docs/operations.md; tests set it through the constructor (or, for a process,
    # COFFER_METADATA_WEBHOOK_TUNING as JSON).
    metadata_webhook_tuning: WebhookTuning = Field(default_factory=WebhookTuning)
    # The dispatcher role's health and metrics listener (coffer-metadata dispatch).
    metadata_dispatcher_port: int = ports.WEBHOOKS
    # Run the dispatcher inside metadata's own process (``coffer-metadata serve``), on an event
    # loop and thread of its own, its listener on the dispatcher's port: one process fewer
    # (the embedded default, coffer_stack, turns it on). Off: ``coffer-metadata dispatch`` runs
    # it apart, as the chart deploys it (its own pods, replicas, niceness).
    metadata_webhooks_in_process: bool = False

    @model_validator(mode="after")
    def _database(self) -> Settings:
        if not self.metadata_database_url:
            self.metadata_database_url = self.sqlite_url("metadata.db")
        self.metadata_webhook_secret_key = checked_secret(
            self.metadata_webhook_secret_key,
            name="COFFER_METADATA_WEBHOOK_SECRET_KEY",
            mode=self.mode,
            data_dir=self.data_dir,
            file="webhook_secret_key",
        )
        self.webhook_networks()
        self.retry_schedule()
        return self

    def webhook_networks(self) -> list[str]:
        """The allowlisted networks (each checked to be a CIDR)."""
        networks = [n.strip() for n in self.metadata_webhook_allowed_networks.split(",") if n.strip()]
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError as exc:
                name = "COFFER_METADATA_WEBHOOK_ALLOWED_NETWORKS"
                raise ValueError(f"{name}: {network!r} is not a CIDR") from exc
        return networks

    def retry_schedule(self) -> list[float]:
        """Seconds before each retry; the last repeats."""
        try:
            delays = [float(d) for d in self.metadata_webhook_retry_schedule.split(",") if d.strip()]
        except ValueError as exc:
            raise ValueError("COFFER_METADATA_WEBHOOK_RETRY_SCHEDULE: seconds, comma-separated") from exc
        if not delays or any(d < 0 for d in delays):
            raise ValueError("COFFER_METADATA_WEBHOOK_RETRY_SCHEDULE: at least one delay, none negative")
        return delays

    def webhook_secret(self) -> str:
        """The key that encrypts webhook secrets (the validator has set it by now)."""
        assert self.metadata_webhook_secret_key is not None
        return self.metadata_webhook_secret_key.get_secret_value()
