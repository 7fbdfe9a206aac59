"""Volume data chunks in the backend: content-addressed, deduplicated, zstd-compressed.

Chunks are stored compressed (zstd level 1, the snapshots' codec): volumes hold datasets, caches
and source trees that mostly compress, level 1 costs less CPU than the bytes it saves on S3 or
the network, and the frame lets every fetch be verified against its digest. All-zero chunks are
never stored (a hole in the map).

Garbage collection (`gc.py`) deletes chunks while syncs upload: a sync pins the digests it will
log before asking whether they are stored, and collection never deletes a digest pinned (or
pinned at any time since it began); a pin of a digest being deleted waits for the delete, then
finds it missing and puts it again.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Iterable

import zstandard

from aenv_common.errors import Internal, NotFound
from aenv_common.snapshots.codec import compress, decode_chunk
from aenv_snapstore.backends.base import Backend
from aenv_snapstore.presence import PresenceCache
from aenv_snapstore.volumes.layout import ChunkKey, chunk_key


def _digest(data: bytes) -> str | None:
    """Hex sha256, or None for an all-zero chunk (kept as a hole)."""
    if data == bytes(len(data)):
        return None
    return hashlib.sha256(data).hexdigest()


class ChunkStore:
    def __init__(self, backend: Backend, io_concurrency: int = 16) -> None:
        self._backend = backend
        self._presence = PresenceCache()
        self._io = asyncio.Semaphore(io_concurrency)
        self._pinned: Counter[str] = Counter()
        self._touched: set[str] | None = None  # pinned since a collection began
        self._deleting: dict[str, asyncio.Event] = {}
        self.bytes_put = 0  # compressed bytes uploaded by this process (tests, metrics)

    def pin(self, digests: Iterable[str]) -> list[str]:
        pinned = list(digests)
        self._pinned.update(pinned)
        if self._touched is not None:
            self._touched.update(pinned)
        return pinned

    def unpin(self, digests: Iterable[str]) -> None:
        self._pinned.subtract(digests)
        self._pinned += Counter()  # drops counts at zero

    async def store_all(
        self, chunks: dict[ChunkKey, bytes | None]
    ) -> tuple[dict[ChunkKey, str | None], list[str]]:
        """Digests of the chunks (None: gone or all zeros), each stored in the backend; returns
        them with the pins the caller drops once its head names them (or it gave up)."""
        keys = list(chunks)
        digests = await asyncio.gather(*(
            asyncio.to_thread(_digest, data) if data is not None else _none() for data in
            chunks.values()))
        results = dict(zip(keys, digests, strict=True))
        unique: dict[str, bytes] = {}
        for key, digest in results.items():
            data = chunks[key]
            if digest is not None and data is not None:
                unique.setdefault(digest, data)
        pins = self.pin(unique)
        try:
            await asyncio.gather(*(self._ensure(d, data) for d, data in unique.items()))
        except BaseException:
            self.unpin(pins)
            raise
        return results, pins

    async def _ensure(self, digest: str, data: bytes) -> None:
        deleting = self._deleting.get(digest)
        if deleting is not None:
            await deleting.wait()
        if self._presence.known(digest):
            return
        key = chunk_key(digest)
        async with self._io:
            if not await self._backend.has(key):
                frame = await asyncio.to_thread(compress, data)
                await self._backend.put(key, frame)
                self.bytes_put += len(frame)
        self._presence.add(digest)

    async def flush(self, digests: Iterable[str]) -> None:
        await self._backend.flush(chunk_key(d) for d in set(digests))

    async def fetch(self, digest: str) -> bytes:
        """A chunk's bytes, verified against its digest."""
        async with self._io:
            try:
                frame = await self._backend.get(chunk_key(digest))
            except NotFound:
                raise Internal(f"volume chunk {digest} is missing from the store") from None
        return await asyncio.to_thread(_decode, digest, frame)

    # Garbage collection's side of the pins.
    def gc_begin(self) -> None:
        self._touched = set(self._pinned)

    def gc_claim(self, digest: str) -> bool:
        """May collection delete `digest` now? If so, pins of it wait until `gc_release`."""
        if self._touched is None or digest in self._touched or self._pinned[digest] > 0:
            return False
        self._deleting[digest] = asyncio.Event()
        return True

    def gc_release(self, digest: str) -> None:
        self._presence.forget([digest])
        event = self._deleting.pop(digest, None)
        if event is not None:
            event.set()

    def gc_end(self) -> None:
        self._touched = None


async def _none() -> None:
    return None


def _decode(digest: str, frame: bytes) -> bytes:
    try:
        size = zstandard.get_frame_parameters(frame).content_size
    except zstandard.ZstdError as err:
        raise Internal(f"volume chunk {digest} is not a zstd frame: {err}") from err
    return decode_chunk("sha256:" + digest, frame, size)
