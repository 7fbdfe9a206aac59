"""Content-addressed build cache: one directory per (artifact kind, hash of its inputs).

A build runs in a temporary sibling directory and is renamed into place only when it has
succeeded, so a present entry is always complete; a per-key file lock keeps concurrent node
agents (or test sessions) from building the same entry twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Not part of a package's build inputs: caches and build by-products that differ run to run.
_IGNORED_NAMES = frozenset(
    {"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache", "build", "dist"}
)


class CacheKey:
    """Accumulates labelled inputs into a stable hex digest."""

    def __init__(self, kind: str) -> None:
        self._hash = hashlib.sha256()
        self.add("kind", kind)

    def add(self, label: str, value: str | bytes) -> CacheKey:
        data = value.encode() if isinstance(value, str) else value
        for part in (label.encode(), data):
            self._hash.update(len(part).to_bytes(8, "little"))
            self._hash.update(part)
        return self

    def add_file(self, label: str, path: Path) -> CacheKey:
        return self.add(label, path.read_bytes())

    def add_tree(self, label: str, root: Path) -> CacheKey:
        """Hash every file's relative path, executable bit and content (or symlink target)."""
        for path in sorted(_walk(root)):
            rel = f"{label}/{path.relative_to(root).as_posix()}"
            if path.is_symlink():
                self.add(rel, "symlink:" + os.readlink(path))
            else:
                executable = bool(path.stat().st_mode & stat.S_IXUSR)
                self.add(rel + (":x" if executable else ""), path.read_bytes())
        return self

    def hexdigest(self) -> str:
        return self._hash.hexdigest()[:32]


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d for d in dirnames if d not in _IGNORED_NAMES and not d.endswith(".egg-info")
        ]
        found.extend(Path(dirpath, f) for f in filenames)
    return found


def remove_build_dir(path: Path) -> None:
    """rmtree that first detaches mounts left inside (mmdebstrap mounts /proc, /dev in its
    target: a crashed build must not make rmtree descend into the host's /dev)."""
    if not path.exists():
        return
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as mountinfo:
        mounts = [line.split()[4] for line in mountinfo]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount], check=False)
    shutil.rmtree(path)


@dataclass(frozen=True)
class CacheEntry:
    path: Path
    built: bool  # False when an existing entry was reused
    seconds: float  # build time, 0 when reused


@contextlib.asynccontextmanager
async def file_lock(lock_path: Path) -> AsyncIterator[None]:
    """An exclusive lock between processes (several node agents or test runs share a cache)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


async def cached_build(
    cache_dir: Path, kind: str, key: str, build: Callable[[Path], Awaitable[None]]
) -> CacheEntry:
    """Return cache_dir/kind/key, running `build(tmp_dir)` first if it does not exist yet."""
    kind_dir = cache_dir / kind
    kind_dir.mkdir(parents=True, exist_ok=True)
    final = kind_dir / key
    if final.is_dir():
        return CacheEntry(final, built=False, seconds=0.0)
    async with file_lock(kind_dir / f".{key}.lock"):
        if final.is_dir():  # another builder finished while we waited
            return CacheEntry(final, built=False, seconds=0.0)
        tmp = kind_dir / f".tmp-{key}"
        await asyncio.to_thread(remove_build_dir, tmp)  # left by a crashed build; we hold the lock
        tmp.mkdir()
        started = time.monotonic()
        try:
            await build(tmp)
            os.rename(tmp, final)
        finally:
            await asyncio.to_thread(remove_build_dir, tmp)
        seconds = time.monotonic() - started
    log.info("artifact built", extra={"kind": kind, "key": key, "seconds": round(seconds, 2)})
    return CacheEntry(final, built=True, seconds=seconds)
