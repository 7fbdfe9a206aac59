"""The volume store: every volume of this snapstore, their lifecycle and background sync.

Volumes are opened on first use and stay open (their working copies under `work_dir/<id>/`)
until `close` or `destroy`. A volume is opened from the backend: a working copy left on local
disk is reused only when it was closed cleanly at exactly the backend's current head (same
incarnation, same sequence number); otherwise it is dropped and the metadata rebuilt from the
head's state, its data fetched lazily. One snapstore process serves a volume at a time (its
syncs assume no other writer of its head). The backend is the caller's: `close` leaves it open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sqlite3
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from aenv_snapstore.backends.base import Backend
from aenv_snapstore.volumes.chunks import ChunkStore
from aenv_snapstore.volumes.errors import Exists, VolumeNotFound
from aenv_snapstore.volumes.gc import VolumeGcStats, collect
from aenv_snapstore.volumes.layout import (
    Head,
    Segment,
    head_key,
    read_head,
    read_state,
    volume_prefix,
)
from aenv_snapstore.volumes.metadata import COUNTERS, MetaDb, root_inode
from aenv_snapstore.volumes.model import ROOT_INO, Usage, check_volume_id
from aenv_snapstore.volumes.namespace import Namespace
from aenv_snapstore.volumes.sync import VolumeSync, write_initial
from aenv_snapstore.volumes.volume import Volume
from aenv_snapstore.volumes.workcopy import WorkCopy

log = logging.getLogger(__name__)


def _new_state(quota: int) -> Segment:
    root = root_inode(time.time_ns())
    state = Segment(meta=dict.fromkeys(COUNTERS, 0))
    state.meta.update(next_ino=ROOT_INO + 1, quota=quota, files=1)
    state.inodes[ROOT_INO] = root.row()
    return state


class VolumeStore:
    def __init__(self, backend: Backend, work_dir: Path, *, default_quota_bytes: int,
                 sync_interval_s: float = 0.2, io_concurrency: int = 16,
                 max_dirty_bytes: int = 256 << 20) -> None:
        self._backend = backend
        self._work_dir = work_dir
        self._default_quota = default_quota_bytes
        self._interval = sync_interval_s
        self._max_dirty = max_dirty_bytes
        self.chunks = ChunkStore(backend, io_concurrency)
        self._open: dict[str, Volume] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # Held by collection and by clones (see gc.py).
        self._gc_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        work_dir.mkdir(parents=True, exist_ok=True)

    def _lock(self, volume_id: str) -> asyncio.Lock:
        return self._locks.setdefault(volume_id, asyncio.Lock())

    async def start(self) -> None:
        """Starts the background sync of changed volumes every `sync_interval_s`."""
        if self._task is None:
            self._task = asyncio.create_task(self._sync_loop())

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.sync_all()

    async def sync_all(self) -> None:
        """One background pass: every changed volume synced (a failure is retried next pass)."""
        volumes = [v for v in self._open.values() if not v.closed and v.sync.dirty]
        results = await asyncio.gather(*(v.sync.sync_if_dirty() for v in volumes),
                                       return_exceptions=True)
        for volume, result in zip(volumes, results, strict=True):
            if isinstance(result, Exception) and not isinstance(result, VolumeNotFound):
                log.warning("volume sync failed", extra={"volume_id": volume.volume_id},
                            exc_info=result)

    async def close(self) -> None:
        """Stops the background sync and closes every volume after a last sync."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        volumes, self._open = list(self._open.values()), {}
        await asyncio.gather(*(v.shutdown(mark_clean=True) for v in volumes))

    async def create(self, volume_id: str, quota_bytes: int = 0) -> int:
        """A new empty volume; returns its quota (the default when 0 is asked)."""
        check_volume_id(volume_id)
        quota = quota_bytes or self._default_quota
        async with self._lock(volume_id):
            if await self._backend.has(head_key(volume_id)):
                raise Exists(f"volume {volume_id} exists")
            head = Head(uuid.uuid4().hex, 0, 0, quota, 0, 1)
            await write_initial(self._backend, volume_id, _new_state(quota), head)
        log.info("volume created", extra={"volume_id": volume_id, "quota_bytes": quota})
        return quota

    async def open(self, volume_id: str) -> Volume:
        check_volume_id(volume_id)
        volume = self._open.get(volume_id)
        if volume is not None:
            return volume
        async with self._lock(volume_id):
            volume = self._open.get(volume_id)
            if volume is None:
                volume = await self._load(volume_id)
                self._open[volume_id] = volume
        return volume

    async def _load(self, volume_id: str) -> Volume:
        head = await read_head(self._backend, volume_id)
        executor = ThreadPoolExecutor(1, thread_name_prefix=f"volume-{volume_id}")
        loop = asyncio.get_running_loop()
        try:
            ns = await loop.run_in_executor(executor, self._open_local, volume_id, head)
            if ns is None:  # not reusable: rebuilt from the backend
                head, state = await read_state(self._backend, volume_id)
                ns = await loop.run_in_executor(executor, self._rebuild_local, volume_id, state)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        volume = Volume(volume_id, ns, executor, self.chunks, max_dirty_bytes=self._max_dirty)
        volume.sync = VolumeSync(volume_id, self._backend, self.chunks, ns, volume.run, head)
        return volume

    def _open_local(self, volume_id: str, head: Head) -> Namespace | None:
        """The working copy left on disk, if it was closed cleanly at exactly `head`; the
        marker is cleared at once, so a crash from now on invalidates it."""
        root = self._work_dir / volume_id
        if not (root / "meta.db").exists():
            return None
        try:
            db = MetaDb(root / "meta.db")
        except sqlite3.DatabaseError:
            return None
        if db.meta_value("clean") != f"{head.incarnation}:{head.seq}":
            db.close()
            return None
        db.set_meta_value("clean", "")
        return Namespace(db, WorkCopy(root / "data"))

    def _rebuild_local(self, volume_id: str, state: Segment) -> Namespace:
        root = self._work_dir / volume_id
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        db = MetaDb(root / "meta.db")
        db.load(state)
        return Namespace(db, WorkCopy(root / "data"))

    async def destroy(self, volume_id: str) -> None:
        """The volume, its working copy and its backend objects (chunks: garbage collection's).
        Open handles answer VolumeNotFound from now on. An absent volume is fine."""
        check_volume_id(volume_id)
        async with self._lock(volume_id):
            volume = self._open.pop(volume_id, None)
            if volume is not None:
                await volume.shutdown(mark_clean=False)
            await self._backend.delete(head_key(volume_id))
            await self._backend.flush([head_key(volume_id)])
            keys = [info.key async for info in self._backend.list(volume_prefix(volume_id))]
            await asyncio.gather(*(self._backend.delete(k) for k in keys))
            await asyncio.to_thread(shutil.rmtree, self._work_dir / volume_id, True)
        log.info("volume destroyed", extra={"volume_id": volume_id})

    async def clone(self, source_id: str, volume_id: str) -> None:
        """A copy-on-write copy: the source synced, then its metadata copied (chunks shared by
        digest); data reaches the clone's working copy lazily. Cost: the metadata's size."""
        check_volume_id(source_id)
        check_volume_id(volume_id)
        if source_id == volume_id:
            raise Exists(f"volume {volume_id} exists")
        source = self._open.get(source_id)
        if source is not None:
            await source.commit()
        async with self._lock(volume_id), self._gc_lock:
            if await self._backend.has(head_key(volume_id)):
                raise Exists(f"volume {volume_id} exists")
            src_head, state = await read_state(self._backend, source_id)
            head = replace(src_head, incarnation=uuid.uuid4().hex, seq=0, checkpoint=0)
            await write_initial(self._backend, volume_id, state, head)
        log.info("volume cloned", extra={"volume_id": volume_id, "source_id": source_id})

    async def usage(self, volume_id: str) -> Usage:
        check_volume_id(volume_id)
        volume = self._open.get(volume_id)
        if volume is not None:
            with contextlib.suppress(VolumeNotFound):
                return await volume.usage()
        head = await read_head(self._backend, volume_id)
        return Usage(head.used, head.quota, head.files)

    async def exists(self, volume_id: str) -> bool:
        check_volume_id(volume_id)
        return volume_id in self._open or await self._backend.has(head_key(volume_id))

    async def collect_garbage(self, grace_s: float) -> VolumeGcStats:
        """Deletes chunks no volume references, older than `grace_s` (the service's timer)."""
        async with self._gc_lock:
            return await collect(self._backend, self.chunks, grace_s)



__all__ = ["Volume", "VolumeStore"]  # Volume too: callers type open()'s answer from here
