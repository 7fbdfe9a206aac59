"""Content-addressed blobs: digests, verified reading, and the node's layer cache.

A blob is named by the hash of its bytes (`sha256:<hex>`), so a name says what the bytes must be,
wherever they came from. Two rules follow, and this module is where both are kept:

- bytes are trusted only once they have been hashed and compared with their digest (and length):
  `HashingReader` hashes what passes through it, `BlobCache.fetch` refuses to keep what does not
  match;
- a present cache entry is always complete: a blob is written to a temporary file and renamed to
  `<cache>/blobs/sha256/<hex>` only after it verified, under a per-digest file lock, so two builds
  fetching the same layer at once download it once and never read half a file.

Layers are shared by every image that has them (all `python:*` tags share Debian's base layer), so
the cache is keyed by digest alone, not by image.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol

from aenv_nodeagent.artifacts.cache import file_lock

from .errors import LayerCorrupt, UnsupportedImage

log = logging.getLogger(__name__)

_SHA256_RE = re.compile(r"^sha256:([0-9a-f]{64})$")


class Readable(Protocol):
    """What a layer's bytes are read through: a file, an archive member, a decompressor."""

    def read(self, n: int = -1, /) -> bytes: ...


def digest_hex(digest: str) -> str:
    """The hex part of a sha256 digest; anything else (other algorithms, junk) is refused, so a
    digest can safely become a file name."""
    match = _SHA256_RE.match(digest)
    if match is None:
        raise UnsupportedImage(digest[:80], "only sha256 digests are supported")
    return match.group(1)


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class HashingReader:
    """A read-only stream that hashes (and counts) every byte read through it."""

    def __init__(self, raw: Readable) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._hash.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        """Read to the end (a tar reader stops at its end marker; the digest covers the padding)."""
        while self.read(1 << 20):
            pass

    @property
    def digest(self) -> str:
        return "sha256:" + self._hash.hexdigest()

    def verify(self, digest: str, size: int | None = None, what: str = "blob") -> None:
        if size is not None and self.size != size:
            raise LayerCorrupt(digest, f"{what} is {self.size} bytes, expected {size}")
        if self.digest != digest:
            raise LayerCorrupt(digest, f"{what} hashes to {self.digest}")


class BlobCache:
    """Verified blobs on disk at `<root>/blobs/sha256/<hex>`, shared by every image."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._blobs = root / "blobs" / "sha256"
        self._locks = root / "locks"
        self._tmp = root / "tmp"

    def path(self, digest: str) -> Path:
        return self._blobs / digest_hex(digest)

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def discard(self, digest: str) -> None:
        """Forget a blob found corrupt on reading, so the next build fetches it again."""
        with contextlib.suppress(FileNotFoundError):
            self.path(digest).unlink()
        log.warning("discarded corrupt cached blob", extra={"digest": digest})

    async def fetch(
        self, digest: str, size: int, chunks: Callable[[], AsyncIterator[bytes]]
    ) -> bool:
        """Make `digest` present, downloading it with `chunks()` unless it already is (or another
        build is fetching it, in which case wait for that one). True if this call downloaded it."""
        final = self.path(digest)
        if final.is_file():
            _mark_used(final)
            return False
        for folder in (self._blobs, self._locks, self._tmp):
            folder.mkdir(parents=True, exist_ok=True)
        async with file_lock(self._locks / f"{digest_hex(digest)}.lock"):
            if final.is_file():
                return False
            await self._download(digest, size, chunks, final)
        return True

    async def _download(
        self, digest: str, size: int, chunks: Callable[[], AsyncIterator[bytes]], final: Path
    ) -> None:
        hasher, written = hashlib.sha256(), 0
        fd, tmp_name = tempfile.mkstemp(dir=self._tmp, prefix=f"{digest_hex(digest)[:16]}-")
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks():
                    written += len(chunk)
                    if written > size:  # a lying server must not fill the disk
                        raise LayerCorrupt(digest, f"blob is larger than its {size} bytes")
                    hasher.update(chunk)
                    out.write(chunk)
            if written != size:
                raise LayerCorrupt(digest, f"blob is {written} bytes, expected {size}")
            if "sha256:" + hasher.hexdigest() != digest:
                raise LayerCorrupt(digest, f"blob hashes to sha256:{hasher.hexdigest()}")
            os.chmod(tmp_name, 0o444)
            os.rename(tmp_name, final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise


def _mark_used(blob: Path) -> None:
    """Its use time: the node's bound on this cache removes the least recently used first
    (templates/bounds.py)."""
    with contextlib.suppress(OSError):
        os.utime(blob)
