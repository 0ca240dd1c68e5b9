"""The file browser: folders (create, rename, move, delete), uploads, a tag filter across the
organization, and one page per asset (preview, public and signed URLs, rename, move, delete,
its metadata and tags).

Everything goes through edge's own clients: metadata for folders and assets, blob for the
bytes and signed URLs, auth for the session and the audit log. Uploads run the public API's
upload protocol (``routers.assets.counted_upload``) with the session's organization and quota.
Changes to files and folders reach the audit log as metadata's events (coffer_edge.audit_relay)
like the API's; only what changes nothing in metadata (a signed URL) is recorded here.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Message

from coffer_edge.dashboard.placeholders import placeholder_url
from coffer_edge.dashboard.render import binary_size
from coffer_edge.dashboard.routes.orgs import render
from coffer_edge.dashboard.security import PREFIX
from coffer_edge.dashboard.web import (
    CsrfRefused,
    OrgVisitDep,
    Visit,
    accounts_of,
    field,
    metadata_of,
    posted,
    redirect,
    safe_next,
    state_of,
)
from coffer_edge.deps import edge_state
from coffer_edge.routers.assets import (
    UploadScope,
    counted_upload,
    delete_stored_asset,
    refuse_unscanned,
    update_stored_asset,
)
from coffer_edge.routers.tus import TUS_PATH
from coffer_edge.routers.uploads import new_token, token_hash
from coffer_edge.trash import trash_asset
from coffer_kit.contract import describe, transforms
from coffer_kit.contract.errors import CofferError, file_too_large, invalid, not_found
from coffer_kit.contract.limits import MAX_FILE_BYTES
from coffer_kit.contract.resources import Asset, AssetList, Folder, FolderList, FolderWithPath
from coffer_kit.contract.wire import Ingest, TransformFields, UploadTokenIn

log = logging.getLogger("coffer.edge.dashboard")
router = APIRouter(prefix=PREFIX, include_in_schema=False)

PAGE_SIZE = 50
# The tag filter's field: ten tags and their separators. What is longer is refused as too many
# tags or a bad one.
TAG_FILTER_CHARS = describe.MAX_TAG_FILTERS * (describe.MAX_TAG_CHARS + 2)
# Files above this go through tus (CONTRACT §9) from the page's script: resumable after a
# dropped connection or a reload. Smaller ones keep the one-request upload.
RESUMABLE_ABOVE = 8 * 1024 * 1024
# How long the page has to create its upload with the token it asked for (it does at once).
RESUMABLE_TOKEN_SECONDS = 600
# Previews and downloads use signed URLs this short: the page never outlives them by much.
PREVIEW_SECONDS = 300
TEXT_PREVIEW_BYTES = 64 * 1024
MAX_EXPIRES_IN = 604_800
EXPIRY_CHOICES = (("300", "5 minutes"), ("3600", "1 hour"), ("86400", "1 day"), ("604800", "7 days"))
# The folder picker walks the tree level by level; an organization with more folders than this
# gets the first ones (by depth, then name) and a note.
MAX_PICKER_FOLDERS = 1000
_LOOKUPS = 8  # concurrent metadata calls of one page
_ID = re.compile(r"^(?:fld|ast)_[0-9A-Za-z]{1,60}$")
_ASSET_REF = re.compile(r"ast_[0-9A-Za-z]{10,60}")
TEXT_TYPES = ("application/json", "application/xml", "application/x-ndjson", "application/javascript")
CYCLE = "A folder cannot move into itself or one of its subfolders."
# The folder page lists files as a table or as a grid of thumbnails; the choice is kept in a
# cookie of its own for a year (a display preference: no secret, nothing to authorize).
VIEWS = ("table", "grid")
VIEW_COOKIE_SECONDS = 365 * 86400
# What the CDN makes thumbnails of (CONTRACT §10: JPEG, PNG, WebP, AVIF, GIF, TIFF; never SVG).
# A file whose bytes are not what its type says gets a 415 there, and the page's script shows
# the type icon instead of a broken image.
THUMBNAIL_TYPES = frozenset(
    ("image/jpeg", "image/png", "image/webp", "image/avif", "image/gif", "image/tiff")
)
THUMB_PRESET = "thumb"  # 256x256, cover, webp
THUMB_SIDE = 256
PREVIEW_PRESET = "medium"  # 1280 wide
FIT_CHOICES = (
    ("cover", "Cover: fill the box, cropping"),
    ("contain", "Contain: all of it, padded to the box"),
    ("inside", "Inside: all of it, within the box"),
)
FORMAT_CHOICES = (
    ("", "As the original"),
    ("webp", "WebP"),
    ("avif", "AVIF"),
    ("jpeg", "JPEG"),
    ("png", "PNG"),
    ("auto", "Best the browser takes"),
)
PRESET_LABELS = (
    ("thumb", "256 × 256 WebP"),
    ("small", "640 wide"),
    ("medium", "1280 wide"),
    ("large", "1920 wide"),
)
FORMAT_NAMES = dict(FORMAT_CHOICES[1:])


def _check_id(value: str, prefix: str) -> str:
    """An id from the URL, refused as 404 unless it has the shape of one."""
    if not _ID.fullmatch(value) or not value.startswith(prefix):
        raise not_found("No such folder or file.")
    return value


def _rid(visit: Visit) -> str:
    return visit.caller.request_id or ""


def _files_url(org_id: str, folder_id: str | None = None, **query: str) -> str:
    params = {"folder": folder_id or "", **query}
    text = urlencode({k: v for k, v in params.items() if v})
    return f"{PREFIX}/o/{org_id}/files" + (f"?{text}" if text else "")


def view_cookie_name(request: Request) -> str:
    """``__Host-`` like the session cookie wherever browsers keep a Secure cookie."""
    return "__Host-coffer_files_view" if state_of(request).cookie.secure else "coffer_files_view"


def chosen_view(request: Request) -> str:
    value = request.cookies.get(view_cookie_name(request), "")
    return value if value in VIEWS else "table"


def has_thumbnail(asset: Asset) -> bool:
    return asset.mimeType.split(";", 1)[0].strip().lower() in THUMBNAIL_TYPES


def thumbnail_url(asset: Asset) -> str | None:
    """The public thumbnail of an image asset, or None (private, or not an image the CDN reads)."""
    if not has_thumbnail(asset) or not asset.publicUrl:
        return None
    return f"{asset.publicUrl}?preset={THUMB_PRESET}"


async def _audit(
    visit: Visit, action: str, target_type: str, target_id: str, label: str, **details: Any
) -> None:
    """Record a file-browser action that changes nothing in metadata (whose changes reach the
    audit log as its events); the action already happened, so a failure is logged, not shown."""
    try:
        await accounts_of(visit.request).record(
            visit.caller,
            visit.org.id,
            action,
            target_type=target_type,
            target_id=target_id,
            target_label=label,
            details=details or None,
        )
    except CofferError as exc:
        log.warning(
            "audit event not recorded",
            extra={"action": action, "target_id": target_id, "error": exc.code, "request_id": _rid(visit)},
        )


# Folders and the tree ---------------------------------------------------------------------


async def _children(visit: Visit, parent_id: str | None) -> list[Folder]:
    body = await metadata_of(visit.request).list_folders(visit.org.id, parent_id, request_id=_rid(visit))
    return FolderList.model_validate_json(body).folders


def _unknown(exc: CofferError) -> CofferError:
    """Another organization's folder or asset is "not found" here, as an org one is not a member
    of (metadata says 403: the dashboard gives no existence oracle)."""
    return not_found("No such folder or file.") if exc.status == 403 else exc


async def _folder(visit: Visit, folder_id: str) -> FolderWithPath:
    _check_id(folder_id, "fld_")
    try:
        return await metadata_of(visit.request).get_folder(visit.org.id, folder_id, request_id=_rid(visit))
    except CofferError as exc:
        raise _unknown(exc) from None


@dataclass(frozen=True, slots=True)
class TreeEntry:
    folder: Folder
    depth: int


async def _tree(
    visit: Visit, root: str | None, limit: int = MAX_PICKER_FOLDERS
) -> tuple[list[TreeEntry], bool]:
    """The folders under ``root`` (None: the whole organization) in tree order, and whether the
    walk stopped at ``limit``. One metadata call per folder, a few at a time."""
    gate = asyncio.Semaphore(_LOOKUPS)

    async def children(parent: str | None) -> list[Folder]:
        async with gate:
            return await _children(visit, parent)

    kids: dict[str | None, list[Folder]] = {root: await children(root)}
    level = list(kids[root])
    seen = len(level)
    truncated = False
    while level:
        if seen >= limit:
            truncated = True
            break
        found = await asyncio.gather(*(children(f.id) for f in level))
        next_level: list[Folder] = []
        for parent, below in zip(level, found, strict=True):
            kids[parent.id] = below
            next_level.extend(below)
            seen += len(below)
        level = next_level
    ordered: list[TreeEntry] = []
    # Tree order, with a stack of its own (a call per level reached Python's recursion limit at
    # about 960 deep: a 500 on every move page of the organization).
    stack = [(f, 0) for f in reversed(kids.get(root, []))]
    while stack and len(ordered) < limit:
        f, depth = stack.pop()
        ordered.append(TreeEntry(f, depth))
        stack.extend((child, depth + 1) for child in reversed(kids.get(f.id, [])))
    return ordered, truncated or seen > limit


# The folder page --------------------------------------------------------------------------


def _page_number(raw: str | None) -> int:
    try:
        page = int(raw or "1")
    except ValueError:
        return 1
    return max(1, min(page, 1_000_000))


async def _files_page(
    visit: Visit,
    *,
    folder_id: str | None,
    page: int = 1,
    q: str = "",
    tag: str = "",
    meta: str = "",
    status: int = 200,
    error: str | None = None,
    notice: str | None = None,
    new_folder_name: str = "",
) -> Response:
    request = visit.request
    metadata = metadata_of(request)
    rid = _rid(visit)
    params: dict[str, Any] = {"limit": PAGE_SIZE, "offset": (page - 1) * PAGE_SIZE}
    if tag:
        # The whole organization, each asset with its folder path and every tag given:
        # GET /api/assets?tag=…&tag=…&tagMatch=all&recursive=true.
        try:
            tags = _filter_tags(tag)
        except CofferError as exc:
            status, error, tag = 400, exc.message, ""
        else:
            tag = ", ".join(tags)  # only separators: no filter
            if tags:
                folder_id = None
                params.update({"tag": tags, "tagMatch": "all", "recursive": "true"})
    if meta:
        # ``key=value``: GET /api/assets?meta[key]=value&recursive=true, the whole organization.
        key, sep, value = meta.partition("=")
        try:
            if not sep:
                raise invalid("Write a metadata filter as key=value.", field="meta")
            describe.meta_filter_value(key.strip(), value.strip())
        except CofferError as exc:
            status, error, meta = 400, exc.message, ""
        else:
            folder_id = None
            params.update({f"meta[{key.strip()}]": value.strip(), "recursive": "true"})
    if q:
        params["q"] = q  # the whole organization, every folder
    if not q and not tag and not meta:
        params["folderId"] = folder_id or ""
    folder: FolderWithPath | None = None
    if folder_id:
        folder = await _folder(visit, folder_id)
    across = bool(q or tag or meta)  # a listing of the whole organization: no subfolders, no upload
    listing_body, subfolders, stored = await asyncio.gather(
        metadata.list_assets(visit.org.id, params, request_id=rid),
        _children(visit, folder_id) if not across else _none(),
        metadata.usage(visit.org.id, request_id=rid),
    )
    listing = AssetList.model_validate_json(listing_body)
    listed = listing.total or 0  # an offset page always has its total
    pages = max(1, -(-listed // PAGE_SIZE))
    view = chosen_view(request)
    thumbs = await _thumbnails(visit, listing.assets) if view == "grid" else {}
    placeholders = {a.id: url for a in listing.assets if a.id in thumbs and (url := placeholder_url(a))}
    return render(
        visit,
        "files.html",
        status,
        block="listing",
        title=folder.name if folder else "Files",
        section="files",
        folder=folder,
        subfolders=subfolders or [],
        assets=listing.assets,
        total=listed,
        page=page,
        pages=pages,
        q=q,
        tag=tag,
        tag_filter_chars=TAG_FILTER_CHARS,
        meta=meta,
        used=stored.used_bytes,
        asset_count=stored.asset_count,
        error=error,
        notice=notice,
        new_folder_name=new_folder_name,
        max_file_bytes=MAX_FILE_BYTES,
        resumable_above=RESUMABLE_ABOVE,
        page_url=lambda n: _files_url(
            visit.org.id, folder_id, q=q, tag=tag, meta=meta, page=str(n) if n > 1 else ""
        ),
        here=_files_url(visit.org.id, folder_id, q=q, tag=tag, meta=meta, page=str(page) if page > 1 else ""),
        view=view,
        views=VIEWS,
        thumbs=thumbs,
        placeholders=placeholders,
        thumb_side=THUMB_SIDE,
    )


def _filter_tags(text: str) -> list[str]:
    """The tag filter's tags, separated by commas or spaces (a tag has neither), each checked as
    a tag and at most as many as ``GET /api/assets`` takes; repeats are dropped."""
    tags = list(dict.fromkeys(text.replace(",", " ").split()))
    if len(tags) > describe.MAX_TAG_FILTERS:
        raise invalid(f"Filter by at most {describe.MAX_TAG_FILTERS} tags.", field="tag")
    return [describe.check_tag(t, i) for i, t in enumerate(tags)]


async def _thumbnails(visit: Visit, assets: list[Asset]) -> dict[str, str]:
    """Thumbnail URLs by asset id, for the images of a grid page: the public URL's thumb preset,
    or for a private image a signed URL of it, as short-lived as the asset page's preview."""
    urls = {a.id: url for a in assets if (url := thumbnail_url(a))}
    private = [a for a in assets if a.id not in urls and has_thumbnail(a)]
    if private:
        blob, gate = state_of(visit.request).blob, asyncio.Semaphore(_LOOKUPS)

        async def sign(asset: Asset) -> str:
            async with gate:
                return await blob.sign(
                    asset.key,
                    PREVIEW_SECONDS,
                    request_id=_rid(visit),
                    preset=THUMB_PRESET,
                    by=visit.authority,
                )

        signed = await asyncio.gather(*(sign(a) for a in private))
        urls.update(zip((a.id for a in private), signed, strict=True))
    return urls


async def _none() -> list[Folder]:
    return []


@router.get("/o/{org_id}/files")
async def files(
    visit: OrgVisitDep,
    folder: str = "",
    page: str = "1",
    q: str = "",
    tag: str = "",
    meta: str = "",
    done: str = "",
) -> Response:
    q = q.strip()[:255]
    tag = tag.strip()[:TAG_FILTER_CHARS]
    notice = {
        "folder-deleted": "The folder was deleted; the files that were in it are now at the root.",
        "asset-deleted": "The file was deleted. Its URLs answer 404 from now on.",
        "uploaded": "The file was uploaded.",
    }.get(done)
    return await _files_page(
        visit, folder_id=folder or None, page=_page_number(page), q=q, tag=tag, meta=meta[:330], notice=notice
    )


@router.post("/o/{org_id}/files/view")
async def choose_view(request: Request, visit: OrgVisitDep) -> Response:
    """Table or grid: kept in a cookie, then back to the folder page the choice was made on."""
    form = await posted(request, visit)
    view = field(form, "view", limit=16)
    back = safe_next(field(form, "back", limit=2048))
    listing = f"{PREFIX}/o/{visit.org.id}/files"
    if not back or (back != listing and not back.startswith(listing + "?")):
        back = _files_url(visit.org.id)
    response = redirect(back)
    if view in VIEWS:
        secure = state_of(request).cookie.secure
        response.set_cookie(
            view_cookie_name(request),
            view,
            max_age=VIEW_COOKIE_SECONDS,
            path="/",
            secure=secure,
            httponly=True,
            samesite="lax",
        )
    return response


@router.get("/o/{org_id}/files/open")
async def open_ref(visit: OrgVisitDep, ref: str = "") -> Response:
    """ "Open by id, key or URL": an asset id anywhere in what was pasted."""
    found = _ASSET_REF.search(ref[:2048])
    if not found:
        return await _files_page(
            visit, folder_id=None, status=400, error="Paste an asset id (ast_…), its key or one of its URLs."
        )
    return redirect(f"{PREFIX}/o/{visit.org.id}/files/{found.group(0)}")


def _folder_error(exc: CofferError) -> str | None:
    """What the files page says about a refused folder change; None when it deserves a page."""
    if exc.status == 403:
        raise _unknown(exc) from None
    if exc.code == "folder_cycle":
        return CYCLE
    if exc.status in (400, 409):
        return exc.message
    return None


@router.post("/o/{org_id}/files/folders")
async def create_folder(request: Request, visit: OrgVisitDep) -> Response:
    form = await posted(request, visit)
    parent = field(form, "parent", limit=128) or None
    name = field(form, "name", limit=2048)
    if parent:
        _check_id(parent, "fld_")
    try:
        made = await metadata_of(request).create_folder(visit.org.id, name, parent, request_id=_rid(visit))
    except CofferError as exc:
        message = _folder_error(exc)
        if message is None:
            raise
        return await _files_page(
            visit, folder_id=parent, status=exc.status, error=message, new_folder_name=name
        )
    return redirect(_files_url(visit.org.id, made.id))


@router.post("/o/{org_id}/files/folders/{folder_id}/rename")
async def rename_folder(request: Request, visit: OrgVisitDep, folder_id: str) -> Response:
    form = await posted(request, visit)
    _check_id(folder_id, "fld_")
    name = field(form, "name", limit=2048)
    try:
        await metadata_of(request).update_folder(
            visit.org.id, folder_id, {"name": name}, request_id=_rid(visit)
        )
    except CofferError as exc:
        message = _folder_error(exc)
        if message is None:
            raise
        return await _files_page(visit, folder_id=folder_id, status=exc.status, error=message)
    return redirect(_files_url(visit.org.id, folder_id))


async def _move_page(
    visit: Visit,
    *,
    folder: FolderWithPath | None = None,
    asset: Asset | None = None,
    status: int = 200,
    error: str | None = None,
) -> Response:
    entries, truncated = await _tree(visit, None)
    current = folder.parentId if folder else (asset.folderId if asset else None)
    return render(
        visit,
        "move.html",
        status,
        title="Move " + (folder.name if folder else asset.name if asset else ""),
        section="files",
        folder=folder,
        asset=asset,
        entries=entries,
        truncated=truncated,
        current_parent=current,
        error=error,
    )


@router.get("/o/{org_id}/files/folders/{folder_id}/move")
async def move_folder_page(visit: OrgVisitDep, folder_id: str) -> Response:
    return await _move_page(visit, folder=await _folder(visit, folder_id))


def _destination(value: str) -> str | None:
    """The picker's value: "" is the root, else a folder id."""
    if not value:
        return None
    return _check_id(value, "fld_")


@router.post("/o/{org_id}/files/folders/{folder_id}/move")
async def move_folder(request: Request, visit: OrgVisitDep, folder_id: str) -> Response:
    form = await posted(request, visit)
    _check_id(folder_id, "fld_")
    target = _destination(field(form, "parent", limit=128))
    try:
        await metadata_of(request).update_folder(
            visit.org.id, folder_id, {"parentId": target}, request_id=_rid(visit)
        )
    except CofferError as exc:
        message = _folder_error(exc)
        if message is None:
            raise
        return await _move_page(
            visit, folder=await _folder(visit, folder_id), status=exc.status, error=message
        )
    return redirect(_files_url(visit.org.id, folder_id))


@router.get("/o/{org_id}/files/folders/{folder_id}/delete")
async def delete_folder_page(visit: OrgVisitDep, folder_id: str) -> Response:
    folder = await _folder(visit, folder_id)
    counts = await metadata_of(visit.request).subtree_counts(visit.org.id, folder_id, request_id=_rid(visit))
    subfolders, assets = counts.folders, counts.assets
    return render(
        visit,
        "folder_delete.html",
        title="Delete folder",
        section="files",
        folder=folder,
        subfolders=subfolders,
        assets=assets,
    )


@router.post("/o/{org_id}/files/folders/{folder_id}/delete")
async def delete_folder(request: Request, visit: OrgVisitDep, folder_id: str) -> Response:
    await posted(request, visit)
    folder = await _folder(visit, folder_id)
    await metadata_of(request).delete_folder(visit.org.id, folder_id, request_id=_rid(visit))
    parent = folder.path[-2].id if len(folder.path) > 1 else None
    return redirect(_files_url(visit.org.id, parent, done="folder-deleted"))


# Uploads ----------------------------------------------------------------------------------

# The no-JavaScript form sends its CSRF token as the first multipart part; it is read from
# the head of the body, at most this much, and the whole body is then relayed as it came.
_CSRF_HEAD_LIMIT = 64 * 1024


async def _csrf_from_body(request: Request) -> tuple[str, Request]:
    """The ``csrf_token`` of a multipart body's first part, and a request that replays the body."""
    content_type = request.headers.get("content-type", "")
    boundary = re.search(r'boundary="?([^";]+)"?', content_type)
    if not boundary:
        raise CsrfRefused
    delimiter = b"--" + boundary.group(1).encode("latin-1")
    messages: list[Message] = []
    head = b""
    token: str | None = None
    while token is None:
        message = await request.receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        head += message.get("body", b"")
        token = _first_part_token(head, delimiter)
        if token is None and (len(head) > _CSRF_HEAD_LIMIT or not message.get("more_body", False)):
            break
    if token is None:
        raise CsrfRefused
    pending = list(messages)
    original = request.receive

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await original()

    return token, Request(request.scope, replay)


def _first_part_token(head: bytes, delimiter: bytes) -> str | None:
    """The value of the first part when it is ``csrf_token`` and complete; "" when it is not one."""
    start = delimiter + b"\r\n"
    if len(head) < len(start):
        return None
    if not head.startswith(start):
        return ""
    headers_end = head.find(b"\r\n\r\n", len(start))
    if headers_end < 0:
        return None
    headers = head[len(start) : headers_end].decode("latin-1").lower()
    if 'name="csrf_token"' not in headers:
        return ""
    value_end = head.find(b"\r\n" + delimiter, headers_end + 4)
    if value_end < 0:
        return None
    return head[headers_end + 4 : value_end].decode("latin-1")


def _quota_message(exc: CofferError) -> str:
    details = exc.details or {}
    used, quota, needed = (int(details.get(k) or 0) for k in ("usedBytes", "quotaBytes", "requestedBytes"))
    return (
        f"Not enough space: uses {binary_size(used)} of {binary_size(quota)}, "
        f"this file needs {binary_size(needed)}."
    )


def _upload_message(exc: CofferError) -> str:
    if exc.code == "quota_exceeded":
        return _quota_message(exc)
    if exc.code == "file_too_large":
        return "This file is larger than 100 MiB, the most one upload may hold."
    if exc.status in (403, 404):
        return "The folder no longer exists."
    if exc.status == 503:
        return "Coffer is temporarily unavailable. Try again in a moment."
    if exc.code == "rate_limited":
        return f"Too many uploads at once. Try again in {(exc.headers or {}).get('Retry-After', '1')} s."
    return exc.message


async def _upload_target(visit: Visit, folder_id: str) -> None:
    """The folder an upload goes to is the organization's (another's reads as none, _unknown)."""
    try:
        await metadata_of(visit.request).check_upload_target(
            visit.org.id, folder_id, None, request_id=_rid(visit)
        )
    except CofferError as exc:
        raise _unknown(exc) from None


@router.post("/o/{org_id}/files/upload")
async def upload(request: Request, visit: OrgVisitDep, folder: str = "") -> Response:
    """One file: from the page's script (XHR, ``X-CSRF-Token``, answers JSON) or from the plain
    form (CSRF token as the first part, answers a redirect or an error page)."""
    sent = request.headers.get("x-csrf-token")
    scripted = sent is not None
    if scripted:
        body_request = request
    else:
        sent, body_request = await _csrf_from_body(request)
    if not sent or not secrets.compare_digest(sent.encode(), visit.csrf.encode()):
        raise CsrfRefused
    folder_id = _check_id(folder, "fld_") if folder else None
    rid = _rid(visit)
    state = state_of(request)
    try:
        await state.rate_limiter.check(f"user:{visit.current.user.id}")
        if folder_id:
            await _upload_target(visit, folder_id)
        scope = UploadScope(
            organization_id=visit.org.id,
            quota_bytes=visit.org.quota_bytes,
            folder_id=folder_id,
            fixed_folder=True,
            visibility=visit.org.default_visibility,
            ingest=Ingest(
                mode=visit.org.ingest_mode, allowed_types=visit.org.allowed_types, scan=visit.org.scan_mode
            ),
        )
        asset = await counted_upload(body_request, scope, state.metadata, state.blob, rid)
    except CofferError as exc:
        message = _upload_message(exc)
        if not scripted:
            if exc.status >= 500:
                raise  # the 503 page (with Retry-After) or the 500 page
            return render(
                visit,
                "error.html",
                exc.status,
                title="The upload did not work",
                message=message,
                request_id=rid,
                usage_link=exc.code == "quota_exceeded",
            )
        envelope: dict[str, Any] = {"code": exc.code, "message": message, "requestId": rid}
        if exc.details:
            envelope["details"] = exc.details
        return JSONResponse({"error": envelope}, status_code=exc.status, headers=exc.headers)
    page = f"{PREFIX}/o/{visit.org.id}/files/{asset.id}"
    if not scripted:
        return redirect(_files_url(visit.org.id, folder_id, done="uploaded"))
    return JSONResponse(
        {"asset": asset.model_dump(), "page": page, "size": binary_size(asset.size)}, status_code=201
    )


@router.post("/o/{org_id}/files/resumable")
async def resumable(request: Request, visit: OrgVisitDep, size: int, folder: str = "") -> JSONResponse:
    """Where the page's script creates a resumable upload of one file of ``size`` bytes into
    ``folder``: the tus endpoint with an upload token for it (§8), which the creation spends;
    the upload's own URL then carries its capability, so no later request needs the session.
    Script only (``X-CSRF-Token``); the same permission, folder check and rate limit as the
    one-request upload."""
    sent = request.headers.get("x-csrf-token")
    if not sent or not secrets.compare_digest(sent.encode(), visit.csrf.encode()):
        raise CsrfRefused
    folder_id = _check_id(folder, "fld_") if folder else None
    rid = _rid(visit)
    state = state_of(request)
    try:
        if size > MAX_FILE_BYTES:
            raise file_too_large(MAX_FILE_BYTES)
        if size < 1:
            raise invalid("size must be positive.", field="size")
        await state.rate_limiter.check(f"user:{visit.current.user.id}")
        if folder_id:
            await _upload_target(visit, folder_id)
        token = new_token()
        scope = UploadTokenIn(
            token_hash=token_hash(token),
            user_id=visit.current.user.id,  # its uploads' capabilities end when the user leaves,
            session_id=visit.current.session.id,  # or this session ends (signed out, expired)
            folder_id=folder_id,
            max_bytes=size,
            expires_in=RESUMABLE_TOKEN_SECONDS,
        )
        await edge_state(request).upload_tokens.create(visit.org.id, scope, request_id=rid)
    except CofferError as exc:
        envelope = {"code": exc.code, "message": _upload_message(exc), "requestId": rid}
        return JSONResponse({"error": envelope}, status_code=exc.status, headers=exc.headers)
    return JSONResponse({"endpoint": f"{TUS_PATH}?token={token}"})


# The asset page ---------------------------------------------------------------------------


async def _asset(visit: Visit, asset_id: str) -> Asset:
    _check_id(asset_id, "ast_")
    try:
        return await metadata_of(visit.request).get_asset(visit.org.id, asset_id, request_id=_rid(visit))
    except CofferError as exc:
        raise _unknown(exc) from None


def preview_kind(mime_type: str) -> str:
    """How the asset page previews a type: image, video, audio, text, or none (an icon)."""
    major = mime_type.split("/", 1)[0]
    if major in ("image", "video", "audio", "text"):
        return major
    if mime_type in TEXT_TYPES or mime_type.endswith(("+json", "+xml")):
        return "text"
    return "none"


async def _asset_page(
    visit: Visit,
    asset: Asset,
    *,
    status: int = 200,
    error: str | None = None,
    notice: str | None = None,
    signed: dict[str, Any] | None = None,
    signed_error: str | None = None,
    block: str | None = None,
    expiry: str = "3600",
    custom: str = "",
    transformed: dict[str, Any] | None = None,
    transformed_error: str | None = None,
    tx: dict[str, str] | None = None,
    described_error: str | None = None,
    described: dict[str, str] | None = None,
) -> Response:
    state = state_of(visit.request)
    kind = preview_kind(asset.mimeType)
    resizable = has_thumbnail(asset)
    preview_url = None
    folder = None
    tasks: list[Any] = []
    if kind != "none":
        preset = PREVIEW_PRESET if resizable else None
        tasks.append(
            state.blob.sign(
                asset.key, PREVIEW_SECONDS, request_id=_rid(visit), preset=preset, by=visit.authority
            )
        )
    if asset.folderId:
        tasks.append(_folder(visit, asset.folderId))
    found = await asyncio.gather(*tasks)
    if kind != "none":
        preview_url = found.pop(0)
    if asset.folderId:
        folder = found.pop(0)
    return render(
        visit,
        "asset.html",
        status,
        block=block,
        title=asset.name,
        section="files",
        asset=asset,
        folder=folder,
        kind=kind,
        preview_url=preview_url,
        text_bytes=TEXT_PREVIEW_BYTES,
        error=error,
        notice=notice,
        signed=signed,
        signed_error=signed_error,
        expiry_choices=EXPIRY_CHOICES,
        expiry=expiry,
        custom=custom,
        resizable=resizable,
        transformed=transformed,
        transformed_error=transformed_error,
        tx={"w": "", "h": "", "fit": "cover", "fmt": "", "q": "", "expiry": "3600", **(tx or {})},
        fit_choices=FIT_CHOICES,
        format_choices=FORMAT_CHOICES,
        presets=PRESET_LABELS,
        max_side=transforms.MAX_SIDE,
        described_error=described_error,
        described={"key": "", "value": "", "type": "text", "tags": "", **(described or {})},
        value_types=VALUE_TYPES,
        max_tags=describe.MAX_TAGS,
        max_keys=describe.MAX_KEYS,
    )


@router.get("/o/{org_id}/files/{asset_id}")
async def asset_page(visit: OrgVisitDep, asset_id: str, done: str = "") -> Response:
    notice = {
        "renamed": "The file was renamed.",
        "moved": "The file was moved.",
        "private": "The file is private: only signed URLs reach it now.",
        "public": "The file is public: anyone with its public URL can read it.",
        "metadata-set": "The metadata is saved.",
        "metadata-deleted": "The metadata key is deleted.",
        "tags-added": "The tags are added.",
        "tag-removed": "The tag is removed.",
    }.get(done)
    return await _asset_page(visit, await _asset(visit, asset_id), notice=notice)


def _expires_in(choice: str, custom: str) -> int:
    raw = custom.strip() if choice == "custom" else choice
    if choice != "custom" and choice not in dict(EXPIRY_CHOICES):
        raise invalid("Choose an expiry from the list.")
    try:
        seconds = int(raw)
    except ValueError:
        raise invalid(f"The expiry is whole seconds from 1 to {MAX_EXPIRES_IN:,}.") from None
    if not 1 <= seconds <= MAX_EXPIRES_IN:
        raise invalid(f"The expiry is whole seconds from 1 to {MAX_EXPIRES_IN:,}.")
    return seconds


@router.post("/o/{org_id}/files/{asset_id}/signed-url")
async def signed_url(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    choice = field(form, "expiry", limit=16)
    custom = field(form, "custom", limit=32)
    try:
        refuse_unscanned(asset, visit.org.scan_mode)  # as GET /api/assets/:id/url (issue 48)
        seconds = _expires_in(choice, custom)
    except CofferError as exc:
        return await _asset_page(
            visit,
            asset,
            status=exc.status,
            signed_error=exc.message,
            block="signed",
            expiry=choice,
            custom=custom,
        )
    url = await state_of(request).blob.sign(asset.key, seconds, request_id=_rid(visit), by=visit.authority)
    await _audit(visit, "signed_url.created", "asset", asset.id, asset.name, expiresIn=seconds)
    signed = {"url": url, "expires_at": datetime.now(UTC) + timedelta(seconds=seconds), "seconds": seconds}
    return await _asset_page(visit, asset, signed=signed, block="signed", expiry=choice, custom=custom)


def _box(transform: transforms.Transform) -> tuple[int, int] | None:
    """The output's shape when both sides are given and filled (cover, contain), else None."""
    if transform.w and transform.h and transform.fit != "inside":
        return transform.w, transform.h
    return None


def _summary(transform: transforms.Transform) -> str:
    """ "300 × 200, cover, PNG, quality 80": what a resized URL serves, in words."""
    if transform.w and transform.h:
        size = f"{transform.w} × {transform.h}, {transform.fit}"
    elif transform.w:
        size = f"{transform.w} wide"
    elif transform.h:
        size = f"{transform.h} high"
    else:
        size = "the original size"
    fmt = FORMAT_NAMES.get(transform.fmt or "", "the original format")
    return f"{size}, {fmt}, quality {transform.q} (never enlarged)"


@router.post("/o/{org_id}/files/{asset_id}/transformed-url")
async def transformed_url(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    """A signed URL of a resized copy (CONTRACT §10): the signature covers the transform."""
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    tx = {name: field(form, name, limit=16).strip() for name in ("w", "h", "fit", "fmt", "q", "expiry")}
    if not has_thumbnail(asset):  # the page offers no such form: a forged or stale request
        message = f"{asset.mimeType} cannot be resized: only JPEG, PNG, WebP, AVIF, GIF and TIFF images."
        return await _asset_page(visit, asset, status=400, error=message)
    try:
        refuse_unscanned(asset, visit.org.scan_mode)
        seconds = _expires_in(tx["expiry"], "")
        query = {k: v for k in transforms.FREE_PARAMS if (v := tx[k])}
        if not (query.get("w") or query.get("h") or query.get("fmt")):
            raise invalid("Give a width, a height or a format.", field="w")
        transform = transforms.parse_free(query)
    except CofferError as exc:
        return await _asset_page(
            visit, asset, status=exc.status, transformed_error=exc.message, block="transformed", tx=tx
        )
    state = state_of(request)
    fields = TransformFields.model_validate(transform.fields())
    url = await state.blob.sign(
        asset.key, seconds, request_id=_rid(visit), transform=fields, by=visit.authority
    )
    await _audit(
        visit, "signed_url.created", "asset", asset.id, asset.name, expiresIn=seconds, transform=query
    )
    transformed = {
        "url": url,
        "expires_at": datetime.now(UTC) + timedelta(seconds=seconds),
        "summary": _summary(transform),
        # The box, when both sides are given and filled exactly (cover, contain).
        "box": _box(transform),
    }
    return await _asset_page(visit, asset, transformed=transformed, block="transformed", tx=tx)


@router.get("/o/{org_id}/files/{asset_id}/download")
async def download(visit: OrgVisitDep, asset_id: str) -> Response:
    """A fresh 5-minute signed URL, so the link on a page left open still works."""
    asset = await _asset(visit, asset_id)
    refuse_unscanned(asset, visit.org.scan_mode)
    url = await state_of(visit.request).blob.sign(
        asset.key, PREVIEW_SECONDS, request_id=_rid(visit), by=visit.authority
    )
    return redirect(url)


@router.post("/o/{org_id}/files/{asset_id}/rename")
async def rename_asset(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    name = field(form, "name", limit=2048)
    try:
        await metadata_of(request).update_asset(
            visit.org.id, asset.id, {"name": name}, request_id=_rid(visit)
        )
    except CofferError as exc:
        if exc.status != 400:
            raise
        return await _asset_page(visit, asset, status=400, error=exc.message)
    return redirect(f"{PREFIX}/o/{visit.org.id}/files/{asset.id}?done=renamed")


@router.post("/o/{org_id}/files/{asset_id}/visibility")
async def change_visibility(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    """CONTRACT §12: make the file private or public, as PATCH /api/assets/:id does."""
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    visibility = field(form, "visibility", limit=16)
    if visibility not in ("public", "private"):
        return await _asset_page(visit, asset, status=400, error="Choose public or private.")
    state = state_of(request)
    await update_stored_asset(
        visit.org.id, asset.id, {"visibility": visibility}, state.metadata, state.blob, _rid(visit)
    )
    return redirect(f"{PREFIX}/o/{visit.org.id}/files/{asset.id}?done={visibility}")


# Metadata and tags (issue 50) -------------------------------------------------------------

# What the asset page's "Set" form writes a metadata value as: the form sends text.
VALUE_TYPES = (("text", "Text"), ("number", "Number"), ("boolean", "true / false"))


def form_value(text: str, kind: str) -> str | int | float | bool:
    """A metadata value from the form: the text, or the number or boolean it writes (as JSON
    writes them). The bounds are metadata's (describe.merge_metadata)."""
    if kind == "text":
        return text
    if kind == "boolean":
        if text.strip().lower() not in ("true", "false"):
            raise invalid("A true / false value is true or false.", field="value")
        return text.strip().lower() == "true"
    if kind == "number":
        raw = text.strip()
        try:
            return int(raw)
        except ValueError:
            pass
        try:
            return float(raw)
        except ValueError:
            raise invalid(f"{raw!r} is not a number (write 3, -1.5 or 2e6).", field="value") from None
    raise invalid("Choose a type from the list.", field="type")


async def _describe(visit: Visit, asset: Asset, changes: dict[str, Any]) -> None:
    """Change the asset's metadata or tags as PATCH /api/assets/:id does: metadata merges and
    checks them (describe.merge_metadata, apply_tags), writes ``asset.updated`` with the
    session's user as its actor (coffer_edge.actor), or refuses with 400 and changes nothing."""
    state = state_of(visit.request)
    await update_stored_asset(visit.org.id, asset.id, changes, state.metadata, state.blob, _rid(visit))


async def _described(
    visit: Visit, asset: Asset, changes: dict[str, Any], done: str, form: dict[str, str]
) -> Response:
    """The change made and the page again, or the page with metadata's 400 and the form as sent."""
    try:
        await _describe(visit, asset, changes)
    except CofferError as exc:
        if exc.status != 400:
            raise
        return await _asset_page(visit, asset, status=400, described_error=exc.message, described=form)
    return redirect(f"{PREFIX}/o/{visit.org.id}/files/{asset.id}?done={done}#description")


@router.post("/o/{org_id}/files/{asset_id}/metadata")
async def set_metadata(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    """Set one metadata key (a new one, or a new value)."""
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    sent = {
        "key": field(form, "key", limit=256).strip(),
        "value": field(form, "value", limit=4 * describe.MAX_VALUE_CHARS),
        "type": field(form, "type", limit=16),
    }
    try:
        value = form_value(sent["value"], sent["type"])
    except CofferError as exc:
        return await _asset_page(visit, asset, status=400, described_error=exc.message, described=sent)
    return await _described(visit, asset, {"metadata": {sent["key"]: value}}, "metadata-set", sent)


@router.post("/o/{org_id}/files/{asset_id}/metadata/delete")
async def delete_metadata(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    """Delete one metadata key (null in a PATCH's metadata)."""
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    key = field(form, "key", limit=256)
    return await _described(visit, asset, {"metadata": {key: None}}, "metadata-deleted", {})


@router.post("/o/{org_id}/files/{asset_id}/tags")
async def add_tags(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    """Add tags, comma-separated as an upload's ``tags`` field takes them."""
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    text = field(form, "tags", limit=4096)
    try:
        tags = describe.parse_tags_field(text)
        if not tags:
            raise invalid("Write a tag.", field="tags")
    except CofferError as exc:
        return await _asset_page(
            visit, asset, status=400, described_error=exc.message, described={"tags": text}
        )
    return await _described(visit, asset, {"tags": {"add": tags}}, "tags-added", {"tags": text})


@router.post("/o/{org_id}/files/{asset_id}/tags/remove")
async def remove_tag(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    tag = field(form, "tag", limit=256)
    return await _described(visit, asset, {"tags": {"remove": [tag]}}, "tag-removed", {})


@router.get("/o/{org_id}/files/{asset_id}/move")
async def move_asset_page(visit: OrgVisitDep, asset_id: str) -> Response:
    return await _move_page(visit, asset=await _asset(visit, asset_id))


@router.post("/o/{org_id}/files/{asset_id}/move")
async def move_asset(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    form = await posted(request, visit)
    asset = await _asset(visit, asset_id)
    target = _destination(field(form, "parent", limit=128))
    try:
        await metadata_of(request).update_asset(
            visit.org.id, asset.id, {"folderId": target}, request_id=_rid(visit)
        )
    except CofferError as exc:
        raise _unknown(exc) from None  # another organization's folder: as one that does not exist
    return redirect(f"{PREFIX}/o/{visit.org.id}/files/{asset.id}?done=moved")


@router.get("/o/{org_id}/files/{asset_id}/delete")
async def delete_asset_page(visit: OrgVisitDep, asset_id: str) -> Response:
    asset = await _asset(visit, asset_id)
    return render(visit, "asset_delete.html", title="Delete file", section="files", asset=asset)


@router.post("/o/{org_id}/files/{asset_id}/delete")
async def delete_asset(request: Request, visit: OrgVisitDep, asset_id: str) -> Response:
    await posted(request, visit)
    asset = await _asset(visit, asset_id)
    state = state_of(request)
    rid = _rid(visit)
    if visit.org.trash_retention_days > 0:
        # Issue 47: to the trash, bounded by the organization's quota.
        await trash_asset(
            visit.org.id,
            asset.id,
            retention_days=visit.org.trash_retention_days,
            limit_bytes=visit.org.quota_bytes,
            metadata=state.metadata,
            blob=state.blob,
            rid=rid,
        )
    else:
        await delete_stored_asset(visit.org.id, asset.id, state.metadata, state.blob, rid)
    return redirect(_files_url(visit.org.id, asset.folderId, done="asset-deleted"))
