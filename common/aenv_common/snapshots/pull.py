"""Restoring snapshot files from snapstore: verified chunks written into sparse files.

Files are written under temporary names and renamed only once every chunk of every file has
arrived and matched its digest, so a failed pull leaves nothing behind in `dest_dir`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.errors import Internal, NotFound
from aenv_common.snapshots._rpc import typed_rpc_errors
from aenv_common.snapshots.chunking import check_chunk_size
from aenv_common.snapshots.codec import (
    ZERO_CHUNK,
    CorruptChunk,
    check_digest,
    check_name,
    decode_chunk,
)

log = logging.getLogger(__name__)

# Digests per GetChunks call: keeps each request far below gRPC's message limit.
GET_BATCH = 512
WRITE_WORKERS = 2


@dataclass(frozen=True)
class _Placement:
    fd: int
    offset: int
    length: int


_Plan = dict[str, list[_Placement]]


class _PartFiles:
    """The temporary files of one pull; renamed into place by `commit`, else removed."""

    def __init__(self, dest_dir: Path) -> None:
        self._dest_dir = dest_dir
        self._parts: dict[str, tuple[int, str]] = {}

    def create(self, name: str, size: int) -> int:
        fd, tmp = tempfile.mkstemp(dir=self._dest_dir, prefix=f".{name}.", suffix=".part")
        self._parts[name] = (fd, tmp)
        os.ftruncate(fd, size)  # unwritten ranges stay holes: zero chunks cost no disk
        return fd

    def commit(self) -> dict[str, Path]:
        for fd, _ in self._parts.values():
            os.fsync(fd)
        done: dict[str, Path] = {}
        for name, (fd, tmp) in list(self._parts.items()):
            os.close(fd)
            final = self._dest_dir / name
            os.replace(tmp, final)
            del self._parts[name]
            done[name] = final
        return done

    def discard(self) -> None:
        for fd, tmp in self._parts.values():
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
        self._parts.clear()


async def pull_files(stub: Any, snapshot_id: str, dest_dir: Path) -> dict[str, Path]:
    """Restores every file of snapshot `snapshot_id` into `dest_dir` (manifest name -> path).
    Raises NotFound for a missing snapshot or chunk, Internal for a corrupt chunk."""
    check_name("snapshot id", snapshot_id)
    with typed_rpc_errors():
        reply = await stub.GetManifest(pb.GetManifestRequest(snapshot_id=snapshot_id))
    manifest: pb.Manifest = reply.manifest
    _check_manifest(manifest)
    dest_dir.mkdir(parents=True, exist_ok=True)
    parts = _PartFiles(dest_dir)
    try:
        with typed_rpc_errors():
            await _fetch(stub, snapshot_id, _plan(manifest, parts))
        files = await asyncio.to_thread(parts.commit)
    except CorruptChunk as err:
        raise Internal(f"snapshot {snapshot_id}: {err.message}") from err
    finally:
        parts.discard()
    log.info("snapshot pulled", extra={"snapshot_id": snapshot_id, "files": len(files)})
    return files


def _check_manifest(manifest: pb.Manifest) -> None:
    for entry in manifest.files:
        check_name("file name", entry.name)
        check_chunk_size(entry.chunk_size)
        expected = -(-entry.size // entry.chunk_size)
        if len(entry.chunk_digests) != expected:
            raise Internal(
                f"snapshot {manifest.snapshot_id}: file {entry.name} has "
                f"{len(entry.chunk_digests)} chunks, expected {expected}"
            )
        for digest in entry.chunk_digests:
            if digest != ZERO_CHUNK:
                check_digest(digest)


def _plan(manifest: pb.Manifest, parts: _PartFiles) -> _Plan:
    """Where each distinct chunk goes (a chunk may repeat within and across files)."""
    plan: _Plan = {}
    for entry in manifest.files:
        fd = parts.create(entry.name, entry.size)
        for index, digest in enumerate(entry.chunk_digests):
            if digest == ZERO_CHUNK:
                continue
            offset = index * entry.chunk_size
            length = min(entry.chunk_size, entry.size - offset)
            plan.setdefault(digest, []).append(_Placement(fd, offset, length))
    return plan


async def _fetch(stub: Any, snapshot_id: str, plan: _Plan) -> None:
    digests = list(plan)
    for start in range(0, len(digests), GET_BATCH):
        batch = digests[start : start + GET_BATCH]
        received = await _fetch_batch(stub, plan, batch)
        missing = [d for d in batch if d not in received]
        if missing:
            raise NotFound(f"snapshot {snapshot_id}: chunk {missing[0]} not in the store")


async def _fetch_batch(stub: Any, plan: _Plan, batch: list[str]) -> set[str]:
    queue: asyncio.Queue[pb.Chunk | None] = asyncio.Queue(WRITE_WORKERS * 2)
    received: set[str] = set()
    async with asyncio.TaskGroup() as tg:
        for _ in range(WRITE_WORKERS):
            tg.create_task(_write_chunks(queue, plan))
        async for reply in stub.GetChunks(pb.GetChunksRequest(digests=batch)):
            if reply.chunk.digest not in plan:
                raise Internal(f"store sent chunk {reply.chunk.digest!r} that was not asked for")
            received.add(reply.chunk.digest)
            await queue.put(reply.chunk)
        for _ in range(WRITE_WORKERS):
            await queue.put(None)
    return received


async def _write_chunks(queue: asyncio.Queue[pb.Chunk | None], plan: _Plan) -> None:
    while (chunk := await queue.get()) is not None:
        await asyncio.to_thread(_write_chunk, chunk, plan[chunk.digest])


def _write_chunk(chunk: pb.Chunk, places: Iterable[_Placement]) -> None:
    places = list(places)
    data = decode_chunk(chunk.digest, chunk.data, places[0].length)
    for place in places:
        if place.length != len(data):
            raise CorruptChunk(
                f"chunk {chunk.digest}: {len(data)} bytes, manifest says {place.length}"
            )
        os.pwrite(place.fd, data, place.offset)
