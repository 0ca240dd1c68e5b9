"""Rendering: Jinja2 (autoescaped) through jinja2-fragments, filters, hash-versioned static files."""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import Response

if TYPE_CHECKING:  # imported with the first page rendered (Renderer.templates)
    from jinja2_fragments.fastapi import Jinja2Blocks

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"


@dataclass(frozen=True, slots=True)
class StaticFile:
    body: bytes
    media_type: str


def load_static() -> tuple[dict[str, StaticFile], dict[str, str]]:
    """Every static file under a name that carries its content hash, so it may be cached forever.

    Answers (files by served name, served name by source name). The vendored htmx already
    carries its version in its name and keeps it, since its hash is checked as it is.
    """
    files: dict[str, StaticFile] = {}
    names: dict[str, str] = {}
    for path in sorted(STATIC_DIR.rglob("*")):
        if not path.is_file():
            continue
        source = path.relative_to(STATIC_DIR).as_posix()
        body = path.read_bytes()
        if source.startswith("vendor/"):
            served = source
        else:
            stem, dot, ext = source.rpartition(".")
            served = f"{stem}.{hashlib.sha256(body).hexdigest()[:12]}{dot}{ext}"
        media_type = mimetypes.guess_type(source)[0] or "application/octet-stream"
        if media_type.startswith("text/") or media_type.endswith("javascript"):
            media_type += "; charset=utf-8"
        files[served] = StaticFile(body, media_type)
        names[source] = served
    return files, names


def as_datetime(value: datetime | str | None) -> datetime | None:
    """A time from auth (datetime) or from the public API's resources (ISO text with ``Z``)."""
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None
    return value


def relative_time(value: datetime | str | None, now: datetime | None = None) -> str:
    """ "3 min ago", "in 12 d"; "" for None."""
    value = as_datetime(value)
    if value is None:
        return ""
    now = now or datetime.now(UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    seconds = (value - now).total_seconds()
    future = seconds > 0
    span = abs(seconds)
    if span < 45:
        return "in a few seconds" if future else "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if span >= size * 0.95 or unit == "min":
            count = max(1, round(span / size))
            return f"in {count} {unit}" if future else f"{count} {unit} ago"
    return ""  # not reached


def iso(value: datetime | str | None) -> str:
    value = as_datetime(value)
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def plural(noun: str, count: int) -> str:
    """``{{ 'file' | plural(n) }}``: "file" for one, "files" otherwise."""
    return noun if count == 1 else noun + "s"


def binary_size(value: int | None) -> str:
    """Bytes in binary units: 1.5 MiB, 10 GiB, 512 B."""
    if value is None:
        return ""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            if unit == "B":
                return f"{int(size)} B"
            text = f"{size:.1f}".removesuffix(".0")
            return f"{text} {unit}"
        size /= 1024
    return f"{value} B"  # not reached


def percent(used: int, quota: int) -> int:
    """Share of the quota in use, in whole percent (100 when the quota is 0)."""
    if quota <= 0:
        return 100
    return min(100, int(used * 100 // quota))


def percent_label(used: int, quota: int) -> str:
    """The share as shown: "< 1" for a little use, rather than a misleading 0."""
    share = percent(used, quota)
    return "< 1" if share == 0 and used > 0 else str(share)


class Renderer:
    """Templates and the static files, made once per app."""

    def __init__(self, *, globals_: dict[str, Any]) -> None:
        self.static_files, self.static_names = load_static()
        self._globals = globals_

    @cached_property
    def templates(self) -> Jinja2Blocks:
        """The template environment, made on the first page: Jinja2 (with jinja2-fragments and
        MarkupSafe) is RSS that an edge whose dashboard is never opened (an API-only use) does
        not need. The first page of a process pays for the import, once; later pages are
        unchanged (bench/results/journal.md, "Issue 16, round 4: idle RSS")."""
        from jinja2_fragments.fastapi import Jinja2Blocks

        templates = Jinja2Blocks(directory=str(HERE / "templates"))
        env = templates.env
        env.autoescape = True
        env.trim_blocks = True
        env.lstrip_blocks = True
        env.filters["ago"] = relative_time
        env.filters["iso"] = iso
        env.filters["size"] = binary_size
        env.filters["plural"] = plural
        env.globals["percent"] = percent
        env.globals["percent_label"] = percent_label
        env.globals["static"] = self.static_url
        env.globals.update(self._globals)
        return templates

    def static_url(self, name: str) -> str:
        return f"/dashboard/static/{self.static_names[name]}"

    def page(
        self,
        request: Request,
        template: str,
        context: dict[str, Any] | None = None,
        *,
        status: int = 200,
        block: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """The whole page, or only ``block`` when htmx asks (``HX-Request``) and one is named."""
        wanted = block if block and request.headers.get("hx-request") == "true" else None
        ctx = {"request": request, **(context or {})}
        if wanted:
            return self.templates.TemplateResponse(
                request, template, ctx, status_code=status, headers=headers, block_name=wanted
            )
        return self.templates.TemplateResponse(request, template, ctx, status_code=status, headers=headers)

    def text(self, template: str, context: dict[str, Any]) -> str:
        """A template rendered outside a request (the cross-origin refusal)."""
        return self.templates.env.get_template(template).render(**context)
