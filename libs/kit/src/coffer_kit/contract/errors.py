"""The contract's error envelope and the handlers that produce it for everything."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from coffer_kit.contract.limits import MAX_FILE_BYTES

log = logging.getLogger("coffer.errors")

# Codes for statuses that the framework raises on its own (unknown route, wrong method, ...).
_STATUS_CODES = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "file_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    503: "unavailable",
}


class CofferError(Exception):
    """An error that carries its HTTP status and the contract's stable code."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers


# One constructor per code of docs/contract.md §3, each carrying its status: services raise
# these, never a CofferError with a literal status and code.


def invalid(message: str, *, field: str | None = None) -> CofferError:
    """400 ``invalid_request``, naming the offending field."""
    return CofferError(400, "invalid_request", message, details={"field": field} if field else None)


def organization_required(message: str) -> CofferError:
    """400 ``organization_required``: a user key of several organizations, no x-organization-id."""
    return CofferError(400, "organization_required", message)


def unauthorized(message: str) -> CofferError:
    """401 ``unauthorized``: no key, or a key that is unknown, deleted or expired."""
    return CofferError(401, "unauthorized", message)


def forbidden(message: str = "You do not have access to this resource.") -> CofferError:
    """403 ``forbidden``: a valid key without access to the organization or resource."""
    return CofferError(403, "forbidden", message)


# ``details.reason`` of the 403 a member meets restoring or purging a file another deleted
# (issue 47): the dashboard tells it from "another organization's" by this, not by wording.
NOT_OWN_DELETION = "not_own_deletion"


def not_own_deletion() -> CofferError:
    return CofferError(
        403,
        "forbidden",
        "Members may restore or purge only what they deleted themselves.",
        details={"reason": NOT_OWN_DELETION},
    )


def insufficient_scope(required: str, granted: Sequence[str], message: str | None = None) -> CofferError:
    """403 ``insufficient_scope`` (issue 46): the key's scopes do not allow this;
    ``details.required`` names what is missing (an action, ``folder``, ``networks``, ``expiry``)."""
    return CofferError(
        403,
        "insufficient_scope",
        message or f"This key lacks the {required} scope.",
        details={"required": required, "granted": list(granted)},
    )


def not_found(message: str) -> CofferError:
    """404 ``not_found``."""
    return CofferError(404, "not_found", message)


def conflict(message: str) -> CofferError:
    """409 ``conflict``."""
    return CofferError(409, "conflict", message)


def offset_mismatch(offset: int) -> CofferError:
    """409 ``offset_mismatch`` (tus, CONTRACT §9): the chunk's Upload-Offset is not the upload's."""
    return CofferError(
        409,
        "offset_mismatch",
        f"Upload-Offset is not the upload's offset, {offset}: ask it with HEAD and resume from there.",
        details={"offset": offset},
    )


def upload_locked(kept_for: float | None = None, *, recording: bool = False) -> CofferError:
    """423 ``locked`` (tus): another request is writing to the same upload; retry. Internally,
    ``kept_for``: no request writes, but its last writer keeps the lease that many seconds
    (``recording``: or is about to, once the record of the chunk it answered lands; ask again
    in that many seconds)."""
    details: dict[str, Any] | None = None
    if kept_for is not None:
        details = {"keptFor": round(kept_for, 3)} | ({"recording": True} if recording else {})
    return CofferError(
        423, "locked", "Another request is writing to this upload; retry in a moment.", details=details
    )


def unsupported_version(version: str) -> CofferError:
    """412 ``unsupported_version`` (tus): the request's Tus-Resumable is not ``version``."""
    return CofferError(
        412,
        "unsupported_version",
        f"Send Tus-Resumable: {version}, the only tus version this server speaks.",
        headers={"Tus-Version": version},
    )


def checksum_mismatch(algorithm: str) -> CofferError:
    """460 ``checksum_mismatch`` (tus's checksum extension): the chunk was discarded."""
    return CofferError(
        460,
        "checksum_mismatch",
        f"The chunk's {algorithm} does not match its Upload-Checksum; it was discarded.",
    )


def folder_cycle(message: str) -> CofferError:
    """409 ``folder_cycle``: a folder cannot move into itself or one of its descendants (§8)."""
    return CofferError(409, "folder_cycle", message)


def precondition_failed(message: str = "A precondition in the request does not hold.") -> CofferError:
    """412 ``precondition_failed`` (CDN conditional requests)."""
    return CofferError(412, "precondition_failed", message)


def file_too_large(limit: int = MAX_FILE_BYTES) -> CofferError:
    """413 ``file_too_large``: the file part is over the contract's limit, or over the smaller
    one of an upload token (CONTRACT §8)."""
    if limit == MAX_FILE_BYTES:
        return CofferError(
            413, "file_too_large", f"The file is larger than {MAX_FILE_BYTES} bytes (100 MiB)."
        )
    return CofferError(
        413, "file_too_large", f"The file is larger than this upload's limit of {limit} bytes."
    )


def quota_exceeded(*, size: int, used_bytes: int, quota_bytes: int, in_flight_bytes: int = 0) -> CofferError:
    """413 ``quota_exceeded``, with the figures the contract puts in ``details``; ``in_flight_bytes``
    are held by uploads in progress (counted against the quota until they finish)."""
    held = ""
    if in_flight_bytes:
        held = f" Uploads in progress hold {in_flight_bytes} more bytes until they finish."
    return CofferError(
        413,
        "quota_exceeded",
        f"Storing {size} bytes would exceed the organization's quota.{held}",
        details={"usedBytes": used_bytes, "quotaBytes": quota_bytes, "requestedBytes": size},
    )


def unsupported_media_type(message: str) -> CofferError:
    """415 ``unsupported_media_type``."""
    return CofferError(415, "unsupported_media_type", message)


def invalid_transform(message: str, *, field: str | None = None) -> CofferError:
    """400 ``invalid_transform``: a bad image transform parameter, or free parameters on a public URL."""
    return CofferError(400, "invalid_transform", message, details={"field": field} if field else None)


def not_an_image(message: str = "The asset is not an image that can be transformed.") -> CofferError:
    """415 ``not_an_image``: a transform of a source that is not JPEG, PNG, WebP, AVIF, GIF or TIFF."""
    return CofferError(415, "not_an_image", message)


def image_too_large(*, pixels: int, limit: int) -> CofferError:
    """422 ``image_too_large``: the source's header claims more pixels than the transform limit."""
    return CofferError(
        422,
        "image_too_large",
        f"The image has {pixels} pixels; transforms accept at most {limit}.",
        details={"pixels": pixels, "limitPixels": limit},
    )


def range_not_satisfiable(size: int) -> CofferError:
    """416 ``range_not_satisfiable`` (CDN), with the object's size in Content-Range."""
    return CofferError(
        416,
        "range_not_satisfiable",
        f"The range is outside the object's {size} bytes.",
        headers={"content-range": f"bytes */{size}"},
    )


def request_timeout(seconds: float, *, whole: bool = False, upload: bool = True) -> CofferError:
    """408 ``request_timeout``: the client sent none of the body for ``seconds`` (or, ``whole``,
    not all of it within ``seconds``); ``upload``: the body is an upload's, else any other
    request's (JSON, a form)."""
    if not upload:
        if whole:
            return CofferError(
                408, "request_timeout", f"The request body did not arrive within {seconds:g} s."
            )
        return CofferError(
            408, "request_timeout", f"The client sent nothing for {seconds:g} s; the request was stopped."
        )
    if whole:
        message = (
            f"The upload did not end within {seconds:g} s and was stopped; "
            "send a file this slowly as a resumable upload (tus)."
        )
        return CofferError(408, "request_timeout", message)
    return CofferError(
        408, "request_timeout", f"The client sent nothing for {seconds:g} s; the upload was stopped."
    )


def rate_limited(message: str, *, retry_after: int) -> CofferError:
    """429 ``rate_limited``, with Retry-After."""
    return CofferError(429, "rate_limited", message, headers={"Retry-After": str(retry_after)})


def internal(message: str = "Internal server error.") -> CofferError:
    """500 ``internal``: a bug, or another service's; never bad input."""
    return CofferError(500, "internal", message)


def image_too_costly(message: str, **details: int) -> CofferError:
    """422 ``image_too_large``: decoding the source needs more than a transform may spend
    (memory or frames, estimated from its header, or found by the worker that ran out)."""
    return CofferError(422, "image_too_large", message, details=dict(details))


def unavailable(message: str, *, retry_after: int = 1) -> CofferError:
    """503 ``unavailable``: a dependency is down, with Retry-After."""
    return CofferError(503, "unavailable", message, headers={"Retry-After": str(retry_after)})


def request_id_of(request: Request) -> str | None:
    return getattr(request.state, "request_id", None)


def envelope(
    code: str, message: str, request_id: str | None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The body of every error response."""
    body: dict[str, Any] = {"code": code, "message": message, "requestId": request_id}
    if details:
        body["details"] = details
    return {"error": body}


def error_response(request: Request, exc: CofferError) -> JSONResponse:
    return JSONResponse(
        envelope(exc.code, exc.message, request_id_of(request), exc.details),
        status_code=exc.status,
        headers=exc.headers,
    )


def _field_of(loc: Sequence[Any]) -> str:
    # ("body", "name") -> "name"; ("query", "limit") -> "limit"; ("body",) -> "body"
    if len(loc) > 1 and loc[0] in ("query", "path", "header", "cookie"):
        return str(loc[1])  # the parameter (pydantic may add the union member it tried)
    parts = [str(p) for p in loc[1:]] if len(loc) > 1 else [str(p) for p in loc]
    return ".".join(parts)


async def _on_coffer_error(request: Request, exc: CofferError) -> JSONResponse:
    return error_response(request, exc)


def validation_error(errors: Sequence[Any]) -> CofferError:
    """The contract's 400 for a request FastAPI (or pydantic, with the same locations) refused."""
    first = errors[0] if errors else {"loc": ("body",), "msg": "Invalid request."}
    if first.get("type") == "json_invalid":
        return invalid("The request body is not valid JSON.", field="body")
    field = _field_of(first.get("loc", ("body",)))
    return invalid(f"Invalid value for '{field}': {first.get('msg', 'invalid')}.", field=field)


async def _on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return error_response(request, validation_error(exc.errors()))


async def _on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _STATUS_CODES.get(exc.status_code, "internal" if exc.status_code >= 500 else "invalid_request")
    if exc.status_code == 404:
        message = f"No route for {request.method} {request.url.path}."
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}."
    else:
        message = str(exc.detail)
    return error_response(
        request, CofferError(exc.status_code, code, message, headers=getattr(exc, "headers", None))
    )


async def _on_unexpected(request: Request, _exc: Exception) -> JSONResponse:
    log.exception("unhandled error", extra={"request_id": request_id_of(request)})
    return error_response(request, internal())


def install_error_handlers(app: FastAPI) -> None:
    """Route every error, the framework's own included, into the contract's envelope."""
    app.add_exception_handler(CofferError, _on_coffer_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _on_validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _on_unexpected)
