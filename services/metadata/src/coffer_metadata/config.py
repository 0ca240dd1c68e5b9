"""Metadata settings (``COFFER_METADATA_*`` plus the shared ``COFFER_*``)."""

from __future__ import annotations

from pydantic import model_validator

from coffer_kit import ports
from coffer_kit.settings import BaseServiceSettings


class Settings(BaseServiceSettings):
    metadata_database_url: str = ""
    metadata_host: str = "127.0.0.1"
    metadata_port: int = ports.METADATA

    @model_validator(mode="after")
    def _database(self) -> Settings:
        if not self.metadata_database_url:
            self.metadata_database_url = self.sqlite_url("metadata.db")
        return self
