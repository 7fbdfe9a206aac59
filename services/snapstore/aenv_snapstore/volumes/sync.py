"""Group commit of one volume to the backend.

A sync takes a cut on the volume's thread (the rows changed since the last sync and the bytes of
the changed chunks, all as of one instant, since operations run one at a time there), then, off
that thread: chunks -> sha256 -> put when not stored; the log segment of the changed rows; flush;
the head naming the segment; flush. A crash anywhere before the head's put leaves the previous
head, whose objects are all in place; one after it leaves the new one. Syncs of a volume run one
at a time; `commit` joins the next one when a running one started before the caller's changes.
Every `COMPACT_EVERY` segments (or past `COMPACT_BYTES` of log), the state is folded into a new
checkpoint and the older objects are deleted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from aenv_snapstore.backends.base import Backend
from aenv_snapstore.volumes.chunks import ChunkStore
from aenv_snapstore.volumes.layout import (
    ChunkKey,
    Head,
    Segment,
    checkpoint_key,
    head_key,
    load_state,
    log_key,
)
from aenv_snapstore.volumes.metadata import MetaCut
from aenv_snapstore.volumes.namespace import Namespace

log = logging.getLogger(__name__)

COMPACT_EVERY = 64
COMPACT_BYTES = 8 << 20
Runner = Callable[..., Awaitable[Any]]


class VolumeSync:
    def __init__(self, volume_id: str, backend: Backend, chunks: ChunkStore, ns: Namespace,
                 run: Runner, head: Head) -> None:
        self._id = volume_id
        self._backend = backend
        self._chunks = chunks
        self._ns = ns
        self._run = run
        self.head = head
        self._lock = asyncio.Lock()
        self._log_bytes = 0
        self.synced_gen = ns.db.gen
        self.last_sync_s = 0.0

    @property
    def dirty(self) -> bool:
        return self._ns.db.gen > self.synced_gen

    async def commit(self) -> None:
        """Returns once every change made before the call is in the backend."""
        target = self._ns.db.gen
        async with self._lock:
            if self.synced_gen < target:
                await self._sync()

    async def sync_if_dirty(self) -> None:
        if self.dirty:
            async with self._lock:
                if self.dirty:
                    await self._sync()

    def _cut(self) -> tuple[int, MetaCut, dict[ChunkKey, bytes | None]]:
        db = self._ns.db
        gen, cut = db.gen, db.cut()
        return gen, cut, self._ns.read_chunks(cut.data)

    async def _sync(self) -> None:
        started = time.monotonic()
        gen, cut, data = await self._run(self._cut)
        if not (cut.segment.inodes or cut.segment.dirents or data):
            self.synced_gen = gen
            return
        try:
            results, pins = await self._chunks.store_all(data)
        except BaseException:
            await self._run(self._ns.db.redirty, cut)
            raise
        try:
            cut.segment.chunks = results
            encoded = await asyncio.to_thread(cut.segment.encode)
            seq = self.head.seq + 1
            await self._backend.put(log_key(self._id, seq), encoded)
            await self._chunks.flush(d for d in results.values() if d is not None)
            await self._backend.flush([log_key(self._id, seq)])
            meta = cut.segment.meta
            head = replace(self.head, seq=seq, quota=meta["quota"], used=meta["used"],
                           files=meta["files"])
            await self._put_head(head)
        except BaseException:
            await self._run(self._ns.db.redirty, cut)
            raise
        finally:
            self._chunks.unpin(pins)
        # The head is written: the map must follow it even if the caller is cancelled now.
        await asyncio.shield(self._run(self._ns.db.apply_chunks, results))
        self.synced_gen = gen
        self._log_bytes += len(encoded)
        self.last_sync_s = time.monotonic() - started
        if seq - self.head.checkpoint >= COMPACT_EVERY or self._log_bytes >= COMPACT_BYTES:
            try:
                await self._compact()
            except Exception:  # the sync stands; the next one compacts
                log.warning("volume compaction failed", extra={"volume_id": self._id},
                            exc_info=True)

    async def _put_head(self, head: Head) -> None:
        await self._backend.put(head_key(self._id), head.encode())
        await self._backend.flush([head_key(self._id)])
        self.head = head

    async def _compact(self) -> None:
        """A checkpoint at the head, then the objects it replaces go (a failure only leaves
        them behind: the next compaction tries again)."""
        old = self.head
        state = await load_state(self._backend, self._id, old)
        key = checkpoint_key(self._id, old.seq)
        await self._backend.put(key, await asyncio.to_thread(state.encode))
        await self._backend.flush([key])
        await self._put_head(replace(old, checkpoint=old.seq))
        self._log_bytes = 0
        stale = [log_key(self._id, s) for s in range(old.checkpoint + 1, old.seq + 1)]
        stale.append(checkpoint_key(self._id, old.checkpoint))
        try:
            await asyncio.gather(*(self._backend.delete(k) for k in stale))
        except Exception:  # left behind; destroy removes them with the volume
            log.warning("volume compaction left old segments", extra={"volume_id": self._id},
                        exc_info=True)

    async def wait_idle(self) -> None:
        """Waits out a sync in flight (destroy: nothing may write the head after it)."""
        async with self._lock:
            return


async def write_initial(backend: Backend, volume_id: str, state: Segment, head: Head) -> None:
    """A new volume (create, clone): its checkpoint, then its head."""
    key = checkpoint_key(volume_id, head.checkpoint)
    await backend.put(key, await asyncio.to_thread(state.encode))
    await backend.flush([key])
    await backend.put(head_key(volume_id), head.encode())
    await backend.flush([head_key(volume_id)])
