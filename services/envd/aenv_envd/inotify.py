"""Recursive directory watching with Linux inotify through ctypes (no extra dependency).

Event mapping follows fsnotify, which upstream envd uses: create/moved-to -> CREATE, modify ->
WRITE, delete -> REMOVE, moved-from -> RENAME, attrib -> CHMOD.

Watches are made as envd (root) whoever asks, as upstream envd makes them: the VM is the boundary,
and the default `user` may sudo anyway.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

from .errors import EnvdError
from .fdio import wait_fd
from .users import os_error_to_envd

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
WATCH_MASK = IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


@dataclass(frozen=True)
class FsEvent:
    relative_name: str  # path relative to the watched directory
    absolute_path: str
    kind: str  # CREATE | WRITE | REMOVE | RENAME | CHMOD


def event_kinds(mask: int) -> list[str]:
    kinds: list[str] = []
    if mask & (IN_CREATE | IN_MOVED_TO):
        kinds.append("CREATE")
    if mask & IN_MODIFY:
        kinds.append("WRITE")
    if mask & IN_DELETE:
        kinds.append("REMOVE")
    if mask & IN_MOVED_FROM:
        kinds.append("RENAME")
    if mask & IN_ATTRIB:
        kinds.append("CHMOD")
    return kinds


_libc: ctypes.CDLL | None = None


def _load_libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)  # libc is loaded; finding it forks tools
    return _libc


class DirectoryWatcher:
    """inotify watches on `root` (and its subdirectories when recursive).

    :raise EnvdError: `root` cannot be watched (not found, not a directory).
    """

    def __init__(self, root: str, recursive: bool) -> None:
        self.root = root.rstrip("/") or "/"
        self.recursive = recursive
        self._libc = _load_libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise EnvdError("internal", f"inotify_init1 failed: {os.strerror(err)}")
        self._fd = fd
        self._dirs: dict[int, str] = {}
        self._pending = b""
        self._add_tree(self.root)

    def _add_watch(self, directory: str) -> None:
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), WATCH_MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if directory == self.root:
                self.close()
                raise os_error_to_envd(OSError(err, os.strerror(err)), directory)
            log.warning("cannot watch directory", extra={"dir": directory, "errno": err})
            return
        self._dirs[wd] = directory

    def _add_tree(self, directory: str) -> None:
        self._add_watch(directory)
        if not self.recursive:
            return
        for parent, subdirs, _ in os.walk(directory):
            for sub in subdirs:
                self._add_watch(os.path.join(parent, sub))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    async def events(self) -> AsyncIterator[FsEvent]:
        while self._fd >= 0:
            await wait_fd(self._fd)
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                continue
            for event in self._parse(data):
                yield event

    def _parse(self, data: bytes) -> list[FsEvent]:
        buffer = self._pending + data
        events: list[FsEvent] = []
        offset = 0
        while offset + _HEADER.size <= len(buffer):
            wd, mask, _cookie, length = _HEADER.unpack_from(buffer, offset)
            end = offset + _HEADER.size + length
            if end > len(buffer):
                break
            raw_name = buffer[offset + _HEADER.size : end].rstrip(b"\0")
            offset = end
            events.extend(self._translate(wd, mask, os.fsdecode(raw_name)))
        self._pending = buffer[offset:]
        return events

    def _translate(self, wd: int, mask: int, name: str) -> list[FsEvent]:
        if mask & IN_Q_OVERFLOW:
            log.warning("inotify queue overflow", extra={"root": self.root})
            return []
        if mask & IN_IGNORED:
            self._dirs.pop(wd, None)
            return []
        directory = self._dirs.get(wd)
        if directory is None or not name:
            return []
        path = os.path.join(directory, name)
        relative = os.path.relpath(path, self.root)
        events = [FsEvent(relative, path, kind) for kind in event_kinds(mask)]
        if self.recursive and mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
            self._add_tree(path)
            events.extend(self._already_inside(path))
        return events

    def _already_inside(self, directory: str) -> list[FsEvent]:
        """What appeared in a new directory before its watch existed (`mkdir -p a/b && echo >
        a/b/f` races the watch on `a`): reported as created (and written, when not empty), so a
        recursive watch loses nothing."""
        events: list[FsEvent] = []
        for parent, subdirs, files in os.walk(directory):
            for entry in [*subdirs, *files]:
                path = os.path.join(parent, entry)
                relative = os.path.relpath(path, self.root)
                events.append(FsEvent(relative, path, "CREATE"))
                if entry in files and _non_empty(path):
                    events.append(FsEvent(relative, path, "WRITE"))
        return events


def _non_empty(path: str) -> bool:
    try:
        return os.lstat(path).st_size > 0
    except OSError:
        return False
