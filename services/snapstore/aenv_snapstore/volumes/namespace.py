"""The namespace operations of a volume (lookup, create, rename, ...) over its metadata, with
POSIX semantics. Synchronous: run on the volume's thread, one transaction each."""

from __future__ import annotations

from aenv_snapstore.volumes.errors import (
    Exists,
    InvalidName,
    IsDirectory,
    NameTooLong,
    NoEntry,
    NotDirectory,
    NotEmpty,
)
from aenv_snapstore.volumes.filedata import DIRECTORY, FILE, SYMLINK, Files, now_ns, to_attr
from aenv_snapstore.volumes.metadata import Inode
from aenv_snapstore.volumes.model import (
    MAX_SYMLINK_BYTES,
    ROOT_INO,
    Attr,
    DirEntry,
    FsStat,
    Usage,
    check_name,
    name_bytes,
    name_str,
    split_path,
)

# NFS wants a file count limit; volumes have none but their quota.
MAX_FILES = 1 << 32


class Namespace(Files):
    def directory(self, ino: int) -> Inode:
        node = self.node(ino)
        if node.kind != DIRECTORY:
            raise NotDirectory(f"inode {ino} is not a directory")
        return node

    def _entry(self, dir_ino: int, name: bytes) -> Inode:
        found = self.db.dirent(dir_ino, name)
        if found is None:
            raise NoEntry(f"no entry {name_str(name)!r}")
        return self.node(found[0])

    def getattr(self, ino: int) -> Attr:
        return to_attr(self.node(ino))

    def setattr(self, ino: int, *, mode: int | None, uid: int | None, gid: int | None,
                size: int | None, atime_ns: int | None, mtime_ns: int | None) -> Attr:
        node = self.node(ino)
        if size is not None:
            node = self.file(ino)
            self.prepare_truncate(node, size)
        with self.db.txn():
            now = now_ns()
            if size is not None and size != node.size:
                self.truncate(node, size)
                node.mtime = now
            if mode is not None:
                node.mode = mode & 0o7777
            if uid is not None:
                node.uid = uid
            if gid is not None:
                node.gid = gid
            if atime_ns is not None:
                node.atime = atime_ns
            if mtime_ns is not None:
                node.mtime = mtime_ns
            node.ctime = now
            self.db.put_inode(node)
        return to_attr(node)

    def lookup(self, dir_ino: int, name: str) -> Attr:
        parent = self.directory(dir_ino)
        if name == ".":
            return to_attr(parent)
        if name == "..":
            return to_attr(self.node(parent.parent))
        return to_attr(self._entry(dir_ino, check_name(name)))

    def parent(self, ino: int) -> int:
        return self.directory(ino).parent

    def resolve(self, path: str) -> Attr:
        node = self.node(ROOT_INO)
        for part in split_path(path):
            if node.kind != DIRECTORY:
                raise NotDirectory(f"{path!r}: a component is not a directory")
            node = self._entry(node.ino, part)
        return to_attr(node)

    def readdir(self, dir_ino: int, cookie: int, limit: int) -> tuple[list[DirEntry], bool]:
        self.directory(dir_ino)
        rows = self.db.list_dir(dir_ino, cookie, max(1, limit) + 1)
        entries = [DirEntry(name_str(n), c, to_attr(node)) for n, c, node in rows[:max(1, limit)]]
        return entries, len(rows) <= max(1, limit)

    def readlink(self, ino: int) -> str:
        node = self.node(ino)
        if node.kind != SYMLINK or node.target is None:
            raise InvalidName(f"inode {ino} is not a symlink")
        return name_str(node.target)

    def _add(self, dir_ino: int, name: str, kind: int, mode: int, uid: int, gid: int,
             target: bytes | None = None) -> Inode:
        parent = self.directory(dir_ino)
        raw = check_name(name)
        if self.db.dirent(dir_ino, raw) is not None:
            raise Exists(f"{name!r} exists")
        with self.db.txn():
            now = now_ns()
            ino = self.db.take_ino()
            nlink = 2 if kind == DIRECTORY else 1
            size = len(target) if target is not None else 0
            node = Inode(ino, kind, mode & 0o7777, nlink, uid, gid, size, now, now, now,
                         dir_ino if kind == DIRECTORY else 0, target)
            self.db.put_inode(node)
            self.db.put_dirent(dir_ino, raw, ino)
            self.db.counters["files"] += 1
            parent.nlink += kind == DIRECTORY
            parent.mtime = parent.ctime = now
            self.db.put_inode(parent)
        return node

    def create(self, dir_ino: int, name: str, *, mode: int, uid: int, gid: int,
               exclusive: bool) -> Attr:
        """Non-exclusive on an existing file answers it as it is (truncation is a setattr)."""
        self.directory(dir_ino)
        found = self.db.dirent(dir_ino, check_name(name))
        if found is not None:
            node = self.node(found[0])
            if exclusive:
                raise Exists(f"{name!r} exists")
            if node.kind == DIRECTORY:
                raise IsDirectory(f"{name!r} is a directory")
            if node.kind != FILE:
                raise Exists(f"{name!r} exists and is not a regular file")
            return to_attr(node)
        return to_attr(self._add(dir_ino, name, FILE, mode, uid, gid))

    def mkdir(self, dir_ino: int, name: str, *, mode: int, uid: int, gid: int) -> Attr:
        return to_attr(self._add(dir_ino, name, DIRECTORY, mode, uid, gid))

    def symlink(self, dir_ino: int, name: str, target: str, *, uid: int, gid: int) -> Attr:
        raw = name_bytes(target)
        if not raw or b"\0" in raw:
            raise InvalidName("invalid symlink target")
        if len(raw) > MAX_SYMLINK_BYTES:
            raise NameTooLong(f"symlink target longer than {MAX_SYMLINK_BYTES} bytes")
        return to_attr(self._add(dir_ino, name, SYMLINK, 0o777, uid, gid, raw))

    def link(self, ino: int, dir_ino: int, name: str) -> Attr:
        node = self.node(ino)
        if node.kind == DIRECTORY:
            raise IsDirectory("a directory cannot be hard-linked")
        parent = self.directory(dir_ino)
        raw = check_name(name)
        if self.db.dirent(dir_ino, raw) is not None:
            raise Exists(f"{name!r} exists")
        with self.db.txn():
            now = now_ns()
            self.db.put_dirent(dir_ino, raw, ino)
            node.nlink += 1
            node.ctime = now
            self.db.put_inode(node)
            parent.mtime = parent.ctime = now
            self.db.put_inode(parent)
        return to_attr(node)

    def _unlink(self, parent: Inode, raw: bytes, node: Inode, now: int) -> None:
        """Drops one name of `node` (inside a transaction); the node goes with its last."""
        self.db.delete_dirent(parent.ino, raw)
        if node.kind == DIRECTORY:
            parent.nlink -= 1
            self.forget(node)
            return
        node.nlink -= 1
        if node.nlink <= 0:
            self.forget(node)
        else:
            node.ctime = now
            self.db.put_inode(node)

    def remove(self, dir_ino: int, name: str) -> None:
        parent = self.directory(dir_ino)
        raw = check_name(name)
        node = self._entry(dir_ino, raw)
        if node.kind == DIRECTORY:
            raise IsDirectory(f"{name!r} is a directory")
        with self.db.txn():
            now = now_ns()
            self._unlink(parent, raw, node, now)
            parent.mtime = parent.ctime = now
            self.db.put_inode(parent)

    def rmdir(self, dir_ino: int, name: str) -> None:
        parent = self.directory(dir_ino)
        raw = check_name(name)
        node = self._entry(dir_ino, raw)
        if node.kind != DIRECTORY:
            raise NotDirectory(f"{name!r} is not a directory")
        if self.db.has_entries(node.ino):
            raise NotEmpty(f"{name!r} is not empty")
        with self.db.txn():
            now = now_ns()
            self._unlink(parent, raw, node, now)
            parent.mtime = parent.ctime = now
            self.db.put_inode(parent)

    def _check_not_inside(self, moved: int, target_dir: int) -> None:
        ino = target_dir
        while True:
            if ino == moved:
                raise InvalidName("a directory cannot be moved into itself")
            if ino == ROOT_INO:
                return
            ino = self.node(ino).parent

    def rename(self, from_dir: int, from_name: str, to_dir: int, to_name: str) -> None:
        """POSIX rename: replaces the target (a file by a non-directory, an empty directory by
        a directory); a no-op when both names are one file. The entry gets a new cookie."""
        src_parent = self.directory(from_dir)
        dst_parent = src_parent if to_dir == from_dir else self.directory(to_dir)
        src_raw, dst_raw = check_name(from_name), check_name(to_name)
        node = self._entry(from_dir, src_raw)
        if from_dir == to_dir and src_raw == dst_raw:
            return
        found = self.db.dirent(to_dir, dst_raw)
        target = None if found is None else self.node(found[0])
        if target is not None and target.ino == node.ino:
            return
        if node.kind == DIRECTORY:
            self._check_not_inside(node.ino, to_dir)
        if target is not None:
            if node.kind == DIRECTORY and target.kind != DIRECTORY:
                raise NotDirectory(f"{to_name!r} is not a directory")
            if node.kind != DIRECTORY and target.kind == DIRECTORY:
                raise IsDirectory(f"{to_name!r} is a directory")
            if target.kind == DIRECTORY and self.db.has_entries(target.ino):
                raise NotEmpty(f"{to_name!r} is not empty")
        with self.db.txn():
            now = now_ns()
            if target is not None:
                self._unlink(dst_parent, dst_raw, target, now)
            self.db.delete_dirent(from_dir, src_raw)
            self.db.put_dirent(to_dir, dst_raw, node.ino)
            if node.kind == DIRECTORY and from_dir != to_dir:
                node.parent = to_dir
                src_parent.nlink -= 1
                dst_parent.nlink += 1
            node.ctime = now
            self.db.put_inode(node)
            for parent in {id(src_parent): src_parent, id(dst_parent): dst_parent}.values():
                parent.mtime = parent.ctime = now
                self.db.put_inode(parent)

    def usage(self) -> Usage:
        c = self.db.counters
        return Usage(c["used"], c["quota"], c["files"])

    def fsstat(self) -> FsStat:
        c = self.db.counters
        return FsStat(c["quota"], max(0, c["quota"] - c["used"]), MAX_FILES,
                      max(0, MAX_FILES - c["files"]))
