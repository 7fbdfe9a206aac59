"""An in-memory Volume and VolumeStore with the contract's API and errors (nfs_status and all),
small enough to trust: the NFS tests run against it and against the real store alike."""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field

from aenv_common.errors import AenvError

ROOT_INO = 1


class Kind(enum.Enum):
    FILE = 1
    DIRECTORY = 2
    SYMLINK = 3


@dataclass(frozen=True)
class Attr:
    ino: int
    kind: Kind
    mode: int
    nlink: int
    uid: int
    gid: int
    size: int
    used: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int


@dataclass(frozen=True)
class DirEntry:
    name: str
    cookie: int
    attr: Attr


@dataclass(frozen=True)
class FsStat:
    total_bytes: int
    free_bytes: int
    total_files: int
    free_files: int


class FakeError(AenvError):
    nfs_status = 5


class VolumeNotFound(FakeError):
    nfs_status = 70


class NoEntry(FakeError):
    nfs_status = 2


class Exists(FakeError):
    nfs_status = 17


class NotDirectory(FakeError):
    nfs_status = 20


class IsDirectory(FakeError):
    nfs_status = 21


class NotEmpty(FakeError):
    nfs_status = 66


class NoSpace(FakeError):
    nfs_status = 28


class InvalidName(FakeError):
    nfs_status = 22


class StaleHandle(FakeError):
    nfs_status = 70


@dataclass
class _Node:
    ino: int
    kind: Kind
    mode: int
    uid: int
    gid: int
    parent: int = ROOT_INO
    nlink: int = 1
    data: bytearray = field(default_factory=bytearray)
    target: str = ""
    entries: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (ino, cookie)
    atime_ns: int = field(default_factory=time.time_ns)
    mtime_ns: int = field(default_factory=time.time_ns)
    ctime_ns: int = field(default_factory=time.time_ns)

    def attr(self) -> Attr:
        size = len(self.target.encode()) if self.kind is Kind.SYMLINK else len(self.data)
        nlink = 2 + sum(1 for _ in self.entries) if self.kind is Kind.DIRECTORY else self.nlink
        return Attr(self.ino, self.kind, self.mode, nlink, self.uid, self.gid, size, size,
                    self.atime_ns, self.mtime_ns, self.ctime_ns)


def _check(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise InvalidName(f"bad name {name!r}")


class FakeVolume:
    def __init__(self, volume_id: str, quota_bytes: int = 1 << 30) -> None:
        self.volume_id = volume_id
        self.quota_bytes = quota_bytes
        self.nodes = {ROOT_INO: _Node(ROOT_INO, Kind.DIRECTORY, 0o755, 0, 0)}
        self._next_ino = ROOT_INO + 1
        self._next_cookie = 1
        self.commits = 0
        self.delay_s = 0.0  # makes each call take this long (pipelining tests)

    def _node(self, ino: int) -> _Node:
        node = self.nodes.get(ino)
        if node is None:
            raise StaleHandle(f"no inode {ino}")
        return node

    def _dir(self, ino: int) -> _Node:
        node = self._node(ino)
        if node.kind is not Kind.DIRECTORY:
            raise NotDirectory("not a directory")
        return node

    def _used(self) -> int:
        return sum(len(n.data) for n in self.nodes.values())

    async def _pause(self) -> None:
        await asyncio.sleep(self.delay_s)

    async def getattr(self, ino: int) -> Attr:
        await self._pause()
        return self._node(ino).attr()

    async def setattr(self, ino: int, *, mode: int | None = None, uid: int | None = None,
                      gid: int | None = None, size: int | None = None,
                      atime_ns: int | None = None, mtime_ns: int | None = None) -> Attr:
        node = self._node(ino)
        if size is not None:
            if node.kind is Kind.DIRECTORY:
                raise IsDirectory("is a directory")
            if self._used() - len(node.data) + size > self.quota_bytes:
                raise NoSpace("quota")
            node.data = node.data[:size] + bytearray(max(0, size - len(node.data)))
            node.mtime_ns = time.time_ns()
        for key, value in (("mode", mode), ("uid", uid), ("gid", gid), ("atime_ns", atime_ns),
                           ("mtime_ns", mtime_ns)):
            if value is not None:
                setattr(node, key, value)
        node.ctime_ns = time.time_ns()
        return node.attr()

    async def lookup(self, dir_ino: int, name: str) -> Attr:
        directory = self._dir(dir_ino)
        if name == ".":
            return directory.attr()
        if name == "..":
            return self._node(directory.parent).attr()
        _check(name)
        if name not in directory.entries:
            raise NoEntry(f"no entry {name!r}")
        return self._node(directory.entries[name][0]).attr()

    async def readdir(self, dir_ino: int, cookie: int, limit: int) -> tuple[list[DirEntry], bool]:
        await self._pause()
        directory = self._dir(dir_ino)
        rows = sorted((c, name, ino) for name, (ino, c) in directory.entries.items() if c > cookie)
        page = [DirEntry(name, c, self._node(ino).attr()) for c, name, ino in rows[:limit]]
        return page, len(rows) <= limit

    async def read(self, ino: int, offset: int, count: int) -> tuple[bytes, bool]:
        await self._pause()
        node = self._node(ino)
        if node.kind is Kind.DIRECTORY:
            raise IsDirectory("is a directory")
        data = bytes(node.data[offset : offset + count])
        return data, offset + len(data) >= len(node.data)

    async def write(self, ino: int, offset: int, data: bytes) -> Attr:
        await self._pause()
        node = self._node(ino)
        if node.kind is not Kind.FILE:
            raise IsDirectory("not a file")
        end = offset + len(data)
        if self._used() + max(0, end - len(node.data)) > self.quota_bytes:
            raise NoSpace("quota exceeded")
        if end > len(node.data):
            node.data.extend(bytearray(end - len(node.data)))
        node.data[offset:end] = data
        node.mtime_ns = node.ctime_ns = time.time_ns()
        return node.attr()

    async def commit(self) -> None:
        self.commits += 1

    def _add(self, dir_ino: int, name: str, node: _Node) -> Attr:
        directory = self._dir(dir_ino)
        _check(name)
        if name in directory.entries:
            raise Exists(f"{name!r} exists")
        self.nodes[node.ino] = node
        directory.entries[name] = (node.ino, self._next_cookie)
        self._next_cookie += 1
        directory.mtime_ns = directory.ctime_ns = time.time_ns()
        return node.attr()

    def _new(self, kind: Kind, mode: int, uid: int, gid: int, parent: int) -> _Node:
        ino, self._next_ino = self._next_ino, self._next_ino + 1
        return _Node(ino, kind, mode, uid, gid, parent=parent)

    async def create(self, dir_ino: int, name: str, *, mode: int, uid: int, gid: int,
                     exclusive: bool) -> Attr:
        directory = self._dir(dir_ino)
        if name in directory.entries and not exclusive:
            existing = self._node(directory.entries[name][0])
            if existing.kind is Kind.DIRECTORY:
                raise IsDirectory("is a directory")
            return existing.attr()
        return self._add(dir_ino, name, self._new(Kind.FILE, mode, uid, gid, dir_ino))

    async def mkdir(self, dir_ino: int, name: str, *, mode: int, uid: int, gid: int) -> Attr:
        return self._add(dir_ino, name, self._new(Kind.DIRECTORY, mode, uid, gid, dir_ino))

    async def symlink(self, dir_ino: int, name: str, target: str, *, uid: int,
                      gid: int) -> Attr:
        node = self._new(Kind.SYMLINK, 0o777, uid, gid, dir_ino)
        node.target = target
        return self._add(dir_ino, name, node)

    async def readlink(self, ino: int) -> str:
        node = self._node(ino)
        if node.kind is not Kind.SYMLINK:
            raise InvalidName("not a symlink")
        return node.target

    def _unlink(self, directory: _Node, name: str) -> None:
        ino = directory.entries.pop(name)[0]
        node = self.nodes[ino]
        node.nlink -= 1
        if node.nlink <= 0 or node.kind is Kind.DIRECTORY:
            del self.nodes[ino]
        directory.mtime_ns = directory.ctime_ns = time.time_ns()

    async def remove(self, dir_ino: int, name: str) -> None:
        directory = self._dir(dir_ino)
        attr = await self.lookup(dir_ino, name)
        if attr.kind is Kind.DIRECTORY:
            raise IsDirectory("is a directory")
        self._unlink(directory, name)

    async def rmdir(self, dir_ino: int, name: str) -> None:
        directory = self._dir(dir_ino)
        attr = await self.lookup(dir_ino, name)
        if attr.kind is not Kind.DIRECTORY:
            raise NotDirectory("not a directory")
        if self.nodes[attr.ino].entries:
            raise NotEmpty("not empty")
        self._unlink(directory, name)

    async def rename(self, from_dir: int, from_name: str, to_dir: int, to_name: str) -> None:
        source, dest = self._dir(from_dir), self._dir(to_dir)
        moved = await self.lookup(from_dir, from_name)
        _check(to_name)
        if to_name in dest.entries:
            replaced = self._node(dest.entries[to_name][0])
            if replaced.kind is Kind.DIRECTORY and replaced.entries:
                raise NotEmpty("target not empty")
            self._unlink(dest, to_name)
        source.entries.pop(from_name)
        dest.entries[to_name] = (moved.ino, self._next_cookie)
        self._next_cookie += 1
        self.nodes[moved.ino].parent = to_dir

    async def link(self, ino: int, dir_ino: int, name: str) -> Attr:
        node = self._node(ino)
        if node.kind is Kind.DIRECTORY:
            raise IsDirectory("is a directory")
        directory = self._dir(dir_ino)
        _check(name)
        if name in directory.entries:
            raise Exists(f"{name!r} exists")
        directory.entries[name] = (ino, self._next_cookie)
        self._next_cookie += 1
        node.nlink += 1
        return node.attr()

    async def fsstat(self) -> FsStat:
        used = self._used()
        return FsStat(self.quota_bytes, self.quota_bytes - used, 1 << 20,
                      (1 << 20) - len(self.nodes))

    async def parent(self, ino: int) -> int:
        return self._dir(ino).parent

    async def resolve(self, path: str) -> Attr:
        attr = self._node(ROOT_INO).attr()
        for part in path.strip("/").split("/") if path.strip("/") else []:
            attr = await self.lookup(attr.ino, part)
        return attr


class FakeStore:
    def __init__(self) -> None:
        self.volumes: dict[str, FakeVolume] = {}

    def add(self, volume_id: str, quota_bytes: int = 1 << 30) -> FakeVolume:
        self.volumes[volume_id] = FakeVolume(volume_id, quota_bytes)
        return self.volumes[volume_id]

    async def open(self, volume_id: str) -> FakeVolume:
        volume = self.volumes.get(volume_id)
        if volume is None:
            raise VolumeNotFound(f"no volume {volume_id}")
        return volume

    async def destroy(self, volume_id: str) -> None:
        self.volumes.pop(volume_id, None)
