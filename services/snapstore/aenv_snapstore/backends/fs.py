"""Backend on a local or shared (NFS-like) filesystem; the single-node default."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

from aenv_common.errors import InvalidArgument, NotFound
from aenv_snapstore.backends.base import ObjectInfo

# Temporary files carry this prefix; listing skips them.
_TMP_PREFIX = ".tmp-"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FsBackend:
    def __init__(self, root: Path) -> None:
        self._root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            raise InvalidArgument(f"invalid object key {key!r}")
        return self._root.joinpath(*parts)

    async def has(self, key: str) -> bool:
        return await asyncio.to_thread(self._path(key).exists)

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, self._path(key), data)

    @staticmethod
    def _put(path: Path, data: bytes) -> None:
        """Write to a temp file, fsync, rename over: a crash leaves the old object or the new one,
        never a torn one. The directory entry becomes durable in `flush`, batched per directory."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{_TMP_PREFIX}{path.name}.{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    async def flush(self, keys: Iterable[str]) -> None:
        dirs = {self._path(key).parent for key in keys}
        await asyncio.gather(*(asyncio.to_thread(_fsync_dir, d) for d in dirs))

    async def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            raise NotFound(f"object {key} not found") from None

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._path(key).unlink, True)

    async def list(self, prefix: str) -> AsyncIterator[ObjectInfo]:
        infos = await asyncio.to_thread(lambda: list(self._scan(prefix)))
        for info in infos:
            yield info

    def _scan(self, prefix: str) -> Iterator[ObjectInfo]:
        top = self._root / prefix.rpartition("/")[0]  # walk only the subtree the prefix is in
        for dirpath, _dirs, names in os.walk(top):
            for name in names:
                if name.startswith(_TMP_PREFIX):
                    continue
                path = Path(dirpath, name)
                key = path.relative_to(self._root).as_posix()
                if not key.startswith(prefix):
                    continue
                try:
                    st = path.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                yield ObjectInfo(key, st.st_size, st.st_mtime)

    async def close(self) -> None:
        return None
