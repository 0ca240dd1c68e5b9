"""The contract's error envelope and the handlers that produce it for everything."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

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


def invalid(message: str, *, field: str | None = None) -> CofferError:
    """400 ``invalid_request``, naming the offending field."""
    return CofferError(400, "invalid_request", message, details={"field": field} if field else None)


def not_found(message: str) -> CofferError:
    return CofferError(404, "not_found", message)


def forbidden(message: str = "You do not have access to this resource.") -> CofferError:
    return CofferError(403, "forbidden", message)


def unavailable(message: str, *, retry_after: int = 1) -> CofferError:
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


def _field_of(loc: tuple[Any, ...] | list[Any]) -> str:
    # ("body", "name") -> "name"; ("query", "limit") -> "limit"; ("body",) -> "body"
    parts = [str(p) for p in loc[1:]] if len(loc) > 1 else [str(p) for p in loc]
    return ".".join(parts)


async def _on_coffer_error(request: Request, exc: CofferError) -> JSONResponse:
    return error_response(request, exc)


async def _on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {"loc": ("body",), "msg": "Invalid request."}
    if first.get("type") == "json_invalid":
        err = invalid("The request body is not valid JSON.", field="body")
    else:
        field = _field_of(first.get("loc", ("body",)))
        err = invalid(f"Invalid value for '{field}': {first.get('msg', 'invalid')}.", field=field)
    return error_response(request, err)


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


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", extra={"request_id": request_id_of(request)})
    return error_response(request, CofferError(500, "internal", "Internal server error."))


def install_error_handlers(app: FastAPI) -> None:
    """Route every error, the framework's own included, into the contract's envelope."""
    app.add_exception_handler(CofferError, _on_coffer_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _on_validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _on_unexpected)
