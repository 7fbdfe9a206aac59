"""The object-store interface snapstore keeps chunks and manifests in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    # Last modification, seconds since the epoch: garbage collection spares young objects.
    modified: float


class Backend(Protocol):
    """Flat keys ("chunks/sha256/ab/<hex>", "manifests/<id>") mapped to immutable blobs.
    `put` is atomic: readers see the whole object or none of it."""

    async def has(self, key: str) -> bool: ...

    async def put(self, key: str, data: bytes) -> None: ...

    async def get(self, key: str) -> bytes:
        """Raises aenv_common.errors.NotFound if absent."""
        ...

    async def delete(self, key: str) -> None:
        """Deleting an absent key is not an error."""
        ...

    def list(self, prefix: str) -> AsyncIterator[ObjectInfo]: ...

    async def flush(self, keys: Iterable[str]) -> None:
        """Makes earlier puts of `keys` durable (their names included, not just their bytes)."""
        ...

    async def close(self) -> None: ...
