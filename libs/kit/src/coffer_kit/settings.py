"""Base settings every service extends, and the secrets of the embedded default."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from coffer_kit import ports
from coffer_kit.guard import BodyLimits

if TYPE_CHECKING:
    from coffer_kit.db.engine import DatabaseBudget


def local_secret(data_dir: Path, name: str) -> SecretStr:
    """Read a generated secret from the data dir, creating it on first use.

    Used only in local mode, so the embedded default never runs on a hard-coded secret.
    Creation is atomic (O_EXCL), so services starting together agree on one value.
    """
    directory = data_dir / "secrets"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        tmp_value = secrets.token_urlsafe(32)
        with os.fdopen(fd, "w") as fh:
            fh.write(tmp_value)
            fh.flush()
            os.fsync(fh.fileno())
        return SecretStr(tmp_value)
    for _ in range(100):  # another process may be writing it right now
        value = path.read_text().strip()
        if value:
            return SecretStr(value)
        import time

        time.sleep(0.01)
    raise RuntimeError(f"secret file {path} is empty")


# A secret shorter than this is refused outside local mode: 32 characters of token_urlsafe
# are 192 bits; an empty or short one set by mistake must not start a production service.
MIN_SECRET_LENGTH = 32


def checked_secret(value: SecretStr | None, *, name: str, mode: str, data_dir: Path, file: str) -> SecretStr:
    """A secret setting: generated in local mode when unset or empty; outside it, required and
    at least MIN_SECRET_LENGTH characters (issue 23: an empty one was accepted)."""
    if value is not None and value.get_secret_value():
        if mode != "local" and len(value.get_secret_value()) < MIN_SECRET_LENGTH:
            raise ValueError(f"{name} must be at least {MIN_SECRET_LENGTH} characters outside local mode")
        return value
    if mode != "local":
        raise ValueError(f"{name} must be set outside local mode")
    return local_secret(data_dir, file)


class BaseServiceSettings(BaseSettings):
    """Settings shared by every service.

    Every variable has the prefix ``COFFER_`` (service-specific ones carry the service's name,
    e.g. ``COFFER_AUTH_DATABASE_URL``), so one env file configures the whole stack.
    """

    model_config = SettingsConfigDict(env_prefix="COFFER_", extra="ignore")

    mode: Literal["local", "production"] = "local"
    data_dir: Path = Path(".coffer")
    log_level: str = "INFO"
    # Unset: console lines on a terminal, JSON lines otherwise (coffer_kit.logs).
    log_format: Literal["json", "console"] | None = None
    internal_token: SecretStr | None = None
    # Public addresses, used to build URLs that clients see.
    base_url: str = ports.loopback_url(ports.EDGE)
    cdn_url: str = ports.loopback_url(ports.CDN)
    # The database connections one process may hold (auth, metadata; the webhook dispatcher
    # takes at most 4 of the pool's): the pool of worker-thread transactions
    # (COFFER_DATABASE_POOL_SIZE; the default matches the thread pool, see
    # coffer_kit.db.POOL_SIZE), and on PostgreSQL the event loop's keyed reads and hot writes
    # (COFFER_DATABASE_READ_CONNECTIONS, COFFER_DATABASE_WRITE_CONNECTIONS). A process never
    # opens more than their sum (docs/operations.md, "The connection budget"); lower them when
    # many replicas share one PostgreSQL (the Helm chart computes them from the replicas).
    database_pool_size: int = Field(default=40, ge=1, le=1000)
    database_read_connections: int = Field(default=4, ge=1, le=64)
    database_write_connections: int = Field(default=8, ge=1, le=64)
    # "transaction": PostgreSQL is reached through a pooler in transaction mode (PgBouncer's
    # pool_mode = transaction), where a server connection is one client's for one transaction
    # only: no prepared statements, no session settings (COFFER_DATABASE_POOLER). Migrations
    # still go straight to PostgreSQL (docs/operations.md).
    database_pooler: Literal["none", "transaction"] = "none"
    # Request bodies that are not streamed (JSON, forms) are refused past this size (413)
    # before any route or authentication; uploads have the file bound instead (issue 23).
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    # JSON bodies nesting arrays and objects deeper than this are refused (400).
    max_json_depth: int = Field(default=32, ge=2, le=1000)

    @model_validator(mode="after")
    def _secrets(self) -> BaseServiceSettings:
        self.internal_token = checked_secret(
            self.internal_token,
            name="COFFER_INTERNAL_TOKEN",
            mode=self.mode,
            data_dir=self.data_dir,
            file="internal_token",
        )
        self.base_url = self.base_url.rstrip("/")
        self.cdn_url = self.cdn_url.rstrip("/")
        return self

    def body_limits(
        self, *streamed: tuple[str, str, int], larger: tuple[tuple[str, str, int], ...] = ()
    ) -> BodyLimits:
        """The bounds on this service's request bodies; ``streamed``: (method, path regex,
        limit) of the routes that stream their body (uploads); ``larger``: of the routes whose
        body, read whole, may pass ``max_body_bytes`` (never below it)."""
        return BodyLimits(
            body_bytes=self.max_body_bytes,
            json_depth=self.max_json_depth,
            streamed=tuple((method, re.compile(path), limit) for method, path, limit in streamed),
            larger=tuple(
                (method, re.compile(path), max(limit, self.max_body_bytes)) for method, path, limit in larger
            ),
        )

    def database_budget(self) -> DatabaseBudget:
        """The connections this process may open to its database, and how (see Database.open)."""
        from coffer_kit.db.engine import DatabaseBudget

        return DatabaseBudget(
            pool=self.database_pool_size,
            reads=self.database_read_connections,
            writes=self.database_write_connections,
            pooler=self.database_pooler,
        )

    def internal_secret(self) -> str:
        """The internal token's value (the validator has set it by now)."""
        assert self.internal_token is not None
        return self.internal_token.get_secret_value()

    def sqlite_url(self, name: str) -> str:
        """Default database URL of the embedded stack: a SQLite file in the data dir."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{(self.data_dir / name).resolve()}"
