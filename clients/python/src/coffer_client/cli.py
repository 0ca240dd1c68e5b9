"""``coffer``: the command line, on the SDK. Folders by path (``/photos/2024``), assets by id or by
``/folder/path/name``. Exit codes: 0 ok, 1 failure, 2 bad usage, 3 not found, 4 authentication."""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import itertools
import json
import math
import os
import re
import stat
import sys
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, NoReturn, TypeVar, cast, get_args

import typer
from typer.core import TyperGroup

from coffer_client import errors, profiles
from coffer_client._options import CHUNK, RetryPolicy
from coffer_client._progress import counted, human, transfers, visible
from coffer_client.paths import join_path, split_path
from coffer_client.transforms import MAX_QUALITY, MAX_SIDE, MIN_QUALITY, Fit, Format, Transform

# --fit and --format are checked here, not typed as Literal: typer reads Literal types only from
# a newer release than the oldest the client admits (the lowest-direct install test runs it).
FITS: tuple[str, ...] = get_args(Fit)
FORMATS: tuple[str, ...] = get_args(Format)


def _fit_and_format(fit: str | None, fmt: str | None) -> tuple[Fit | None, Format | None]:
    """--fit and --format as the transform takes them; a usage error for any other value."""
    if fit is not None and fit not in FITS:
        usage_error(f"--fit must be one of {', '.join(FITS)}")
    if fmt is not None and fmt not in FORMATS:
        usage_error(f"--format must be one of {', '.join(FORMATS)}")
    return cast("Fit | None", fit), cast("Format | None", fmt)


# The SDK (httpx, pydantic, tenacity) and rich load when a command needs them, not at start:
# ``coffer --help`` and ``--version`` stay quick, and ``-q`` never loads rich (docs/client.md).
if TYPE_CHECKING:
    from rich.console import Console

    from coffer_client._sync import Coffer
    from coffer_client.models import Asset, Folder, TrashedAsset

OK, FAILURE, USAGE, NOT_FOUND, AUTH = 0, 1, 2, 3, 4
F = TypeVar("F", bound=Callable[..., Any])


def exit_code(exc: BaseException) -> int:
    if isinstance(exc, errors.Unauthorized | errors.Forbidden | errors.OrganizationRequired):
        return AUTH
    if isinstance(exc, errors.ConfigurationError):
        return AUTH
    if isinstance(exc, errors.NotFound):
        return NOT_FOUND
    if isinstance(exc, errors.BadRequest):
        return USAGE  # the service refused what was typed (a bad name, an out-of-range duration)
    return FAILURE


def escape(text: str) -> str:
    """``text`` shown as it is by rich, whatever brackets or control characters it holds."""
    from rich.markup import escape as rich_escape

    return rich_escape(visible(text))


def print(*values: object, **kwargs: Any) -> None:
    """``builtins.print``, with the control characters of every text written out (``visible``):
    names and messages come from the service, and an escape sequence in one would act on the
    terminal (retitle it, clear it, hide the lines before). JSON escapes them itself."""
    builtins.print(*(visible(v) if isinstance(v, str) else v for v in values), **kwargs)


# DEL and the C1 controls: json.dumps(ensure_ascii=False) writes them as they are, and a terminal
# acts on them (U+009B begins a sequence as ESC [ does). Escaped as \u00XX, they stay JSON.
_RAW_IN_JSON = re.compile("[\x7f-\x9f]")


def json_text(value: Any) -> str:
    """``value`` as JSON on one line: non-ASCII text as it is, every control character escaped
    the JSON way."""
    text = json.dumps(value, ensure_ascii=False)
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def print_json(value: Any) -> None:
    """``value`` as one line of JSON on stdout (``json_text``); never through ``print`` above,
    whose ``\x85`` is no JSON escape."""
    builtins.print(json_text(value))


def error_json(exc: errors.CofferError) -> dict[str, Any]:
    return {"status": exc.status, "code": exc.code, "message": exc.message, "requestId": exc.request_id}


def handled(fn: F) -> F:
    """Turn a CofferError into one line on stderr (and a JSON object on stdout with ``--json``)
    and its exit code, instead of a traceback."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except errors.CofferError as exc:
            fail(exc, bool(kwargs.get("as_json")))
        except BrokenPipeError:
            reader_gone()
        except KeyboardInterrupt:
            interrupted()
        except (ValueError, KeyError, TypeError) as exc:  # an answer no Coffer gives (a portal's HTML page)
            answer = errors.CofferError(
                f"The service's answer is not Coffer's: {unexpected(exc)}", code="bad_response"
            )
            fail(answer, bool(kwargs.get("as_json")))
        except OSError as exc:  # a local file: unreadable, a directory in the way, a full disk
            local = errors.CofferError(
                f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "), code="local"
            )
            fail(local, bool(kwargs.get("as_json")))

    return run  # type: ignore[return-value]


def unexpected(exc: Exception) -> str:
    """What was wrong with an answer, in one short line: a pydantic error by its count and first
    failure (its repr holds every failure, each with its input), anything else by its repr."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        from coffer_client._base import invalid

        return invalid(exc)
    return repr(exc)[:300]


def interrupted() -> NoReturn:
    """Ctrl-C: stop now, exit 130 (128 + SIGINT), as a shell's own commands do. Threads still
    in a request (an upload's files, side by side) are not waited for: one could wait out its
    timeout and retries against a silent server. What is kept across runs (the resumable
    uploads' URLs, the profiles) is written whole or not at all, so nothing is left half done;
    a resumed upload continues where the service stopped."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    print("coffer: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def reader_gone() -> NoReturn:
    """Whoever read stdout has gone (``coffer ls | head``): stop without a word, as ``ls`` does,
    rather than report a broken pipe. Exit 1: what was asked was not all printed. stdout now
    points at /dev/null, so nothing written later (Python's own flush at exit) fails again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise typer.Exit(FAILURE)


def fail(exc: errors.CofferError, as_json: bool) -> NoReturn:
    if as_json:
        print_json({"error": error_json(exc)})
    detail = f" [{exc.code}" + (f", request {exc.request_id}" if exc.request_id else "") + "]"
    if isinstance(exc, errors.ConfigurationError | errors.TransportError) or exc.code == "local":
        detail = ""
    first = exc.message.splitlines()[0] if exc.message else type(exc).__name__
    print(f"coffer: {first}{detail}", file=sys.stderr)
    raise typer.Exit(exit_code(exc))


# click's exceptions, wherever this typer keeps them (its own copy of click from 0.26, click before).
ClickException: Any = sys.modules[typer.BadParameter.__module__].ClickException


class CommandLine(TyperGroup):
    """The root command: with ``--json``, a usage error (an unknown option, a missing argument, a
    value out of range) is a JSON document on stdout too, as every other error is; stderr and
    the exit code (2) stay click's."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        run = functools.partial(
            super().main, argv, prog_name, complete_var, False, windows_expand_args, **extra
        )
        if not standalone_mode:
            return run()
        try:
            code = run()
        except ClickException as exc:
            options = argv[: argv.index("--")] if "--" in argv else argv
            if "--json" in options:
                usage = {"status": None, "code": "usage", "message": exc.format_message(), "requestId": None}
                print_json({"error": usage})
            exc.show()
            code = exc.exit_code
        except typer.Abort:
            print("Aborted!", file=sys.stderr)
            code = FAILURE
        sys.exit(code if isinstance(code, int) else OK)


app = typer.Typer(
    cls=CommandLine,
    help="Coffer from the command line: folders by path (/photos/2024), assets by id or /folder/path/name.",
    no_args_is_help=True,
    rich_markup_mode=None,
    # Locals in a traceback could show the API key: never print them.
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@dataclass
class State:
    profile: str = profiles.DEFAULT
    url: str | None = None
    organization_id: str | None = None
    timeout: float = 60.0
    retries: int = 4
    _client: Coffer | None = field(default=None, repr=False)

    def client(self, connections: int = 32) -> Coffer:
        if self._client is None:
            from coffer_client._sync import Coffer

            p = profiles.load(self.profile)
            self._client = Coffer(
                self.url or os.environ.get("COFFER_URL") or p.url,
                os.environ.get("COFFER_API_KEY") or p.api_key,
                self.organization_id or os.environ.get("COFFER_ORGANIZATION_ID") or p.organization_id,
                timeout=self.timeout,
                retry=RetryPolicy(attempts=self.retries + 1),
                max_connections=max(connections, 8),
            )
            from coffer_client.__main__ import started

            started()
        return self._client


def state(ctx: typer.Context) -> State:
    obj = ctx.find_root().obj
    assert isinstance(obj, State)
    return obj


def show_version(value: bool) -> None:
    """``--version`` among other options (``coffer --version`` alone never gets here: __main__.py)."""
    if value:
        from coffer_client.__main__ import version_line

        print(version_line())
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    profile: Annotated[
        str,
        typer.Option(
            "--profile",
            "-P",
            envvar="COFFER_PROFILE",
            metavar="NAME",
            help="Profile from `coffer configure`.",
        ),
    ] = profiles.DEFAULT,
    url: Annotated[
        str | None,
        typer.Option("--url", metavar="URL", help="Service URL (else COFFER_URL, else the profile)."),
    ] = None,
    org: Annotated[
        str | None,
        typer.Option(
            "--org", metavar="ORG_ID", help="Organization id, for a user key in several organizations."
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", help="Seconds per network operation.")
    ] = 60.0,
    retries: Annotated[
        int,
        typer.Option(
            "--retries", min=0, max=20, metavar="N", help="Retries on 429, 503, safe connection failures."
        ),
    ] = 4,
    version: Annotated[  # noqa: ARG001 - handled by its callback
        bool,
        typer.Option(
            "--version", "-V", callback=show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """The API key comes from COFFER_API_KEY or the profile, never from the command line (it would
    show in the process list and the shell history)."""
    ctx.obj = State(profile=profile, url=url, organization_id=org, timeout=timeout, retries=retries)
    ctx.call_on_close(lambda: ctx.obj._client.close() if ctx.obj._client else None)


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars and no messages.")]
JobsOpt = Annotated[
    int, typer.Option("--jobs", "-j", min=1, max=64, metavar="N", help="Files transferred at once.")
]


# emoji=False: rich writes ``:warning:`` as ⚠, and a name holding it is not shown as it is.
def out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, emoji=False)


def err() -> Console:
    """stderr: the messages, and the console the progress bars draw on."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, emoji=False)


def plain(value: Any) -> Any:
    """``value`` with its models as the service writes them (JSON's types)."""
    from coffer_client.models import Model

    if isinstance(value, Model):
        return value.model_dump(mode="json", by_alias=True, exclude_none=False)
    if isinstance(value, list):
        return [plain(x) for x in value]
    if isinstance(value, dict):
        return {k: plain(x) for k, x in value.items()}
    return value


def dump(value: Any) -> None:
    print_json(plain(value))


def dump_listing(folders: list[Folder], assets: Iterable[Asset]) -> None:
    """``dump({"folders": folders, "assets": assets})``, the same line, written as the pages of
    ``assets`` come rather than held whole."""
    head = json_text({"folders": plain(folders), "assets": []})
    sys.stdout.write(head.removesuffix("]}"))
    try:
        for n, asset in enumerate(assets):
            sys.stdout.write((", " if n else "") + json_text(plain(asset)))
    except BaseException:
        sys.stdout.write("\n")  # the unfinished document's line ends; the error's follows
        raise
    sys.stdout.write("]}\n")


def usage_error(message: str) -> NoReturn:
    raise typer.BadParameter(message)


# --- ls, mkdir, rmdir --------------------------------------------------------------------------


# The most assets ``ls -r`` holds at once: it sorts the listing by path, so holds it whole (1.8
# KiB an asset: 100,000 are ~180 MiB). Without ``-r``, ``ls`` writes each page as it comes, as
# lines or (``--json``) as the one document's pieces, and holds none.
MAX_HELD = 100_000


def held(assets: Iterable[Asset]) -> list[Asset]:
    """``assets`` as a list, or ``too_many`` once there are more than MAX_HELD."""
    kept: list[Asset] = []
    for a in assets:
        if len(kept) == MAX_HELD:
            raise errors.CofferError(
                f"More than {MAX_HELD:,} assets to list: ls -r sorts the listing by path, so holds"
                " it whole, and at most that many; list a folder further down, or without -r.",
                code="too_many",
            )
        kept.append(a)
    return kept


@app.command()
@handled
def ls(
    ctx: typer.Context,
    folder: Annotated[str, typer.Argument(metavar="FOLDER_PATH", help="Folder path.")] = "/",
    tag: Annotated[
        list[str] | None, typer.Option("--tag", metavar="TAG", help="Only assets with this tag (repeatable).")
    ] = None,
    recursive: Annotated[
        bool, typer.Option("--recursive", "-r", help="Every asset below the folder, with its folder path.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """List a folder: its folders, then its assets, with sizes, dates and visibility."""
    c = state(ctx).client()
    f = c.resolve_folder(folder)
    folders = [] if recursive or tag else c.list_folders(f.id if f else None)
    where = (f.id if f else None) if recursive else (f.id if f else "")
    assets: Iterable[Asset] = c.list_assets(where, sort="name", tags=tag or (), recursive=recursive)
    if recursive:  # the name as a path below the root, in the order of the paths, as find(1)
        assets = sorted(
            held(
                a.model_copy(update={"name": "/".join([p["name"] for p in a.folder_path or []] + [a.name])})
                for a in assets
            ),
            key=lambda a: a.name,
        )
    if as_json:
        if recursive:
            dump({"folders": folders, "assets": assets})
        else:
            dump_listing(folders, assets)
        return
    # Dates in the local time zone, as ls(1) writes them (--json keeps the service's UTC).
    rows = itertools.chain(
        ((d.name + "/", "-", d.created_at.astimezone(), d.id, "-") for d in folders),
        ((a.name, human(a.size), a.created_at.astimezone(), a.id, a.visibility) for a in assets),
    )
    console = out()
    if not console.is_terminal:
        # Piped: one tab-separated line per entry, never cut to a terminal's width, written as
        # the pages come (a listing without end was held whole, and nothing written).
        for name, size, created, ident, visibility in rows:
            print(f"{name}\t{size}\t{created:%Y-%m-%d %H:%M}\t{ident}\t{visibility}")
        return
    from rich.table import Table

    t = Table(box=None, show_header=True, header_style="bold", pad_edge=False)
    columns = (
        ("name", "left"),
        ("size", "right"),
        ("created", "left"),
        ("id", "left"),
        ("visibility", "left"),
    )
    for col, just in columns:
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for name, size, created, ident, visibility in rows:
        t.add_row(escape(name), size, f"{created:%Y-%m-%d %H:%M}", escape(ident), escape(visibility))
    console.print(t)


@app.command()
@handled
def mkdir(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(metavar="FOLDER_PATH", help="Folder path to create.")],
    parents: Annotated[
        bool, typer.Option("--parents", "-p", help="Create missing parents; no error if it exists.")
    ] = False,
    expires: Annotated[
        str | None,
        typer.Option(
            "--expires",
            metavar="DURATION",
            help="Files uploaded into it later expire after this long, in whole days: 30d.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a folder."""
    if not split_path(path):
        usage_error("the root folder always exists")
    days = None
    if expires is not None:
        seconds = parse_duration(expires)
        if seconds <= 0 or seconds % 86400:
            raise typer.BadParameter(f"{expires!r} is not a whole number of days (e.g. 30d)")
        days = seconds // 86400
    f = state(ctx).client().make_folders(path, parents=parents, expiry_days=days)
    assert f is not None
    if as_json:
        dump(f)
    else:
        out().print(f"{escape(join_path(path))}\t{escape(f.id)}")


@app.command()
@handled
def rmdir(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(metavar="FOLDER_PATH", help="Folder path.")],
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Delete a folder and its subfolders; the assets in them move to the root."""
    c = state(ctx).client()
    f = c.resolve_folder(path)
    if f is None:
        usage_error("the root folder cannot be deleted")
    c.delete_folder(f.id)
    if as_json:
        dump({"deleted": f.id})
    elif not quiet:
        err().print(f"deleted {escape(join_path(path))} (its assets are now at the root)")


# --- transfers ---------------------------------------------------------------------------------


@dataclass
class Job:
    path: Path
    folder: str  # destination folder path
    name: str
    size: int
    replace: list[str] = field(default_factory=list)  # assets this upload supersedes (sync)
    # (st_dev, st_ino) of the regular file a directory's scan found: the file opened to be
    # sent must be that one, never a link put in its place since. None: a file named on the
    # command line, whose link is followed as cp follows it.
    scanned: tuple[int, int] | None = None


@dataclass
class Outcome:
    job: Job
    asset: Asset | None = None
    error: errors.CofferError | None = None


def run_uploads(
    c: Coffer,
    jobs: list[Job],
    folder_ids: dict[str, str | None],
    *,
    parallel: int,
    show: bool,
    visibility: str | None = None,
    expires_at: datetime | None = None,
) -> list[Outcome]:
    """Upload every job, ``parallel`` at once, with bars; failures are collected, not raised."""
    total = sum(j.size for j in jobs)
    with transfers(err, enabled=show, total_bytes=total, files=len(jobs)) as bars:

        def one(job: Job) -> Outcome:
            update, finish = bars.file(job.name, job.size)
            try:
                options: dict[str, Any] = {
                    "name": job.name,
                    "folder_id": folder_ids[job.folder],
                    "progress": update,
                    "visibility": visibility,
                }
                # (An expiry goes with the one-request upload, whatever the size.)
                with open_local(job.path, job.scanned) as fh:
                    if job.size > resumable_above() and expires_at is None:
                        asset = upload_resumably(c, job.path, fh, options)
                    else:
                        asset = c.upload(fh, filename=job.name, expires_at=expires_at, **options)
                for old in job.replace:
                    c.delete_asset(old)
            except errors.CofferError as exc:
                finish(False)
                return Outcome(job, error=exc)
            except OSError as exc:
                finish(False)
                return Outcome(
                    job, error=errors.CofferError(f"{job.path}: {exc.strerror or exc}", code="local")
                )
            finish(True)
            return Outcome(job, asset=asset)

        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=parallel)
        try:
            return list(pool.map(one, jobs))
        finally:  # (Ctrl-C: the files not begun are dropped, and nothing waits for those that were)
            pool.shutdown(wait=False, cancel_futures=True)


def resumable_above() -> int:
    from coffer_client._tus import RESUMABLE_ABOVE

    return RESUMABLE_ABOVE


def upload_resumably(c: Coffer, path: Path, fh: BinaryIO, options: dict[str, Any]) -> Asset:
    """A large file (``path``, open as ``fh``) through tus: the upload's URL is kept in the cache
    directory until it completes, so the same command run again after an interruption continues it."""
    from coffer_client._tus import Resumes

    resumes = Resumes()
    target = {name: options.get(name) for name in ("name", "folder_id", "visibility")}
    key = Resumes.key(c.base_url, c.organization_id, path, target)
    try:
        asset = c.upload_resumable(
            fh,
            filename=options["name"],
            upload_url=resumes.get(key),
            on_created=lambda url: resumes.put(key, url),
            **options,
        )
    except errors.CofferError as exc:
        if exc.code == "file_changed":  # (its copy is deleted: the next run starts anew)
            resumes.put(key, None)
        raise
    resumes.put(key, None)
    return asset


def report(
    outcomes: list[Outcome],
    *,
    as_json: bool,
    quiet: bool,
    started: float,
    extra: dict[str, Any],
    also: str = "",
) -> None:
    """What was uploaded: the JSON document, or a line per file (up to 50) on stdout and one
    summary on stderr, ``also`` appended to it; then each failure, and the exit code."""
    done = [o for o in outcomes if o.asset]
    failed = [o for o in outcomes if o.error]
    if as_json:
        dump(
            {
                "uploaded": [o.asset for o in done],
                "failed": [
                    {"path": str(o.job.path), "error": error_json(o.error)} for o in failed if o.error
                ],
                **extra,
            }
        )
    elif not quiet:
        console = out()
        if len(done) <= 50:
            for o in done:
                assert o.asset
                where = escape(join_path(o.job.folder, o.asset.name))
                console.print(f"{where}\t{human(o.asset.size)}\t{escape(o.asset.id)}")
        if outcomes:
            total = sum(o.asset.size for o in done if o.asset)
            seconds = time.monotonic() - started
            rate = f" ({human(total / seconds)}/s)" if seconds > 0 else ""
            summary = f"uploaded {counted(len(done), 'file')}, {human(total)} in {seconds:.1f} s{rate}"
        else:
            summary = "nothing to upload"
        err().print(summary + also)
    for o in failed:
        assert o.error
        print(f"coffer: {o.job.path}: {o.error.message.splitlines()[0]} [{o.error.code}]", file=sys.stderr)
    if failed:
        first = failed[0].error
        assert first
        raise typer.Exit(exit_code(first))


def nfc(name: str) -> str:
    """A local name as the service keeps names (NFC): macOS writes them decomposed (NFD), and
    "café.txt" must meet its remote copy, not be uploaded again beside it on every sync."""
    return unicodedata.normalize("NFC", name)


def ensure_folders(
    c: Coffer, base: Folder | None, base_path: str, rel_dirs: set[str]
) -> dict[str, str | None]:
    """Folder ids by path for the destination and every relative directory below it (created)."""
    ids: dict[str, str | None] = {join_path(base_path): base.id if base else None}
    for rel in sorted(rel_dirs, key=lambda r: (r.count("/"), r)):
        path = join_path(base_path, rel)
        if path in ids:
            continue
        parent = ids[join_path(base_path, *rel.split("/")[:-1])] if "/" in rel else ids[join_path(base_path)]
        name = rel.split("/")[-1]
        existing = [f for f in c.list_folders(parent) if f.name == name]
        ids[path] = existing[0].id if existing else c.create_folder(name, parent).id
    return ids


@app.command()
@handled
def upload(
    ctx: typer.Context,
    paths: Annotated[
        list[Path], typer.Argument(metavar="PATH", help="Files, or directories with -r.", exists=True)
    ],
    to: Annotated[
        str,
        typer.Option("--to", "-t", metavar="FOLDER_PATH", help="Destination folder path (it must exist)."),
    ] = "/",
    recursive: Annotated[
        bool, typer.Option("--recursive", "-r", help="Upload directories, recreating their folders.")
    ] = False,
    jobs: JobsOpt = 4,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
    private: Annotated[
        bool | None,
        typer.Option(
            "--private/--public",
            help="Private (signed URLs only) or public; default: the organization's default.",
        ),
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option(
            "--expires",
            metavar="DURATION",
            help="The files go to the trash by themselves after this long: 3600, 10m, 2h, 7d.",
        ),
    ] = None,
) -> None:
    """Upload files (or, with -r, directories) into a folder, several at once."""
    expires_at = None
    if expires is not None:
        expires_at = datetime.now(UTC) + timedelta(seconds=parse_duration(expires))
    started = time.monotonic()
    todo: list[Job] = []
    dirs: set[str] = set()
    for p in paths:
        if p.is_dir():
            if not recursive:
                usage_error(f"{p} is a directory (use -r)")
            top = nfc(p.resolve().name)
            dirs.add(top)
            found, skipped = tree(p)
            for f in found:
                rel = f.relative_to(p)
                if f.is_dir():
                    dirs.add(f"{top}/{nfc(rel.as_posix())}")
                else:
                    folder = join_path(to, top, *map(nfc, rel.parts[:-1]))
                    todo.append(Job(f, folder, nfc(f.name), f.lstat().st_size, scanned=identity(f)))
            warn_skipped(skipped, quiet=quiet or as_json)
        else:
            todo.append(Job(p, join_path(to), nfc(p.name), p.stat().st_size))
    c = state(ctx).client(jobs)
    base = c.resolve_folder(to)
    ids = ensure_folders(c, base, to, dirs)
    visibility = None if private is None else "private" if private else "public"
    outcomes = run_uploads(
        c, todo, ids, parallel=jobs, show=not (quiet or as_json), visibility=visibility, expires_at=expires_at
    )
    report(outcomes, as_json=as_json, quiet=quiet, started=started, extra={})


@app.command()
@handled
def download(
    ctx: typer.Context,
    asset: Annotated[str, typer.Argument(metavar="ASSET", help="Asset id or /folder/path/name.")],
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", metavar="PATH", help="File or directory to write; - for stdout."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a file of the asset's name that exists already.")
    ] = False,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Download an asset (through a short-lived signed URL)."""
    c = state(ctx).client()
    a = c.resolve_asset(asset)
    if output == "-":
        with transfers(err, enabled=not (quiet or as_json), total_bytes=a.size, files=1) as bars:
            update, finish = bars.file(a.name, a.size)
            c.download(a.id, sys.stdout.buffer, progress=update)
            finish(True)
        return
    # (The asset's name only where it names the file: with -o FILE, a name that is no file
    # name here is no obstacle, as the table of commands says.)
    target = Path(output) if output else Path(_local_name(a.name))
    if output is not None and target.is_dir():
        target = target / _local_name(a.name)
    # The name came from the service: never write over what was not named here, nor into it
    # (without -o, a directory ./logs, or a link to one, took an asset named logs inside).
    # lexists: a link counts, even to nothing; --force replaces the link, not what it names.
    if (output is None or Path(output).is_dir()) and os.path.lexists(target) and not force:
        raise errors.CofferError(f"{target} exists; give --force to replace it, or --output.", code="exists")
    with transfers(err, enabled=not (quiet or as_json), total_bytes=a.size, files=1) as bars:
        update, finish = bars.file(a.name, a.size)
        n = c.download(a.id, target, progress=update)
        finish(True)
    if as_json:
        dump({"asset": a, "path": str(target), "bytes": n})
    elif not quiet:
        err().print(f"{escape(str(target))}\t{human(n)}")


def tree(top: Path) -> tuple[list[Path], list[Path]]:
    """The directories and regular files under ``top``, sorted, and what was left out: symbolic
    links (a link to ``~/.ssh/id_rsa`` in the tree would have uploaded the key) and special files
    (a FIFO would block the upload). Symbolic links to directories are not followed either."""
    found: list[Path] = []
    skipped: list[Path] = []
    for root, dirnames, filenames in os.walk(top):  # (followlinks=False: never into a linked directory)
        here = Path(root)
        for d in dirnames:
            (skipped if (here / d).is_symlink() else found).append(here / d)
        for f in filenames:
            path = here / f
            (found if path.is_file() and not path.is_symlink() else skipped).append(path)
    return sorted(found), sorted(skipped)


def identity(path: Path) -> tuple[int, int]:
    """What a scan found at ``path`` (never following a link): the file to open later."""
    st = path.lstat()
    return st.st_dev, st.st_ino


@contextlib.contextmanager
def open_local(path: Path, scanned: tuple[int, int] | None) -> Iterator[BinaryIO]:
    """``path`` open for reading, and only if it is a regular file: size and bytes then come from
    this one descriptor. A file a scan found (``scanned``) is opened without following a link
    and must be the file it found: one swapped for a link to ``~/.ssh/id_rsa`` since the scan
    was uploaded. O_NONBLOCK: a FIFO put in its place is refused, not waited on."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_BINARY", 0)
    if scanned is not None:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and scanned is not None:
            raise errors.CofferError(
                f"{path} became a symbolic link after it was scanned: left out, as links are.", code="local"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise errors.CofferError(f"{path} is not a regular file: left out.", code="local")
        if scanned is not None and (st.st_dev, st.st_ino) != scanned:
            raise errors.CofferError(f"{path} was replaced after it was scanned: left out.", code="local")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


def warn_skipped(skipped: list[Path], *, quiet: bool) -> None:
    if skipped and not quiet:
        listed = ", ".join(str(p) for p in skipped[:5]) + (" …" if len(skipped) > 5 else "")
        print(
            f"coffer: left out {len(skipped)} symbolic link(s) or special file(s): {listed}", file=sys.stderr
        )


def _local_name(name: str) -> str:
    """The asset's name as a file name here: its last part only, so that a name the server
    sends (a hostile or intercepted one could send ``../../.bashrc`` or ``/etc/…``) never
    writes outside the directory it is meant for."""
    local = Path(name.replace("\\", "/")).name
    if local in ("", ".", "..") or visible(local) != local:
        message = f"The asset's name {name!r} is no file name; give --output."
        raise errors.CofferError(message, code="bad_name")
    return local


DURATION = re.compile(r"(\d+)([smhdw]?)")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_DURATION_SECONDS = 100 * 366 * 86400  # (beyond, a date cannot hold it)


def parse_duration(text: str) -> int:
    """``3600``, ``90s``, ``10m``, ``2h``, ``7d``, ``1h30m`` → seconds."""
    text = text.strip().lower()
    parts = DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise typer.BadParameter(f"{text!r} is not a duration (e.g. 3600, 10m, 2h, 7d)")
    seconds = sum(int(n) * UNITS[u] for n, u in parts)
    if seconds > MAX_DURATION_SECONDS:
        raise typer.BadParameter(f"{text!r} is longer than a hundred years")
    return seconds


@app.command()
@handled
def url(
    ctx: typer.Context,
    asset: Annotated[str, typer.Argument(metavar="ASSET", help="Asset id or /folder/path/name.")],
    expires: Annotated[
        str,
        typer.Option("--expires", "-e", metavar="DURATION", help="Validity: 3600, 10m, 2h, 7d (at most 7d)."),
    ] = "1h",
    public: Annotated[bool, typer.Option("--public", help="The permanent public URL instead.")] = False,
    width: Annotated[
        int | None,
        typer.Option("--width", min=1, max=MAX_SIDE, metavar="PX", help="Image: at most this wide."),
    ] = None,
    height: Annotated[
        int | None,
        typer.Option("--height", min=1, max=MAX_SIDE, metavar="PX", help="Image: at most this high."),
    ] = None,
    fit: Annotated[
        str | None,
        typer.Option(
            "--fit",
            metavar="|".join(FITS),
            help="Image, in a width x height box: crop to fill it (cover), pad to it (contain), "
            "or fit in it (inside).",
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="|".join(FORMATS),
            help="Image: re-encode (auto: the best the downloader accepts).",
        ),
    ] = None,
    quality: Annotated[
        int | None,
        typer.Option(
            "--quality", min=MIN_QUALITY, max=MAX_QUALITY, metavar="20-100", help="Image: quality (80)."
        ),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset", metavar="NAME", help="Image: a preset (thumb, small, medium, large, or your own)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a signed URL for an asset (or its public URL), optionally of a resized image.

    The image options give a URL that serves a resized, re-encoded copy. A signed URL takes any
    of them (its signature covers them); a public URL takes --preset only.
    """
    seconds = parse_duration(expires)
    transform = None
    if any(v is not None for v in (width, height, fit, fmt, quality, preset)):
        if public and preset is None:
            usage_error("a public URL takes --preset only; leave out --public for a signed URL")
        fit_, fmt_ = _fit_and_format(fit, fmt)
        try:
            transform = Transform(
                w=width,
                h=height,
                fit=fit_,
                fmt=fmt_,
                q=quality,
                preset=preset,
            )
        except ValueError as exc:
            usage_error(str(exc))
    c = state(ctx).client()
    a = c.resolve_asset(asset)
    result: dict[str, Any]
    if public:
        if a.public_url is None:
            raise errors.CofferError(
                f"{a.name} is private: it has no public URL (leave out --public for a signed one).",
                code="private",
            )
        result = {"url": c.public_url(a, preset=preset), "expiresIn": None}
    else:
        signed = c.signed_url(a.id, expires_in=seconds, transform=transform)
        result = {"url": signed.url, "expiresIn": signed.expires_in}
    if as_json:
        extra = {"transform": transform.params()} if transform else {}
        dump({**result, **extra, "asset": {"id": a.id, "name": a.name}})
    else:
        print(result["url"])


# --- presets ----------------------------------------------------------------------------------

presets_app = typer.Typer(
    help="Image transform presets: the built-in ones and the organization's own (CONTRACT §10).",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(presets_app, name="presets")


def preset_line(p: Any) -> str:
    params = Transform(w=p.w, h=p.h, fit=p.fit, fmt=p.fmt, q=p.q).params()
    kind = "built-in" if p.built_in else "own"
    return f"{p.name}\t{kind}\t" + " ".join(f"{k}={v}" for k, v in params.items())


@presets_app.command("ls")
@handled
def presets_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the presets: built in, then the organization's own, with their parameters."""
    found = state(ctx).client().transform_presets()
    if as_json:
        dump({"presets": found})
        return
    for p in found:
        print(preset_line(p))


@presets_app.command("set")
@handled
def presets_set(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="a-z, 0-9, - and _; up to 32 characters.")],
    width: Annotated[int | None, typer.Option("--width", min=1, max=MAX_SIDE, metavar="PX")] = None,
    height: Annotated[int | None, typer.Option("--height", min=1, max=MAX_SIDE, metavar="PX")] = None,
    fit: Annotated[str | None, typer.Option("--fit", metavar="|".join(FITS))] = None,
    fmt: Annotated[str | None, typer.Option("--format", metavar="|".join(FORMATS))] = None,
    quality: Annotated[
        int | None, typer.Option("--quality", min=MIN_QUALITY, max=MAX_QUALITY, metavar="20-100")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create or replace one of the organization's presets (organization keys and owners).

    It needs at least one of --width, --height, --format; then `coffer url --preset NAME` and
    public URLs with ?preset=NAME serve it.
    """
    if width is None and height is None and fmt is None:
        usage_error("give at least one of --width, --height, --format")
    fit_, fmt_ = _fit_and_format(fit, fmt)
    transform = Transform(w=width, h=height, fit=fit_, fmt=fmt_, q=quality)
    made = state(ctx).client().put_transform_preset(name, transform)
    if as_json:
        dump(made)
    else:
        print(preset_line(made))


@presets_app.command("rm")
@handled
def presets_rm(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="One of the organization's presets.")],
    as_json: JsonOpt = False,
) -> None:
    """Remove one of the organization's presets (built-in ones stay)."""
    state(ctx).client().delete_transform_preset(name)
    if as_json:
        dump({"deleted": name})


# --- keys (issue 46) -----------------------------------------------------------------------------

keys_app = typer.Typer(
    help="API keys limited to actions, a folder and networks: make, list, delete (issue 46).",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(keys_app, name="keys")


def key_line(k: Any) -> str:
    expires = k.expires_at.isoformat() if k.expires_at else "never"
    return f"{k.id}\t{k.name or '-'}\t{','.join(k.scopes)}\t{k.description}\texpires {expires}"


@keys_app.command("create")
@handled
def keys_create(
    ctx: typer.Context,
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope",
            "-s",
            metavar="SCOPE",
            help="An action (assets:read, ...) or a bundle (full, read-only, uploader); repeatable.",
        ),
    ] = None,
    folder: Annotated[
        str | None, typer.Option("--folder", metavar="FOLDER_PATH", help="Confine the key to this folder.")
    ] = None,
    network: Annotated[
        list[str] | None, typer.Option("--network", metavar="CIDR", help="Usable only from it; repeatable.")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="A name to recognise it by.")] = "",
    expires_in: Annotated[
        int | None, typer.Option("--expires-in", min=1, metavar="SECONDS", help="Lifetime.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a key that can do no more than this one; print its secret (shown only now)."""
    c = state(ctx).client()
    folder_id = None
    if folder is not None:
        found = c.resolve_folder(folder)
        if found is None:
            usage_error("--folder must name a folder, not the root")
        folder_id = found.id
    made = c.create_key(name=name, scopes=scope, folder_id=folder_id, networks=network, expires_in=expires_in)
    if as_json:
        dump(made)
        return
    print(made.key)
    err().print(escape(f"{made.api_key.id}: {made.api_key.description}. The secret is shown only this once."))


@keys_app.command("ls")
@handled
def keys_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The keys this key may manage, newest first, with what each can do."""
    found = state(ctx).client().list_keys()
    if as_json:
        dump({"keys": found})
        return
    for k in found:
        print(key_line(k))


@keys_app.command("rm")
@handled
def keys_rm(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(metavar="KEY_ID", help="The key's id (key_...).")],
    as_json: JsonOpt = False,
) -> None:
    """Delete a key: it stops working within 5 seconds."""
    state(ctx).client().delete_key(key_id)
    if as_json:
        dump({"deleted": key_id})


@keys_app.command("self")
@handled
def keys_self(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """What the key in use may do (its scopes, folder, networks, expiry)."""
    me = state(ctx).client().key_self()
    if as_json:
        dump(me)
        return
    print(f"{me.id}\t{','.join(me.scopes)}\t{me.description}")


@app.command()
@handled
def info(
    ctx: typer.Context,
    asset: Annotated[str, typer.Argument(metavar="ASSET", help="Asset id or /folder/path/name.")],
    as_json: JsonOpt = False,
) -> None:
    """Show an asset: size, declared and detected media type, malware scan, visibility."""
    a = state(ctx).client().resolve_asset(asset)
    if as_json:
        dump(a)
        return
    scan = a.scan_status or "not scanned"
    if a.scan_signature:
        scan += f" ({a.scan_signature})"
    for label, value in (
        ("id", a.id),
        ("name", a.name),
        ("size", human(a.size)),
        ("type", a.mime_type),
        ("detected", a.detected_type or "unknown"),
        ("scan", scan),
        ("visibility", a.visibility),
    ):
        print(f"{label}\t{value}")


@app.command()
@handled
def visibility(
    ctx: typer.Context,
    asset: Annotated[str, typer.Argument(metavar="ASSET", help="Asset id or /folder/path/name.")],
    to: Annotated[
        str | None,
        typer.Argument(metavar="public|private", help="The new visibility; omitted: show it."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show or change whether an asset is public (its public URL works) or private (signed URLs only)."""
    if to is not None and to not in ("public", "private"):
        usage_error(f"{to!r} is neither public nor private")
    c = state(ctx).client()
    a = c.resolve_asset(asset)
    if to is not None:
        a = c.update_asset(a.id, visibility=to)
    if as_json:
        dump(a)
    else:
        print(f"{a.visibility}\t{a.id}")


@app.command()
@handled
def mv(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="Asset (id or path) or folder path.")],
    dest: Annotated[
        str, typer.Argument(metavar="DEST", help="An existing folder to move into, or a new path (rename).")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Rename or move an asset or a folder."""
    from coffer_client.models import Folder

    c = state(ctx).client()
    thing: Asset | Folder
    if source.startswith("fld_"):
        thing = c.get_folder(source)
    elif source.startswith("ast_"):
        thing = c.get_asset(source)
    else:
        try:
            found = c.resolve_folder(source)
        except errors.NotFound:
            found = None
        if found is None and split_path(source):
            thing = c.resolve_asset(source)
        elif found is None:
            usage_error("the root folder cannot be moved")
        else:
            thing = found
    # DEST an existing folder: move into it under the same name; else its parent, renamed.
    try:
        into: Folder | None = c.resolve_folder(dest)
        new_name, into_path = None, dest
    except errors.NotFound:
        *parents, new_name = split_path(dest)
        into_path = join_path(*parents)
        into = c.resolve_folder(into_path)
    target_id = into.id if into else None
    if isinstance(thing, Folder):
        result: Asset | Folder = c.update_folder(thing.id, name=new_name, parent_id=target_id)
    else:
        result = c.update_asset(thing.id, name=new_name, folder_id=target_id)
    if as_json:
        dump(result)
    else:  # where it is now, as ls writes it
        slash = "/" if isinstance(result, Folder) else ""
        out().print(f"{escape(join_path(into_path, result.name))}{slash}\t{escape(result.id)}")


@app.command()
@handled
def tag(
    ctx: typer.Context,
    asset: Annotated[str, typer.Argument(metavar="ASSET", help="Asset id or /folder/path/name.")],
    tags: Annotated[list[str] | None, typer.Argument(metavar="TAG", help="Tags to add.")] = None,
    remove: Annotated[
        list[str] | None, typer.Option("--remove", "-d", metavar="TAG", help="A tag to remove (repeatable).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add tags to an asset (and remove others); prints its tags."""
    c = state(ctx).client()
    a = c.resolve_asset(asset)
    if tags or remove:
        a = c.update_asset(a.id, add_tags=tags or (), remove_tags=remove or ())
    if as_json:
        dump({"id": a.id, "tags": a.tags})
    else:
        print(" ".join(a.tags))


meta_app = typer.Typer(
    help="An asset's own metadata (key = string, number or boolean).", no_args_is_help=True
)
app.add_typer(meta_app, name="meta")


def _meta_value(text: str) -> object:
    """A value as typed: a JSON number or boolean stays one, anything else is a string."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        return text  # NaN, Infinity, 1e999: JSON has no such number
    return value if isinstance(value, bool | int | float) else text


@meta_app.command("set")
@handled
def meta_set(
    ctx: typer.Context,
    asset: Annotated[str, typer.Argument(metavar="ASSET", help="Asset id or /folder/path/name.")],
    pairs: Annotated[list[str], typer.Argument(metavar="KEY=VALUE", help="KEY=VALUE to set; KEY= deletes.")],
    as_json: JsonOpt = False,
) -> None:
    """Set (or, with an empty value, delete) keys of an asset's metadata; prints it."""
    changes: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            usage_error(f"{pair!r} is not KEY=VALUE.")
        changes[key] = _meta_value(value) if value else None
    c = state(ctx).client()
    a = c.update_asset(c.resolve_asset(asset).id, metadata=changes)
    dump(a.metadata) if as_json else print(json.dumps(a.metadata, ensure_ascii=False, sort_keys=True))


@app.command()
@handled
def rm(
    ctx: typer.Context,
    assets: Annotated[list[str], typer.Argument(metavar="ASSET", help="Asset ids or /folder/path/name.")],
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Delete assets (bytes and URLs go with them)."""
    c = state(ctx).client()
    deleted: list[str] = []
    failed: list[tuple[str, errors.CofferError]] = []
    for spec in assets:
        try:
            a = c.resolve_asset(spec)
            c.delete_asset(a.id)
            deleted.append(a.id)
        except errors.CofferError as problem:
            failed.append((spec, problem))
    if as_json:
        dump({"deleted": deleted, "failed": [{"asset": s, "error": error_json(e)} for s, e in failed]})
    elif not quiet:
        for i in deleted:
            err().print(f"deleted {escape(i)}")
    for spec, why in failed:
        print(f"coffer: {spec}: {why.message.splitlines()[0]} [{why.code}]", file=sys.stderr)
    if failed:
        raise typer.Exit(exit_code(failed[0][1]))


# --- sync --------------------------------------------------------------------------------------


def sha256_of(path: Path, scanned: tuple[int, int] | None) -> str:
    import hashlib

    h = hashlib.sha256()
    with open_local(path, scanned) as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


# The deepest remote folder ``sync`` walks to, below its folder: far past any tree a person
# makes, and a bound on one that never ends (it went on until RecursionError).
MAX_DEPTH = 256


def remote_tree(c: Coffer, root: Folder | None) -> tuple[dict[str, list[Asset]], dict[str, Folder]]:
    """Assets by relative path (``a/b.txt``) and folders by relative path, below ``root``; a
    tree deeper than MAX_DEPTH, or with a folder met twice (a cycle), is ``bad_response``."""
    assets: dict[str, list[Asset]] = {}
    folders: dict[str, Folder] = {}
    start = root.id if root else None
    todo: list[tuple[str | None, str, int]] = [(start, "", 0)]
    walked: set[str | None] = {start}
    while todo:
        folder_id, prefix, depth = todo.pop()
        for a in c.list_assets(folder_id if folder_id else ""):
            assets.setdefault(prefix + a.name, []).append(a)
        below = c.list_folders(folder_id)
        for f in reversed(below):  # (popped in the service's order)
            if f.id in walked or depth >= MAX_DEPTH:
                why = "a folder met twice" if f.id in walked else f"deeper than {MAX_DEPTH} folders"
                raise errors.CofferError(
                    f"The service's folder tree is not a tree ({why}).", code="bad_response"
                )
            walked.add(f.id)
            folders[prefix + f.name] = f
            todo.append((f.id, prefix + f.name + "/", depth + 1))
    return assets, folders


@app.command()
@handled
def sync(
    ctx: typer.Context,
    local_dir: Annotated[
        Path, typer.Argument(metavar="LOCAL_DIR", help="Local directory.", exists=True, file_okay=False)
    ],
    folder: Annotated[str, typer.Argument(metavar="FOLDER_PATH", help="Folder path (created if missing).")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Say what would change; change nothing.")
    ] = False,
    delete: Annotated[bool, typer.Option("--delete", help="Also delete what is not in LOCAL_DIR.")] = False,
    jobs: JobsOpt = 4,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Upload what is missing or changed (by sha256) from LOCAL_DIR into FOLDER_PATH."""
    started = time.monotonic()
    c = state(ctx).client(jobs)
    try:
        base: Folder | None = c.resolve_folder(folder)
        exists = True
    except errors.NotFound:
        base, exists = (None, False) if dry_run else (c.make_folders(folder, parents=True), True)
    remote, remote_folders = remote_tree(c, base) if exists else ({}, {})
    plan = plan_sync(local_dir, folder, remote, remote_folders, delete=delete)
    warn_skipped(plan.skipped, quiet=quiet or as_json)
    if dry_run:
        show_plan(plan, as_json=as_json)
        return
    ids = ensure_folders(c, base, folder, plan.local_dirs)
    outcomes = run_uploads(c, plan.todo, ids, parallel=jobs, show=not (quiet or as_json))
    deleted: list[str] = []
    if not any(o.error for o in outcomes):
        # Deletions only after every upload succeeded: a failed sync never loses a remote copy.
        for a in plan.stale_assets:
            c.delete_asset(a.id)
            deleted.append(a.id)
        for gone in plan.stale_folders:
            c.delete_folder(gone.id)
            deleted.append(gone.id)
    extra = {"unchanged": plan.unchanged, "deleted": deleted}
    also = f"; {plan.unchanged:,} unchanged, {counted(len(deleted), 'remote item')} deleted"
    report(outcomes, as_json=as_json, quiet=quiet, started=started, extra=extra, also=also)


@dataclass
class SyncPlan:
    todo: list[Job]
    unchanged: int
    local_dirs: set[str]
    stale_assets: list[Asset]
    stale_folders: list[Folder]
    skipped: list[Path] = field(default_factory=list)  # left out by the scan (links, FIFOs)


def plan_sync(
    local_dir: Path,
    folder: str,
    remote: dict[str, list[Asset]],
    remote_folders: dict[str, Folder],
    *,
    delete: bool,
) -> SyncPlan:
    """What to upload (missing, or no remote copy with the same sha256) and, with ``delete``,
    what to delete (remote assets without a local file, topmost remote folders without a local
    one). What the scan left out (a link, a FIFO) is not "not in LOCAL_DIR": its remote copy,
    and all below it, is kept, as rsync keeps it. Two local names that are one once normalised
    (NFC, as the service keeps names) are refused before anything changes."""
    local: dict[str, Path] = {}
    local_dirs: set[str] = set()
    found, skipped = tree(local_dir)
    by_name: dict[str, Path] = {}
    for entry in found:
        rel = nfc(entry.relative_to(local_dir).as_posix())
        if (other := by_name.setdefault(rel, entry)) is not entry:
            raise errors.CofferError(
                f"{other} and {entry} are one name remotely ({rel!r}, normalised): rename one.",
                code="name_clash",
            )
        if entry.is_dir():
            local_dirs.add(rel)
        else:
            local[rel] = entry
    kept = tuple(nfc(p.relative_to(local_dir).as_posix()) for p in skipped)

    def gone(rel: str) -> bool:
        return delete and not any(rel == k or rel.startswith(k + "/") for k in kept)

    todo: list[Job] = []
    unchanged = 0
    for rel, path in local.items():
        have = remote.get(rel, [])
        scanned = identity(path)
        if have and sha256_of(path, scanned) in {a.sha256 for a in have}:
            unchanged += 1
            continue
        *dirs, name = rel.split("/")
        size = path.lstat().st_size
        todo.append(Job(path, join_path(folder, *dirs), name, size, [a.id for a in have], scanned=scanned))
    stale_assets = [a for rel, lst in remote.items() if rel not in local and gone(rel) for a in lst]
    # Only the topmost missing folders: deleting a folder deletes its subfolders.
    stale_folders = [
        f
        for rel, f in remote_folders.items()
        if gone(rel) and rel not in local_dirs and ("/" not in rel or rel.rsplit("/", 1)[0] in local_dirs)
    ]
    return SyncPlan(todo, unchanged, local_dirs, stale_assets, stale_folders, skipped)


def show_plan(plan: SyncPlan, *, as_json: bool) -> None:
    uploads = [join_path(j.folder, j.name) for j in plan.todo]
    if as_json:
        dump(
            {
                "upload": uploads,
                "delete": [a.id for a in plan.stale_assets],
                "deleteFolders": [f.id for f in plan.stale_folders],
                "unchanged": plan.unchanged,
                "dryRun": True,
            }
        )
        return
    console = out()
    for p in uploads:
        console.print(f"upload  {escape(p)}")
    for a in plan.stale_assets:
        console.print(f"delete  {escape(a.id)}  {escape(a.name)}")
    for gone in plan.stale_folders:
        console.print(f"rmdir   {escape(gone.id)}  {escape(gone.name)}/")
    counts = f"{len(plan.todo)} to upload, {len(plan.stale_assets)} to delete, {plan.unchanged} unchanged"
    err().print(counts + " (dry run)")


# --- usage, configure --------------------------------------------------------------------------


@app.command()
@handled
def usage(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Storage used by the organization, against its quota."""
    u = state(ctx).client().usage()
    if as_json:
        dump(u)
        return
    share = 100 * u.used_bytes / u.quota_bytes if u.quota_bytes else 0.0
    used = f"{human(u.used_bytes)} of {human(u.quota_bytes)} used ({share:.1f}%)"
    out().print(f"{used}, {counted(u.asset_count, 'asset')}")


@app.command()
@handled
def configure(
    ctx: typer.Context,
    profile: Annotated[
        str | None, typer.Option("--profile", "-P", metavar="NAME", help="Profile name.")
    ] = None,
) -> None:
    """Ask for the service URL and an API key (hidden) and store them in a profile (0600)."""
    name = profile or state(ctx).profile
    current = profiles.load(name)
    url = typer.prompt("Coffer URL", default=current.url or "http://127.0.0.1:8080").strip()
    key = (
        typer.prompt(
            "API key" + (" (Enter keeps the current one)" if current.api_key else ""),
            default="" if current.api_key else None,
            hide_input=True,
            show_default=False,
        ).strip()
        or current.api_key
    )
    org = typer.prompt(
        "Organization id (only for a user key in several organizations)",
        default=current.organization_id or "",
        show_default=bool(current.organization_id),
    ).strip()
    path = profiles.save(name, profiles.Profile(url, key, org or None))
    err().print(f"saved profile {escape(name)} in {escape(str(path))}")


def main() -> None:
    app(prog_name="coffer")


# --- the trash (issue 47) ---------------------------------------------------------------------

trash_app = typer.Typer(
    help="The organization's trash: deleted files, kept for its retention (issue 47).",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(trash_app, name="trash")


# The largest offset the service serves (docs/api.md "List offset"): the trash is paged by
# offset, so this bounds what ``trash ls`` lists (and holds, with --json).
MAX_OFFSET = 100_000


def trash_pages(c: Coffer) -> Iterator[list[TrashedAsset]]:
    """The trash, page by page, each asset once; a page of only assets given before is
    ``bad_response`` (the listing does not move on), and a trash past MAX_OFFSET ``incomplete``."""
    offset, given = 0, set[str]()
    while True:
        page = c.list_trash(limit=100, offset=offset)
        new = [a for a in page.assets if a.id not in given]
        if page.assets and not new:
            raise errors.CofferError(
                "The service's listing of the trash does not move on (a page of nothing new).",
                code="bad_response",
            )
        given.update(a.id for a in new)
        yield new
        offset += len(page.assets)
        if not page.assets or offset >= page.total:
            return
        if offset > MAX_OFFSET:
            raise errors.CofferError(
                f"The trash holds more than the {MAX_OFFSET:,} entries the service lists by offset"
                f" ({page.total:,}, it says): these are the newest.",
                code="incomplete",
            )


@trash_app.command("ls")
@handled
def trash_ls(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the trash, newest deleted first: name, size, deleted, by, deleted for good, id."""
    c = state(ctx).client()
    if as_json:
        dump({"assets": [a for page in trash_pages(c) for a in page]})
        return
    for page in trash_pages(c):  # (written as the pages come)
        for a in page:
            by = a.trashed_by.get("label") or a.trashed_by.get("id") or a.trashed_by.get("type")
            print(
                f"{a.name}\t{human(a.size)}\t{a.trashed_at.astimezone():%Y-%m-%d %H:%M}\t{by}\t"
                f"{a.purge_at.astimezone():%Y-%m-%d %H:%M}\t{a.id}"
            )
        sys.stdout.flush()


@trash_app.command("restore")
@handled
def trash_restore(
    ctx: typer.Context,
    asset_ids: Annotated[list[str], typer.Argument(metavar="ASSET_ID", help="Trashed asset ids.")],
    as_json: JsonOpt = False,
) -> None:
    """Restore trashed assets: the same ids, keys and URLs, in their folders (or the root)."""
    c = state(ctx).client()
    restored = [c.restore(asset_id) for asset_id in asset_ids]
    if as_json:
        dump({"assets": restored})
        return
    for a in restored:
        print(f"{a.name}\t{a.id}")


@trash_app.command("purge")
@handled
def trash_purge(
    ctx: typer.Context,
    asset_ids: Annotated[
        list[str] | None, typer.Argument(metavar="[ASSET_ID]...", help="Trashed asset ids.")
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Empty the whole trash.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete trashed assets for good: the ones named, or with --all everything."""
    if bool(asset_ids) == everything:
        usage_error("name trashed asset ids, or give --all")
    c = state(ctx).client()
    if everything:
        purged = c.empty_trash()
    else:
        for asset_id in asset_ids or []:
            c.purge(asset_id)
        purged = len(asset_ids or [])
    if as_json:
        dump({"purged": purged})
    else:
        print(f"purged {purged}")
