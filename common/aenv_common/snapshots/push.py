"""Persisting snapshot files to snapstore: only chunks the store lacks are compressed and sent.

Four stages run concurrently, joined by small bounded queues so memory stays bounded and hashing,
the missing-chunk query, compression and upload overlap:
scan (read + hash, thread) -> find missing (RPC) -> compress (threads) -> upload (PutChunks stream).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.snapshots._rpc import typed_rpc_errors
from aenv_common.snapshots.chunking import check_chunk_size, chunk_file
from aenv_common.snapshots.codec import DEFAULT_CHUNK_SIZE, ZERO_CHUNK, check_name, compress

log = logging.getLogger(__name__)

# Chunks per FindMissingChunks call: large enough to amortise the round trip, small enough
# (32 MiB of 2 MiB chunks, at most 3 batches in flight) to keep the pipeline's memory bounded.
FIND_BATCH = 16
COMPRESS_WORKERS = 2

_Batch = list[tuple[str, bytes]]


@dataclass
class PushStats:
    files: int = 0
    chunks: int = 0
    zero_chunks: int = 0
    sent_chunks: int = 0
    # Logical (uncompressed) bytes of all files, of the chunks sent, and what went on the wire.
    total_bytes: int = 0
    sent_bytes: int = 0
    sent_compressed_bytes: int = 0
    seconds: float = 0.0


@dataclass
class _Pipeline:
    stats: PushStats
    batches: asyncio.Queue[_Batch | None] = field(default_factory=lambda: asyncio.Queue(2))
    to_compress: asyncio.Queue[tuple[str, bytes] | None] = field(
        default_factory=lambda: asyncio.Queue(FIND_BATCH)
    )
    to_send: asyncio.Queue[pb.Chunk | None] = field(
        default_factory=lambda: asyncio.Queue(COMPRESS_WORKERS * 2)
    )
    # Digests already queued in this push: a chunk repeated across files is sent once.
    queued: set[str] = field(default_factory=set)


async def push_files(
    stub: Any,
    snapshot_id: str,
    parent_id: str,
    files: Mapping[str, Path],
    labels: Mapping[str, str] | None = None,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> PushStats:
    """Persists `files` (manifest name -> local path) as snapshot `snapshot_id`. `stub` is a
    SnapStoreServiceStub. The manifest is put last, so a failed push leaves no snapshot."""
    check_name("snapshot id", snapshot_id)
    for name in files:
        check_name("file name", name)
    check_chunk_size(chunk_size)
    started = time.perf_counter()
    pipe = _Pipeline(PushStats(files=len(files)))
    with typed_rpc_errors():
        async with asyncio.TaskGroup() as tg:
            upload = tg.create_task(_upload(stub, pipe))
            tg.create_task(_find_missing(stub, pipe))
            compressors = [tg.create_task(_compress(pipe)) for _ in range(COMPRESS_WORKERS)]
            entries = await _scan_files(pipe, files, chunk_size)
            await asyncio.gather(*compressors)
            await pipe.to_send.put(None)
        await upload
        manifest = pb.Manifest(
            snapshot_id=snapshot_id, parent_id=parent_id, files=entries, labels=labels or {}
        )
        await stub.PutManifest(pb.PutManifestRequest(manifest=manifest))
    pipe.stats.seconds = time.perf_counter() - started
    log.info("snapshot pushed", extra={"snapshot_id": snapshot_id, **vars(pipe.stats)})
    return pipe.stats


async def _scan_files(
    pipe: _Pipeline, files: Mapping[str, Path], chunk_size: int
) -> list[pb.FileEntry]:
    entries = [await _scan_file(pipe, name, path, chunk_size) for name, path in files.items()]
    await pipe.batches.put(None)
    return entries


async def _scan_file(pipe: _Pipeline, name: str, path: Path, chunk_size: int) -> pb.FileEntry:
    """Hashes the file chunk by chunk (in a thread) and hands non-zero chunks on in batches."""
    entry = pb.FileEntry(name=name, chunk_size=chunk_size, size=path.stat().st_size)
    chunks: Iterator[tuple[str, bytes]] = chunk_file(path, chunk_size)
    batch: _Batch = []
    while (item := await asyncio.to_thread(next, chunks, None)) is not None:
        digest = item[0]
        entry.chunk_digests.append(digest)
        if digest == ZERO_CHUNK:
            pipe.stats.zero_chunks += 1
            continue
        batch.append(item)
        if len(batch) == FIND_BATCH:
            await pipe.batches.put(batch)
            batch = []
    if batch:
        await pipe.batches.put(batch)
    pipe.stats.chunks += len(entry.chunk_digests)
    pipe.stats.total_bytes += entry.size
    return entry


async def _find_missing(stub: Any, pipe: _Pipeline) -> None:
    while (batch := await pipe.batches.get()) is not None:
        fresh = {d: data for d, data in batch if d not in pipe.queued}
        if fresh:
            reply = await stub.FindMissingChunks(pb.FindMissingChunksRequest(digests=list(fresh)))
            for digest in reply.digests:
                pipe.queued.add(digest)
                await pipe.to_compress.put((digest, fresh[digest]))
    for _ in range(COMPRESS_WORKERS):
        await pipe.to_compress.put(None)


async def _compress(pipe: _Pipeline) -> None:
    while (item := await pipe.to_compress.get()) is not None:
        digest, data = item
        packed = await asyncio.to_thread(compress, data)
        pipe.stats.sent_chunks += 1
        pipe.stats.sent_bytes += len(data)
        pipe.stats.sent_compressed_bytes += len(packed)
        await pipe.to_send.put(pb.Chunk(digest=digest, data=packed, size=len(data)))


async def _upload(stub: Any, pipe: _Pipeline) -> pb.PutChunksResponse:
    response: pb.PutChunksResponse = await stub.PutChunks(_upload_requests(pipe))
    return response


async def _upload_requests(pipe: _Pipeline) -> AsyncIterator[pb.PutChunksRequest]:
    while (chunk := await pipe.to_send.get()) is not None:
        yield pb.PutChunksRequest(chunk=chunk)
