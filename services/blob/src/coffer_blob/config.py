"""Blob settings (``COFFER_BLOB_*``, ``COFFER_CDN_*``, storage, plus the shared ``COFFER_*``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import SecretStr, model_validator

from coffer_kit.settings import BaseServiceSettings, local_secret


class Settings(BaseServiceSettings):
    blob_host: str = "127.0.0.1"
    blob_port: int = 8083
    cdn_host: str = "127.0.0.1"
    cdn_port: int = 8090
    # HMAC secret for signed CDN URLs; only blob knows it.
    signing_secret: SecretStr | None = None
    storage: Literal["fs", "s3"] = "fs"
    blob_dir: Path | None = None

    @model_validator(mode="after")
    def _blob(self) -> Settings:
        if self.signing_secret is None:
            if self.mode != "local":
                raise ValueError("COFFER_SIGNING_SECRET must be set outside local mode")
            self.signing_secret = local_secret(self.data_dir, "signing_secret")
        if self.blob_dir is None:
            self.blob_dir = self.data_dir / "blobs"
        return self
