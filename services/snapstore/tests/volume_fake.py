"""An in-memory volume store with the contract's semantics (errors, quota, cookies), for the
VolumeService tests beside the real store: it also lets a test break a call on purpose."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from aenv_snapstore.volumes.errors import (
    Exists,
    IsDirectory,
    NoEntry,
    NoSpace,
    NotDirectory,
    NotEmpty,
    StaleHandle,
    VolumeNotFound,
)
from aenv_snapstore.volumes.model import (
    ROOT_INO,
    Attr,
    DirEntry,
    FsStat,
    Kind,
    Usage,
    blocks_used,
    check_name,
    split_path,
)


def _now() -> int:
    return time.time_ns()


@dataclass
class _Node:
    attr: Attr
    data: bytearray = field(default_factory=bytearray)
    entries: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (ino, cookie)
    target: str = ""
    parent: int = ROOT_INO


class FakeVolume:
    def __init__(self, volume_id: str, quota: int) -> None:
        self.volume_id = volume_id
        self.quota = quota
        self.commits = 0
        self._next_ino = ROOT_INO + 1
        self._next_cookie = 3
        self.nodes = {ROOT_INO: _Node(self._attr(ROOT_INO, Kind.DIRECTORY, 0o777, 0, 0))}

    @staticmethod
    def _attr(ino: int, kind: Kind, mode: int, uid: int, gid: int) -> Attr:
        now = _now()
        return Attr(ino, kind, mode, 1, uid, gid, 0, blocks_used(kind, 0), now, now, now)

    def used(self) -> int:
        return sum(n.attr.size for n in self.nodes.values() if n.attr.kind is Kind.FILE)

    def _node(self, ino: int) -> _Node:
        if ino not in self.nodes:
            raise StaleHandle(f"no inode {ino}")
        return self.nodes[ino]

    def _dir(self, ino: int) -> _Node:
        node = self._node(ino)
        if node.attr.kind is not Kind.DIRECTORY:
            raise NotDirectory("not a directory")
        return node

    def _add(self, dir_ino: int, name: str, kind: Kind, mode: int, uid: int, gid: int) -> _Node:
        check_name(name)
        parent = self._dir(dir_ino)
        if name in parent.entries:
            raise Exists(f"{name} exists")
        ino = self._next_ino
        self._next_ino += 1
        node = _Node(self._attr(ino, kind, mode, uid, gid), parent=dir_ino)
        self.nodes[ino] = node
        parent.entries[name] = (ino, self._next_cookie)
        self._next_cookie += 1
        return node

    async def getattr(self, ino: int) -> Attr:
        return self._node(ino).attr

    async def setattr(self, ino: int, *, mode: int | None = None, uid: int | None = None,
                      gid: int | None = None, size: int | None = None,
                      atime_ns: int | None = None, mtime_ns: int | None = None) -> Attr:
        node = self._node(ino)
        attr = node.attr
        node.attr = replace(
            attr, mode=attr.mode if mode is None else mode, uid=attr.uid if uid is None else uid,
            gid=attr.gid if gid is None else gid, ctime_ns=_now())
        return node.attr

    async def lookup(self, dir_ino: int, name: str) -> Attr:
        entry = self._dir(dir_ino).entries.get(name)
        if entry is None:
            raise NoEntry(f"{name} not found")
        return self.nodes[entry[0]].attr

    async def readdir(self, dir_ino: int, cookie: int, limit: int) -> tuple[list[DirEntry], bool]:
        items = sorted((c, n, i) for n, (i, c) in self._dir(dir_ino).entries.items() if c > cookie)
        page = [DirEntry(n, c, self.nodes[i].attr) for c, n, i in items[:limit]]
        return page, len(items) <= limit

    async def read(self, ino: int, offset: int, count: int) -> tuple[bytes, bool]:
        node = self._node(ino)
        if node.attr.kind is Kind.DIRECTORY:
            raise IsDirectory("is a directory")
        data = bytes(node.data[offset:offset + count])
        return data, offset + len(data) >= len(node.data)

    async def write(self, ino: int, offset: int, data: bytes) -> Attr:
        node = self._node(ino)
        end = offset + len(data)
        if end > len(node.data) and self.used() + end - len(node.data) > self.quota:
            raise NoSpace("volume quota exceeded")
        node.data[offset:end] = data
        node.attr = replace(node.attr, size=len(node.data), mtime_ns=_now())
        return node.attr

    async def commit(self) -> None:
        self.commits += 1

    async def create(self, dir_ino: int, name: str, *, mode: int, uid: int, gid: int,
                     exclusive: bool) -> Attr:
        return self._add(dir_ino, name, Kind.FILE, mode, uid, gid).attr

    async def mkdir(self, dir_ino: int, name: str, *, mode: int, uid: int, gid: int) -> Attr:
        return self._add(dir_ino, name, Kind.DIRECTORY, mode, uid, gid).attr

    async def symlink(self, dir_ino: int, name: str, target: str, *, uid: int, gid: int) -> Attr:
        node = self._add(dir_ino, name, Kind.SYMLINK, 0o777, uid, gid)
        node.target = target
        return node.attr

    async def readlink(self, ino: int) -> str:
        return self._node(ino).target

    async def remove(self, dir_ino: int, name: str) -> None:
        attr = await self.lookup(dir_ino, name)
        if attr.kind is Kind.DIRECTORY:
            raise IsDirectory(f"{name} is a directory")
        ino, _ = self.nodes[dir_ino].entries.pop(name)
        del self.nodes[ino]

    async def rmdir(self, dir_ino: int, name: str) -> None:
        attr = await self.lookup(dir_ino, name)
        if attr.kind is not Kind.DIRECTORY:
            raise NotDirectory(f"{name} is not a directory")
        if self.nodes[attr.ino].entries:
            raise NotEmpty(f"{name} is not empty")
        del self.nodes[dir_ino].entries[name]
        del self.nodes[attr.ino]

    async def rename(self, from_dir: int, from_name: str, to_dir: int, to_name: str) -> None:
        attr = await self.lookup(from_dir, from_name)
        target = self._dir(to_dir).entries.get(to_name)
        if target is not None:
            del self.nodes[target[0]]
        del self.nodes[from_dir].entries[from_name]
        self.nodes[to_dir].entries[to_name] = (attr.ino, self._next_cookie)
        self._next_cookie += 1

    async def fsstat(self) -> FsStat:
        return FsStat(self.quota, self.quota - self.used(), 1 << 20, 1 << 20)

    async def parent(self, ino: int) -> int:
        return self._node(ino).parent

    async def resolve(self, path: str) -> Attr:
        attr = self.nodes[ROOT_INO].attr
        for raw in split_path(path):
            attr = await self.lookup(attr.ino, raw.decode())
        return attr


class FakeVolumeStore:
    def __init__(self) -> None:
        self.volumes: dict[str, FakeVolume] = {}

    async def create(self, volume_id: str, quota_bytes: int = 0) -> int:
        if volume_id in self.volumes:
            raise Exists(f"volume {volume_id} exists")
        self.volumes[volume_id] = FakeVolume(volume_id, quota_bytes or 10 << 30)
        return self.volumes[volume_id].quota

    async def destroy(self, volume_id: str) -> None:
        self.volumes.pop(volume_id, None)

    async def clone(self, source_id: str, volume_id: str) -> None:
        raise NotImplementedError("the fake does not clone")

    async def usage(self, volume_id: str) -> Usage:
        volume = await self.open(volume_id)
        return Usage(volume.used(), volume.quota, len(volume.nodes))  # inodes, the root's too

    async def exists(self, volume_id: str) -> bool:
        return volume_id in self.volumes

    async def open(self, volume_id: str) -> FakeVolume:
        if volume_id not in self.volumes:
            raise VolumeNotFound(f"volume {volume_id} not found")
        return self.volumes[volume_id]

    async def close(self) -> None:
        pass
