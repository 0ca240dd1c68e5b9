"""Coffer's Python SDK: ``Coffer`` (sync) and ``AsyncCoffer``; the ``coffer`` command line is built on it."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from coffer_client._options import MAX_FILE_BYTES, UNSET, ProgressCallback, RetryPolicy
from coffer_client.errors import (
    APIError,
    BadRequest,
    CofferError,
    ConfigurationError,
    Conflict,
    FileTooLarge,
    FolderCycle,
    Forbidden,
    ImageTooLarge,
    InvalidTransform,
    MethodNotAllowed,
    NotAnImage,
    NotFound,
    OrganizationRequired,
    PayloadTooLarge,
    QuotaExceeded,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
)
from coffer_client.transforms import Transform

if TYPE_CHECKING:
    from coffer_client._async import AsyncCoffer
    from coffer_client._sync import Coffer
    from coffer_client.models import (
        Asset,
        AssetPage,
        AssetSummary,
        Folder,
        PathEntry,
        SignedUrl,
        TransformPreset,
        UploadToken,
        Usage,
    )

# The clients and the models load on first use (PEP 562): httpx, pydantic and tenacity are most of
# the start-up of ``coffer``, and ``coffer --help`` or ``--version`` needs none of them.
_LAZY = {
    "Coffer": "coffer_client._sync",
    "AsyncCoffer": "coffer_client._async",
    **dict.fromkeys(
        (
            "Asset",
            "AssetPage",
            "AssetSummary",
            "Folder",
            "PathEntry",
            "SignedUrl",
            "TransformPreset",
            "UploadToken",
            "Usage",
        ),
        "coffer_client.models",
    ),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # once loaded, a plain attribute
        return value
    raise AttributeError(f"module 'coffer_client' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


#: The distribution's version (pyproject.toml), for ``coffer --version``.
__version__ = "0.1.0"

#: ``list_assets(ROOT)``: the assets at the root level only (``None`` lists every asset).
ROOT = ""

__all__ = [
    "MAX_FILE_BYTES",
    "ROOT",
    "UNSET",
    "APIError",
    "Asset",
    "AssetPage",
    "AssetSummary",
    "AsyncCoffer",
    "BadRequest",
    "Coffer",
    "CofferError",
    "ConfigurationError",
    "Conflict",
    "FileTooLarge",
    "Folder",
    "FolderCycle",
    "Forbidden",
    "ImageTooLarge",
    "InvalidTransform",
    "MethodNotAllowed",
    "NotAnImage",
    "NotFound",
    "OrganizationRequired",
    "PathEntry",
    "PayloadTooLarge",
    "ProgressCallback",
    "QuotaExceeded",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "SignedUrl",
    "Transform",
    "TransformPreset",
    "TransportError",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
    "UploadToken",
    "Usage",
]
