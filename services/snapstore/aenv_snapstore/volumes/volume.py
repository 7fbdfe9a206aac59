"""One open volume: the async face of its metadata, working copy and sync.

Every operation runs on the volume's own thread, one at a time, so each is atomic and SQLite and
file I/O never block the event loop; different volumes run in parallel. An operation that needs
chunks the working copy lacks gets them fetched from the backend on the event loop (concurrent
fetches of one chunk are shared), installed on the thread, and runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aenv_snapstore.volumes.chunks import ChunkStore
from aenv_snapstore.volumes.errors import VolumeNotFound
from aenv_snapstore.volumes.filedata import NeedChunks
from aenv_snapstore.volumes.model import CHUNK_SIZE, Attr, DirEntry, FsStat, Usage
from aenv_snapstore.volumes.namespace import Namespace
from aenv_snapstore.volumes.sync import VolumeSync

T = TypeVar("T")
# Chunks fetched ahead of a read that had to fetch (sequential reads of a fresh clone).
READAHEAD_CHUNKS = 4


class Volume:
    def __init__(self, volume_id: str, ns: Namespace, executor: ThreadPoolExecutor,
                 chunks: ChunkStore, *, max_dirty_bytes: int) -> None:
        self.volume_id = volume_id
        self._ns = ns
        self._executor = executor
        self._chunks = chunks
        self._max_dirty_chunks = max(1, max_dirty_bytes // CHUNK_SIZE)
        self._fetches: dict[tuple[int, int, str], asyncio.Future[None]] = {}
        self._closed = False
        self.sync: VolumeSync  # set by the store once the head is known

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise VolumeNotFound(f"volume {self.volume_id} not found")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _run_fetching(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        while True:
            try:
                return await self.run(fn, *args, **kwargs)
            except NeedChunks as need:
                await asyncio.gather(*(self._fetch(*w) for w in need.wanted))
                last_ino, last_idx, _ = need.wanted[-1]
                self._read_ahead(last_ino, last_idx)

    def _fetch(self, ino: int, idx: int, digest: str) -> asyncio.Future[None]:
        key = (ino, idx, digest)
        running = self._fetches.get(key)
        if running is None:
            running = asyncio.ensure_future(self._fetch_one(ino, idx, digest))
            self._fetches[key] = running
            running.add_done_callback(lambda _f: self._fetches.pop(key, None))
        return running

    async def _fetch_one(self, ino: int, idx: int, digest: str) -> None:
        data = await self._chunks.fetch(digest)
        await self.run(self._ns.install, ino, idx, digest, data)

    def _read_ahead(self, ino: int, idx: int) -> None:
        async def ahead() -> None:
            with contextlib.suppress(Exception):
                wanted = await self.run(self._ns.wanted_chunks, ino, idx + 1, READAHEAD_CHUNKS)
                await asyncio.gather(*(self._fetch(*w) for w in wanted))

        task = asyncio.ensure_future(ahead())
        self._fetches[(ino, -idx - 1, "ahead")] = task
        task.add_done_callback(lambda _t: self._fetches.pop((ino, -idx - 1, "ahead"), None))

    # The contract's operations.
    async def getattr(self, ino: int) -> Attr:
        return await self.run(self._ns.getattr, ino)

    async def setattr(self, ino: int, *, mode: int | None = None, uid: int | None = None,
                      gid: int | None = None, size: int | None = None,
                      atime_ns: int | None = None, mtime_ns: int | None = None) -> Attr:
        return await self._run_fetching(self._ns.setattr, ino, mode=mode, uid=uid, gid=gid,
                                        size=size, atime_ns=atime_ns, mtime_ns=mtime_ns)

    async def lookup(self, dir_ino: int, name: str) -> Attr:
        return await self.run(self._ns.lookup, dir_ino, name)

    async def readdir(self, dir_ino: int, cookie: int, limit: int) -> tuple[list[DirEntry], bool]:
        return await self.run(self._ns.readdir, dir_ino, cookie, limit)

    async def read(self, ino: int, offset: int, count: int) -> tuple[bytes, bool]:
        return await self._run_fetching(self._ns.read, ino, offset, count)

    async def write(self, ino: int, offset: int, data: bytes) -> Attr:
        """Unstable until `commit`; waits for a sync first when too much is unsynced."""
        if self._ns.db.dirty_data_count >= self._max_dirty_chunks:
            await self.sync.commit()
        return await self._run_fetching(self._ns.write, ino, offset, data)

    async def commit(self) -> None:
        if self._closed:
            raise VolumeNotFound(f"volume {self.volume_id} not found")
        await self.sync.commit()

    async def create(self, dir_ino: int, name: str, *, mode: int, uid: int, gid: int,
                     exclusive: bool) -> Attr:
        return await self.run(self._ns.create, dir_ino, name, mode=mode, uid=uid, gid=gid,
                              exclusive=exclusive)

    async def mkdir(self, dir_ino: int, name: str, *, mode: int, uid: int, gid: int) -> Attr:
        return await self.run(self._ns.mkdir, dir_ino, name, mode=mode, uid=uid, gid=gid)

    async def symlink(self, dir_ino: int, name: str, target: str, *, uid: int, gid: int) -> Attr:
        return await self.run(self._ns.symlink, dir_ino, name, target, uid=uid, gid=gid)

    async def readlink(self, ino: int) -> str:
        return await self.run(self._ns.readlink, ino)

    async def remove(self, dir_ino: int, name: str) -> None:
        await self.run(self._ns.remove, dir_ino, name)

    async def rmdir(self, dir_ino: int, name: str) -> None:
        await self.run(self._ns.rmdir, dir_ino, name)

    async def rename(self, from_dir: int, from_name: str, to_dir: int, to_name: str) -> None:
        await self.run(self._ns.rename, from_dir, from_name, to_dir, to_name)

    async def link(self, ino: int, dir_ino: int, name: str) -> Attr:
        return await self.run(self._ns.link, ino, dir_ino, name)

    async def fsstat(self) -> FsStat:
        return await self.run(self._ns.fsstat)

    async def usage(self) -> Usage:
        return await self.run(self._ns.usage)

    async def parent(self, ino: int) -> int:
        return await self.run(self._ns.parent, ino)

    async def resolve(self, path: str) -> Attr:
        return await self.run(self._ns.resolve, path)

    # Lifecycle (the store's).
    @property
    def closed(self) -> bool:
        return self._closed

    async def shutdown(self, *, mark_clean: bool) -> None:
        """Stops serving: waits out fetches and syncs in flight, then (`mark_clean`: after a
        last sync) records that the local copy matches the head, so a restart may reuse it."""
        if self._closed:
            return
        clean = False
        if mark_clean:
            try:
                await self.sync.commit()
                clean = True
            except Exception:  # the backend is down: the copy is rebuilt next time instead
                clean = False
        self._closed = True
        for task in list(self._fetches.values()):
            task.cancel()
        await asyncio.gather(*self._fetches.values(), return_exceptions=True)
        await self.sync.wait_idle()
        head = self.sync.head
        marker = f"{head.incarnation}:{head.seq}" if clean else ""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._ns.close, marker)
        self._executor.shutdown(wait=False)
