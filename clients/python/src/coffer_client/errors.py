"""Errors: one exception class per contract error code, each carrying status, code, message and request id."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command line names these errors without loading httpx
    import httpx


class CofferError(Exception):
    """Anything that went wrong talking to Coffer."""

    status: int | None = None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "error",
        request_id: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.code = code
        self.request_id = request_id
        self.details = details or {}

    def __str__(self) -> str:
        where = f" (request {self.request_id})" if self.request_id else ""
        return f"{self.message}{where}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r})"


class ConfigurationError(CofferError):
    """No base URL or no API key: nothing was sent."""


class TransportError(CofferError):
    """The request did not get an HTTP answer (connection refused or reset, timeout)."""


class APIError(CofferError):
    """The service answered with an error status (the contract's error envelope)."""

    status: int
    #: Seconds the service asked to wait (429 and 503 send ``Retry-After``).
    retry_after: float | None = None


class BadRequest(APIError):
    status = 400


class InvalidTransform(BadRequest):
    """A transform parameter out of range or unknown (CONTRACT §10), or free parameters on a
    public URL, which takes ``preset=`` only."""


class OrganizationRequired(BadRequest):
    """A user key with several organizations and no organization id."""


class Unauthorized(APIError):
    status = 401


class Forbidden(APIError):
    status = 403


class InsufficientScope(Forbidden):
    """The key's scopes lack what the call needs (issue 46); ``details["required"]`` names it."""

    @property
    def required(self) -> str | None:
        value = self.details.get("required")
        return value if isinstance(value, str) else None


class NotFound(APIError):
    status = 404


class MethodNotAllowed(APIError):
    status = 405


class Conflict(APIError):
    status = 409


class FolderCycle(Conflict):
    """A folder cannot move into itself or one of its descendants."""


class OffsetMismatch(Conflict):
    """A resumable upload's chunk sent at another offset than the service holds
    (``details["offset"]``)."""


class Locked(APIError):
    """Another request is writing to the same resumable upload; retry."""

    status = 423


class ChecksumMismatch(APIError):
    """A resumable upload's chunk did not match its checksum; it was discarded."""

    status = 460


class PayloadTooLarge(APIError):
    status = 413


class FileTooLarge(PayloadTooLarge):
    pass


class QuotaExceeded(PayloadTooLarge):
    pass


class UnsupportedMediaType(APIError):
    status = 415


class NotAnImage(UnsupportedMediaType):
    """A transformed URL of an asset that is no image the service transforms (SVG never is)."""


class ImageTooLarge(APIError):
    """A transformed URL of an image above 50 megapixels."""

    status = 422


class RateLimited(APIError):
    status = 429


class ServerError(APIError):
    status = 500


class Unavailable(ServerError):
    status = 503


_BY_CODE: dict[str, type[APIError]] = {
    "organization_required": OrganizationRequired,
    "folder_cycle": FolderCycle,
    "file_too_large": FileTooLarge,
    "quota_exceeded": QuotaExceeded,
    "offset_mismatch": OffsetMismatch,
    "invalid_transform": InvalidTransform,
    "not_an_image": NotAnImage,
    "image_too_large": ImageTooLarge,
    "insufficient_scope": InsufficientScope,
}
_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    423: Locked,
    429: RateLimited,
    460: ChecksumMismatch,
    503: Unavailable,
}


# The longest ``Retry-After`` the client waits for; a service asking for more is answered with
# its error at once (a hostile or broken one asked for 11 days, or for ``inf``).
MAX_RETRY_AFTER = 300.0


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` header in seconds (the contract sends delta-seconds), if any."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def waits_too_long(exc: BaseException) -> bool:
    """Whether the service asked to be called again later than the client waits."""
    asked = getattr(exc, "retry_after", None)
    return asked is not None and asked > MAX_RETRY_AFTER


def from_response(response: httpx.Response) -> APIError:
    """The exception for an error response; tolerant of bodies that are not the envelope (a proxy's)."""
    code, message, details = "error", "", None
    request_id = response.headers.get("x-request-id")
    try:
        # pydantic's parser, as for every answer: its nesting is bounded, where ``json.loads``
        # recursed until RecursionError on an envelope of ``[[[…]]]`` 100,000 deep.
        from pydantic_core import from_json

        body = from_json(response.content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        env = body["error"]
        code = str(env.get("code") or code)
        message = str(env.get("message") or "")
        request_id = env.get("requestId") or request_id
        details = env.get("details") if isinstance(env.get("details"), dict) else None
    if not message:
        message = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    cls = _BY_CODE.get(code) or _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = ServerError if response.status_code >= 500 else APIError
    err = cls(message, status=response.status_code, code=code, request_id=request_id, details=details)
    err.retry_after = retry_after(response)
    return err
