"""Snapshots as manifests plus content-addressed chunks, on any Backend.

Layout: `chunks/sha256/<ab>/<hex>` holds one zstd frame of the chunk whose uncompressed sha256 is
<hex>; `manifests/<snapshot_id>` holds a serialized Manifest. Chunks are shared between snapshots
and are deleted only by garbage collection, when no manifest references them any more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import zstandard

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.errors import AlreadyExists, Conflict, Internal, InvalidArgument, NotFound
from aenv_common.snapshots.chunking import check_chunk_size
from aenv_common.snapshots.codec import (
    ZERO_CHUNK,
    CorruptChunk,
    check_digest,
    check_name,
    decode_chunk,
)
from aenv_snapstore import metrics
from aenv_snapstore.backends.base import Backend
from aenv_snapstore.presence import PresenceCache

log = logging.getLogger(__name__)

CHUNK_PREFIX = "chunks/sha256/"
MANIFEST_PREFIX = "manifests/"

T = TypeVar("T")
R = TypeVar("R")


def chunk_key(digest: str) -> str:
    hexdigest = digest.removeprefix("sha256:")
    return f"{CHUNK_PREFIX}{hexdigest[:2]}/{hexdigest}"


def digest_from_key(key: str) -> str:
    return "sha256:" + key.rpartition("/")[2]


def manifest_key(snapshot_id: str) -> str:
    return MANIFEST_PREFIX + snapshot_id


@dataclass
class GcStats:
    deleted_chunks: int = 0
    deleted_bytes: int = 0
    kept_chunks: int = 0


async def bounded_map(fn: Callable[[T], Awaitable[R]], items: Iterable[T], limit: int) -> list[R]:
    """`fn` over `items` with at most `limit` in flight (object stores reward concurrency). The
    first failure cancels the rest and is raised as is."""
    sem = asyncio.Semaphore(limit)

    async def one(item: T) -> R:
        async with sem:
            return await fn(item)

    tasks = [asyncio.ensure_future(one(item)) for item in items]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class SnapStore:
    def __init__(
        self,
        backend: Backend,
        *,
        gc_grace_seconds: float = 3600.0,
        io_concurrency: int = 16,
        presence: PresenceCache | None = None,
    ) -> None:
        self._backend = backend
        self._presence = presence or PresenceCache()
        self._gc_grace = gc_grace_seconds
        self._io_concurrency = io_concurrency
        # Serializes "check chunks exist + write manifest" against garbage collection, so a chunk
        # is never collected between a manifest's check and its write (within this process).
        self._gc_lock = asyncio.Lock()
        # digest -> when a pusher was told it is stored (so it will not send it): its manifest
        # will reference it, so collection keeps it for the grace period, however old it is.
        self._claimed: dict[str, float] = {}

    async def find_missing(self, digests: Iterable[str]) -> list[str]:
        """A pusher's question: the digests not stored. The others are claimed for its manifest
        (collection keeps them)."""
        wanted = list(dict.fromkeys(digests))
        missing = await self._missing(wanted)
        now = time.time()
        self._claimed.update((d, now) for d in set(wanted).difference(missing))
        return missing

    async def _missing(self, wanted: list[str]) -> list[str]:
        for digest in wanted:
            check_digest(digest)
        unknown = [d for d in wanted if not self._presence.known(d)]
        present = await bounded_map(
            lambda d: self._backend.has(chunk_key(d)), unknown, self._io_concurrency
        )
        found = dict(zip(unknown, present, strict=True))
        for digest, ok in found.items():
            if ok:
                self._presence.add(digest)
        return [d for d in wanted if not found.get(d, True)]

    async def put_chunk(self, chunk: pb.Chunk) -> int:
        """Verifies the chunk against its digest, then stores its compressed bytes as sent."""
        check_digest(chunk.digest)
        try:
            await asyncio.to_thread(decode_chunk, chunk.digest, chunk.data, chunk.size)
        except CorruptChunk as err:
            raise InvalidArgument(f"rejected upload: {err.message}") from err
        await self._backend.put(chunk_key(chunk.digest), chunk.data)
        self._presence.add(chunk.digest)
        metrics.CHUNKS_WRITTEN.inc()
        metrics.BYTES_WRITTEN.inc(len(chunk.data))
        metrics.BYTES_UNCOMPRESSED_WRITTEN.inc(chunk.size)
        return len(chunk.data)

    async def put_chunks(self, chunks: AsyncIterable[pb.Chunk]) -> tuple[int, int]:
        """Stores a stream of chunks, several at a time; returns (count, compressed bytes)."""
        running: set[asyncio.Task[int]] = set()
        sizes: list[int] = []
        try:
            async for chunk in chunks:
                if len(running) >= self._io_concurrency:
                    done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    sizes.extend(t.result() for t in done)
                running.add(asyncio.create_task(self.put_chunk(chunk)))
            for task in asyncio.as_completed(running):
                sizes.append(await task)
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        return len(sizes), sum(sizes)

    async def get_chunk(self, digest: str) -> pb.Chunk:
        check_digest(digest)
        try:
            data = await self._backend.get(chunk_key(digest))
        except NotFound:
            raise NotFound(f"chunk {digest} not in the store") from None
        try:
            size = zstandard.get_frame_parameters(data).content_size
        except zstandard.ZstdError as err:
            raise Internal(f"stored chunk {digest} is not a zstd frame: {err}") from err
        metrics.CHUNKS_READ.inc()
        metrics.BYTES_READ.inc(len(data))
        return pb.Chunk(digest=digest, data=data, size=size)

    async def iter_chunks(
        self, digests: Iterable[str], prefetch: int = 8
    ) -> AsyncIterator[pb.Chunk]:
        """Chunks in the order asked, with up to `prefetch` reads in flight."""
        pending: deque[asyncio.Task[pb.Chunk]] = deque()
        try:
            for digest in digests:
                pending.append(asyncio.create_task(self.get_chunk(digest)))
                if len(pending) >= prefetch:
                    yield await pending.popleft()
            while pending:
                yield await pending.popleft()
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def put_manifest(self, manifest: pb.Manifest) -> None:
        referenced = self._check_manifest(manifest)
        async with self._gc_lock:
            missing = await self._missing(list(referenced))
            if missing:
                raise Conflict(
                    f"snapshot {manifest.snapshot_id}: {len(missing)} referenced chunks not "
                    f"stored (first: {missing[0]}); upload them first"
                )
            key = manifest_key(manifest.snapshot_id)
            if await self._backend.has(key):
                if await self.get_manifest(manifest.snapshot_id) == manifest:
                    return
                raise AlreadyExists(f"snapshot {manifest.snapshot_id} exists with other content")
            # Chunks durable before the manifest that names them; then the manifest itself.
            await self._backend.flush(chunk_key(d) for d in referenced)
            await self._backend.put(key, manifest.SerializeToString(deterministic=True))
            await self._backend.flush([key])
        log.info("manifest stored", extra={"snapshot_id": manifest.snapshot_id})

    @staticmethod
    def _check_manifest(manifest: pb.Manifest) -> set[str]:
        """Validates names and digests; returns the referenced (non-zero) chunk digests."""
        check_name("snapshot id", manifest.snapshot_id)
        if manifest.parent_id:
            check_name("parent id", manifest.parent_id)
        names = [entry.name for entry in manifest.files]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"snapshot {manifest.snapshot_id}: duplicate file names")
        referenced: set[str] = set()
        for entry in manifest.files:
            check_name("file name", entry.name)
            check_chunk_size(entry.chunk_size)
            if len(entry.chunk_digests) != -(-entry.size // entry.chunk_size):
                raise InvalidArgument(f"file {entry.name}: chunk count does not match its size")
            referenced.update(d for d in entry.chunk_digests if d != ZERO_CHUNK)
        for digest in referenced:
            check_digest(digest)
        return referenced

    async def get_manifest(self, snapshot_id: str) -> pb.Manifest:
        check_name("snapshot id", snapshot_id)
        try:
            data = await self._backend.get(manifest_key(snapshot_id))
        except NotFound:
            raise NotFound(f"snapshot {snapshot_id} not found") from None
        manifest: pb.Manifest = pb.Manifest.FromString(data)
        return manifest

    async def list_manifests(self) -> list[str]:
        listing = self._backend.list(MANIFEST_PREFIX)
        return sorted([info.key.removeprefix(MANIFEST_PREFIX) async for info in listing])

    async def delete_manifest(self, snapshot_id: str) -> None:
        """Deletes the manifest only; chunks no longer referenced go in the next collection."""
        check_name("snapshot id", snapshot_id)
        key = manifest_key(snapshot_id)
        if not await self._backend.has(key):
            raise NotFound(f"snapshot {snapshot_id} not found")
        await self._backend.delete(key)
        log.info("manifest deleted", extra={"snapshot_id": snapshot_id})

    async def collect_garbage(self, grace_seconds: float | None = None) -> GcStats:
        """Deletes chunks no manifest references that are older than the grace period (younger
        ones may belong to a push whose manifest is not written yet) and that no push was told
        are stored within the configured grace period (its manifest will reference them)."""
        grace = self._gc_grace if grace_seconds is None else grace_seconds
        stats = GcStats()
        async with self._gc_lock:
            now = time.time()
            cutoff = now - grace
            self._claimed = {d: t for d, t in self._claimed.items() if t > now - self._gc_grace}
            referenced = await self._referenced_chunks() | self._claimed.keys()
            doomed = []
            async for info in self._backend.list(CHUNK_PREFIX):
                if digest_from_key(info.key) in referenced or info.modified > cutoff:
                    stats.kept_chunks += 1
                else:
                    doomed.append(info.key)
                    stats.deleted_bytes += info.size
            self._presence.forget(digest_from_key(key) for key in doomed)
            await bounded_map(self._backend.delete, doomed, self._io_concurrency)
            stats.deleted_chunks = len(doomed)
        metrics.GC_DELETED_BYTES.inc(stats.deleted_bytes)
        metrics.GC_KEPT_CHUNKS.set(stats.kept_chunks)
        log.info("garbage collected", extra=vars(stats))
        return stats

    async def _referenced_chunks(self) -> set[str]:
        ids = await self.list_manifests()
        manifests = await bounded_map(self.get_manifest, ids, self._io_concurrency)
        return {d for m in manifests for f in m.files for d in f.chunk_digests}

    async def close(self) -> None:
        await self._backend.close()
