"""File data operations over a volume's metadata and working copy: read, write, truncate, and
installing chunks fetched from the backend. Synchronous: run on the volume's thread.

A read or write that needs a chunk the working copy lacks raises `NeedChunks` before changing
anything; the async layer fetches those chunks (off the thread), installs them and calls again.
"""

from __future__ import annotations

import time

from aenv_snapstore.volumes.errors import InvalidName, IsDirectory, NoSpace, StaleHandle, TooBig
from aenv_snapstore.volumes.layout import ChunkKey
from aenv_snapstore.volumes.metadata import Inode, MetaDb
from aenv_snapstore.volumes.model import CHUNK_SIZE, MAX_FILE_SIZE, Attr, Kind, blocks_used
from aenv_snapstore.volumes.workcopy import WorkCopy

FILE = Kind.FILE.value
DIRECTORY = Kind.DIRECTORY.value
SYMLINK = Kind.SYMLINK.value


class NeedChunks(Exception):
    """These chunks (ino, index, digest) must be fetched and installed first."""

    def __init__(self, wanted: list[tuple[int, int, str]]) -> None:
        super().__init__(f"{len(wanted)} chunks to fetch")
        self.wanted = wanted


def to_attr(node: Inode) -> Attr:
    kind = Kind(node.kind)
    size = 4096 if kind is Kind.DIRECTORY else node.size
    return Attr(node.ino, kind, node.mode, node.nlink, node.uid, node.gid, size,
                blocks_used(kind, size), node.atime, node.mtime, node.ctime)


def now_ns() -> int:
    return time.time_ns()


class Files:
    def __init__(self, db: MetaDb, work: WorkCopy) -> None:
        self.db = db
        self.work = work

    def node(self, ino: int) -> Inode:
        found = self.db.inode(ino)
        if found is None:
            raise StaleHandle(f"no inode {ino}")
        return found

    def file(self, ino: int) -> Inode:
        node = self.node(ino)
        if node.kind == DIRECTORY:
            raise IsDirectory(f"inode {ino} is a directory")
        if node.kind != FILE:
            raise InvalidName(f"inode {ino} is not a regular file")
        return node

    def _missing(self, node: Inode, first: int, last: int, skip: set[int]) -> None:
        """Raises NeedChunks for chunks first..last stored in the backend but not here."""
        wanted = []
        for idx in range(first, last + 1):
            if idx in skip or self.db.is_present(node.ino, idx):
                continue
            digest = self.db.chunk(node.ino, idx)
            if digest is not None:
                wanted.append((node.ino, idx, digest))
        if wanted:
            raise NeedChunks(wanted)

    def read(self, ino: int, offset: int, count: int) -> tuple[bytes, bool]:
        """No atime update: reads never cost a metadata write (a `noatime` volume)."""
        node = self.file(ino)
        end = min(offset + count, node.size)
        if offset >= end:
            return b"", True
        self._missing(node, offset // CHUNK_SIZE, (end - 1) // CHUNK_SIZE, set())
        return self.work.read(ino, node.size, offset, end - offset), end >= node.size

    def check_growth(self, node: Inode, new_size: int) -> None:
        if new_size > MAX_FILE_SIZE:
            raise TooBig(f"file size {new_size} past the {MAX_FILE_SIZE} byte maximum")
        growth = new_size - node.size
        counters = self.db.counters
        if growth > 0 and counters["used"] + growth > counters["quota"]:
            raise NoSpace(f"volume quota of {counters['quota']} bytes reached")

    def write(self, ino: int, offset: int, data: bytes) -> Attr:
        node = self.file(ino)
        if not data:
            return to_attr(node)
        end = offset + len(data)
        self.check_growth(node, max(node.size, end))
        first, last = offset // CHUNK_SIZE, (end - 1) // CHUNK_SIZE
        # A chunk this write covers whole (up to the file's end) need not be fetched.
        covered = {i for i in (first, last)
                   if offset <= i * CHUNK_SIZE and end >= min((i + 1) * CHUNK_SIZE, node.size)}
        covered |= set(range(first + 1, last))
        self._missing(node, first, last, covered)
        with self.db.txn():
            self.work.write(ino, node.size, offset, data)
            self.db.mark_written(ino, range(first, last + 1))
            if end > node.size:
                self.db.counters["used"] += end - node.size
                node.size = end
            node.mtime = node.ctime = now_ns()
            self.db.put_inode(node)
        return to_attr(node)

    def truncate(self, node: Inode, size: int) -> None:
        """Sets a file's size inside the caller's transaction (after `prepare_truncate`)."""
        if size == node.size:
            return
        self.work.truncate(node.ino, node.size, size)
        if size < node.size:
            self.db.drop_chunks(node.ino, -(-size // CHUNK_SIZE))
            if size % CHUNK_SIZE:
                self.db.mark_written(node.ino, [size // CHUNK_SIZE])
        self.db.counters["used"] += size - node.size
        node.size = size

    def prepare_truncate(self, node: Inode, size: int) -> None:
        """Checks before a transaction: quota, and the chunk a shrink cuts in two is here."""
        self.check_growth(node, size)
        if size < node.size and size % CHUNK_SIZE:
            self._missing(node, size // CHUNK_SIZE, size // CHUNK_SIZE, set())

    def forget(self, node: Inode) -> None:
        """A file (or other node) removed for good, inside the caller's transaction."""
        self.db.delete_inode(node.ino)
        self.db.counters["files"] -= 1
        if node.kind == FILE:
            self.db.counters["used"] -= node.size
            self.work.remove(node.ino)

    def install(self, ino: int, idx: int, digest: str, data: bytes) -> None:
        """A fetched chunk, unless the file changed meanwhile (then it is stale: drop it)."""
        node = self.db.inode(ino)
        if node is None or self.db.is_present(ino, idx) or self.db.chunk(ino, idx) != digest:
            return
        limit = max(0, min(len(data), node.size - idx * CHUNK_SIZE))
        self.work.write(ino, node.size, idx * CHUNK_SIZE, memoryview(data)[:limit])
        self.db.set_present(ino, [idx])

    def read_chunks(self, keys: set[ChunkKey]) -> dict[ChunkKey, bytes | None]:
        """A sync's cut: the bytes of each changed chunk now (None: the chunk is gone)."""
        out: dict[ChunkKey, bytes | None] = {}
        for ino, idx in keys:
            node = self.db.inode(ino)
            start = idx * CHUNK_SIZE
            if node is None or node.kind != FILE or start >= node.size:
                out[(ino, idx)] = None
                continue
            out[(ino, idx)] = self.work.read(ino, node.size, start,
                                             min(CHUNK_SIZE, node.size - start))
        return out

    def wanted_chunks(self, ino: int, first: int, count: int) -> list[tuple[int, int, str]]:
        """Chunks first.. (at most `count`) stored in the backend but not here (read-ahead)."""
        node = self.db.inode(ino)
        if node is None or node.kind != FILE:
            return []
        end = min(first + count, -(-node.size // CHUNK_SIZE))
        wanted = []
        for idx in range(first, end):
            digest = self.db.chunk(ino, idx)
            if digest is not None and not self.db.is_present(ino, idx):
                wanted.append((ino, idx, digest))
        return wanted

    def close(self, clean_marker: str) -> None:
        """`clean_marker` ("<incarnation>:<seq>", or "" when unsynced) lets a restart reuse this
        copy only if the backend's head is still that one."""
        self.db.set_meta_value("clean", clean_marker)
        self.db.close()
        self.work.close()
