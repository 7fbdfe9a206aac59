"""Splitting a file into content-addressed chunks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from aenv_common.errors import InvalidArgument
from aenv_common.snapshots.codec import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, ZERO_CHUNK, digest_of


def check_chunk_size(chunk_size: int) -> None:
    if not 0 < chunk_size <= MAX_CHUNK_SIZE:
        raise InvalidArgument(f"chunk size {chunk_size} not in 1..{MAX_CHUNK_SIZE}")


def _next_data_offset(fd: int, offset: int, end: int) -> int:
    """Start of the next non-hole byte at or after `offset` (`end` if none), so slices inside
    holes of sparse files are never read."""
    try:
        return os.lseek(fd, offset, os.SEEK_DATA)
    except OSError:  # ENXIO: only a hole remains; EINVAL: the filesystem has no SEEK_DATA
        return end if offset < end else offset


def chunk_file(path: Path, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Iterator[tuple[str, bytes]]:
    """Yields (digest, data) per `chunk_size` slice of the file, in order. Digest is
    "sha256:<hex>" of the uncompressed slice; an all-zero slice yields (ZERO_CHUNK, b"")."""
    check_chunk_size(chunk_size)
    zeros = bytes(chunk_size)  # compared with memcmp: far cheaper than hashing
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        data_at = -1
        for offset in range(0, size, chunk_size):
            length = min(chunk_size, size - offset)
            if data_at < offset:
                data_at = _next_data_offset(fd, offset, size)
            if data_at >= offset + length:
                yield ZERO_CHUNK, b""
                continue
            data = os.pread(fd, length, offset)
            if len(data) != length:
                raise InvalidArgument(f"{path} shrank while being chunked")
            if data == (zeros if length == chunk_size else zeros[:length]):
                yield ZERO_CHUNK, b""
            else:
                yield digest_of(data), data
