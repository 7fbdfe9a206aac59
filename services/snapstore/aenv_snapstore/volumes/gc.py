"""Garbage collection of volume chunks no volume references.

Mark: the chunk map of every volume in the backend (its head's state: checkpoint + logs). Sweep:
every object under `volumes/chunks/` not marked, older than the grace period (a sync's chunks
are put before the log that names them: a younger chunk may belong to a sync in flight, here or
on another snapstore), and not pinned by a sync of this process (see `chunks.py`). Clones hold
the store's collection lock while they copy a state, so no clone's chunks go unmarked.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from aenv_snapstore.backends.base import Backend
from aenv_snapstore.volumes.chunks import ChunkStore
from aenv_snapstore.volumes.errors import VolumeNotFound
from aenv_snapstore.volumes.layout import (
    CHUNK_PREFIX,
    HEAD_PREFIX,
    digest_from_key,
    read_state,
)

log = logging.getLogger(__name__)


@dataclass
class VolumeGcStats:
    volumes: int = 0
    deleted_chunks: int = 0
    deleted_bytes: int = 0
    kept_chunks: int = 0


async def referenced_chunks(backend: Backend) -> tuple[set[str], int]:
    """Every digest some volume's current state names, and how many volumes there are."""
    referenced: set[str] = set()
    ids = [info.key.removeprefix(HEAD_PREFIX) async for info in backend.list(HEAD_PREFIX)]
    for volume_id in ids:
        try:
            _head, state = await read_state(backend, volume_id)
        except VolumeNotFound:  # destroyed meanwhile
            continue
        referenced.update(d for d in state.chunks.values() if d is not None)
    return referenced, len(ids)


async def collect(backend: Backend, chunks: ChunkStore, grace_s: float) -> VolumeGcStats:
    stats = VolumeGcStats()
    chunks.gc_begin()
    try:
        referenced, stats.volumes = await referenced_chunks(backend)
        cutoff = time.time() - grace_s
        async for info in backend.list(CHUNK_PREFIX):
            digest = digest_from_key(info.key)
            if digest in referenced or info.modified > cutoff or not chunks.gc_claim(digest):
                stats.kept_chunks += 1
                continue
            try:
                await backend.delete(info.key)
            finally:
                chunks.gc_release(digest)
            stats.deleted_chunks += 1
            stats.deleted_bytes += info.size
    finally:
        chunks.gc_end()
    log.info("volume chunks collected", extra=vars(stats))
    return stats
