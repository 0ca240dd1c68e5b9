"""Profiles: the URL, key and organization ``coffer configure`` stores, one section per profile in
``<user config dir>/coffer/config.ini`` (permissions 0600, directory 0700)."""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT = "default"


def config_file() -> Path:
    import platformdirs  # only when a profile is read or written, not for ``coffer --help``

    return platformdirs.user_config_path("coffer") / "config.ini"


@dataclass(frozen=True)
class Profile:
    url: str | None = None
    api_key: str | None = None
    organization_id: str | None = None

    def __repr__(self) -> str:  # never the key
        return f"Profile(url={self.url!r}, organization_id={self.organization_id!r})"


def _read(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    if path.exists():
        parser.read(path, encoding="utf-8")
    return parser


def load(name: str = DEFAULT, path: Path | None = None) -> Profile:
    """The named profile, or an empty one when there is none."""
    parser = _read(path or config_file())
    if not parser.has_section(name):
        return Profile()
    s = parser[name]
    return Profile(s.get("url") or None, s.get("api_key") or None, s.get("organization_id") or None)


def save(name: str, profile: Profile, path: Path | None = None) -> Path:
    """Write the profile, keeping the others; the file is created 0600 before any secret is in it."""
    path = path or config_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    parser = _read(path)
    parser[name] = {
        "url": profile.url or "",
        "api_key": profile.api_key or "",
        "organization_id": profile.organization_id or "",
    }
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file existed with wider permissions
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        parser.write(fh)
    os.replace(tmp, path)
    return path
