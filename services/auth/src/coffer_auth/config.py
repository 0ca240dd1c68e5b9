"""Auth settings (``COFFER_AUTH_*`` plus the shared ``COFFER_*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from coffer_kit import ports
from coffer_kit.settings import BaseServiceSettings

DEFAULT_QUOTA_BYTES = 10 * 1024**3
SELF_SERVICE_QUOTA_BYTES = 1024**3


class AuthTuning(BaseModel):
    """Auth's internal tuning; an operator never needs to change it."""

    model_config = ConfigDict(extra="forbid")

    # Audit entries past the retention go at most this many per transaction, at most 10
    # transactions per hourly pass (docs/operations.md, "Retention").
    audit_retention_batch: int = Field(default=1000, ge=1, le=100_000)


class Settings(BaseServiceSettings):
    auth_database_url: str = ""
    auth_host: str = "127.0.0.1"
    auth_port: int = ports.AUTH
    # Organizations the operator creates (coffer-auth create-org without --quota-bytes).
    auth_default_quota_bytes: int = DEFAULT_QUOTA_BYTES
    # Organizations a user creates in the dashboard (issue 23: each got 10 GiB, without limit):
    # their quota, and how many organizations one user may own.
    auth_self_service_quota_bytes: int = Field(default=SELF_SERVICE_QUOTA_BYTES, ge=0)
    dashboard_max_owned_orgs: int = Field(default=5, ge=0, le=10_000)

    # The dashboard's accounts (shared names: edge reads the same variables).
    dashboard_url: str = ""  # default: {base_url}/dashboard; invite and reset links start here
    # open | invite | closed. Default "open" in local mode; production leaves it unset and
    # edge refuses to serve the dashboard then, so auth treats unset as "closed".
    dashboard_signup: Literal["open", "invite", "closed"] | None = None
    dashboard_session_idle_seconds: int = 86400
    dashboard_session_max_age_seconds: int = 604800
    dashboard_reauth_seconds: int = 7200
    invite_ttl_seconds: int = 604800
    reset_ttl_seconds: int = 3600
    audit_retention_days: int = 365
    # Auth's internal tuning (AuthTuning): not an operator's setting, so not in
    # docs/operations.md; tests set it on the settings object (or, for a process,
    # COFFER_AUTH_TUNING as JSON).
    auth_tuning: AuthTuning = Field(default_factory=AuthTuning)

    @field_validator("dashboard_signup", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # An empty variable (a blank chart value) means unset, not an invalid mode.
        return None if value == "" else value

    @model_validator(mode="after")
    def _database(self) -> Settings:
        if not self.auth_database_url:
            self.auth_database_url = self.sqlite_url("auth.db")
        if not self.dashboard_url:
            self.dashboard_url = f"{self.base_url}/dashboard"
        self.dashboard_url = self.dashboard_url.rstrip("/")
        if self.dashboard_signup is None and self.mode == "local":
            self.dashboard_signup = "open"
        return self

    @property
    def signup(self) -> str:
        """The sign-up mode in force."""
        return self.dashboard_signup or "closed"
