"""blob's typed state (settings and the storage driver, opened by the lifespan) and the
dependencies of its routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from coffer_blob.config import Settings
from coffer_blob.grants import RevocationCache
from coffer_blob.storage import Storage
from coffer_blob.transforms.pool import TransformPool
from coffer_blob.transforms.presets import PresetCache
from coffer_kit.state import ServiceState, from_state, request_state


@dataclass(slots=True)
class BlobState(ServiceState[Settings]):
    storage: Storage
    # The CDN listener's (CONTRACT §10); None on the internal listener.
    transforms: TransformPool | None = None
    presets: PresetCache | None = None
    # The CDN listener's (coffer_blob.grants); None on the internal listener.
    revocations: RevocationCache | None = None


def blob_state(request: Request) -> BlobState:
    """For the CDN's download route, which resolves no dependencies (see cdn.download)."""
    return request_state(request, BlobState)


StorageDep = Annotated[Storage, Depends(from_state(BlobState, lambda state: state.storage))]
SettingsDep = Annotated[Settings, Depends(from_state(BlobState, lambda state: state.settings))]
