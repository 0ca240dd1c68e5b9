"""Auth settings (``COFFER_AUTH_*`` plus the shared ``COFFER_*``)."""

from __future__ import annotations

from pydantic import model_validator

from coffer_kit.settings import BaseServiceSettings

DEFAULT_QUOTA_BYTES = 10 * 1024**3


class Settings(BaseServiceSettings):
    auth_database_url: str = ""
    auth_host: str = "127.0.0.1"
    auth_port: int = 8081
    auth_default_quota_bytes: int = DEFAULT_QUOTA_BYTES

    @model_validator(mode="after")
    def _database(self) -> Settings:
        if not self.auth_database_url:
            self.auth_database_url = self.sqlite_url("auth.db")
        return self
