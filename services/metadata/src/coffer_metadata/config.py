"""Metadata settings (``COFFER_METADATA_*`` plus the shared ``COFFER_*``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from coffer_kit import ports
from coffer_kit.settings import BaseServiceSettings


class Settings(BaseServiceSettings):
    metadata_database_url: str = ""
    metadata_host: str = "127.0.0.1"
    metadata_port: int = ports.METADATA
    # Uploads one organization may have in flight at once (COFFER_METADATA_MAX_UPLOADS_IN_FLIGHT):
    # past it, a new upload is refused with 429 before any byte streams.
    metadata_max_uploads_in_flight: int = Field(default=64, ge=1)
    # Change events (the outbox) are kept this long once relayed to the audit log, which keeps
    # them for COFFER_AUDIT_RETENTION_DAYS itself (COFFER_METADATA_EVENT_RETENTION_DAYS).
    metadata_event_retention_days: int = Field(default=7, ge=1)

    @model_validator(mode="after")
    def _database(self) -> Settings:
        if not self.metadata_database_url:
            self.metadata_database_url = self.sqlite_url("metadata.db")
        return self
