"""The local working copy of a volume's file data: one sparse file per inode.

A chunk of the working copy is either present (its bytes are the file's) or not (its bytes are
zeros, a hole, until fetched from the backend); `metadata.py` keeps which. Files are created on
first use with their inode's size, so a volume rebuilt from the backend costs no data I/O until
it is read. Only the volume's thread calls this.
"""

from __future__ import annotations

import os
import shutil
from collections import OrderedDict
from pathlib import Path

_MAX_OPEN = 64


class WorkCopy:
    def __init__(self, root: Path) -> None:
        self._root = root
        root.mkdir(parents=True, exist_ok=True)
        self._fds: OrderedDict[int, int] = OrderedDict()  # ino -> fd, least recently used first

    def _path(self, ino: int) -> Path:
        return self._root / f"{ino & 0xFF:02x}" / str(ino)

    def _fd(self, ino: int, size: int) -> int:
        fd = self._fds.pop(ino, None)
        if fd is None:
            path = self._path(ino)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                path.parent.mkdir(exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                os.ftruncate(fd, size)
            while len(self._fds) >= _MAX_OPEN:
                os.close(self._fds.popitem(last=False)[1])
        self._fds[ino] = fd
        return fd

    def read(self, ino: int, size: int, offset: int, count: int) -> bytes:
        return os.pread(self._fd(ino, size), count, offset)

    def write(self, ino: int, size: int, offset: int, data: bytes | memoryview) -> None:
        fd = self._fd(ino, size)
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written

    def truncate(self, ino: int, size: int, new_size: int) -> None:
        os.ftruncate(self._fd(ino, size), new_size)

    def remove(self, ino: int) -> None:
        fd = self._fds.pop(ino, None)
        if fd is not None:
            os.close(fd)
        self._path(ino).unlink(missing_ok=True)

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self._root, ignore_errors=True)
