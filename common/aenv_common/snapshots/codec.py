"""Chunk encoding shared by the snapstore server and its clients: digests, zstd frames, names.

A chunk is addressed by the sha256 of its uncompressed bytes and stored as one zstd frame, so
both sides can verify every chunk they receive against its address.
"""

from __future__ import annotations

import hashlib
import re
import threading

import zstandard

from aenv_common.errors import Internal, InvalidArgument

# gRPC's default message limit is 4 MiB; a 2 MiB chunk (plus zstd's worst-case growth) fits in one
# message, so no chunk ever needs to be split across messages.
MAX_CHUNK_SIZE = 2 * 1024 * 1024
DEFAULT_CHUNK_SIZE = MAX_CHUNK_SIZE
# Manifest marker for an all-zero slice: never stored, restored as a hole.
ZERO_CHUNK = "zero"
# Level 1: the fastest level that still compresses well; speed matters more than ratio here.
ZSTD_LEVEL = 1

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_local = threading.local()


class CorruptChunk(Internal):
    """A chunk's bytes do not match its digest (or are not a valid zstd frame)."""


def digest_of(data: bytes | memoryview) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_valid_digest(digest: str) -> bool:
    return _DIGEST_RE.match(digest) is not None


def check_digest(digest: str) -> None:
    if not is_valid_digest(digest):
        raise InvalidArgument(f"invalid chunk digest {digest!r}: expected sha256:<64 hex>")


def check_name(kind: str, name: str) -> None:
    """Snapshot ids and file names become object keys and file names: no separators, no dots
    first (so no '..' and no hidden temp-file clash)."""
    if _NAME_RE.match(name) is None:
        raise InvalidArgument(
            f"invalid {kind} {name!r}: use 1-128 of [A-Za-z0-9._-], not '.' first"
        )


def _compressor() -> zstandard.ZstdCompressor:
    # zstd contexts are not thread-safe; one per thread keeps compression parallel.
    comp: zstandard.ZstdCompressor | None = getattr(_local, "compressor", None)
    if comp is None:
        comp = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
        _local.compressor = comp
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
    dec: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if dec is None:
        dec = zstandard.ZstdDecompressor()
        _local.decompressor = dec
    return dec


def compress(data: bytes) -> bytes:
    return _compressor().compress(data)


def decode_chunk(digest: str, compressed: bytes, size: int) -> bytes:
    """Decompresses a chunk and proves it is the one `digest` names; raises CorruptChunk if not."""
    if size > MAX_CHUNK_SIZE:
        raise CorruptChunk(f"chunk {digest}: size {size} exceeds the {MAX_CHUNK_SIZE} byte maximum")
    try:
        data = _decompressor().decompress(compressed, max_output_size=MAX_CHUNK_SIZE)
    except zstandard.ZstdError as err:
        raise CorruptChunk(f"chunk {digest}: not a valid zstd frame ({err})") from err
    if len(data) != size:
        raise CorruptChunk(f"chunk {digest}: {len(data)} bytes, expected {size}")
    actual = digest_of(data)
    if actual != digest:
        raise CorruptChunk(f"chunk {digest}: content hashes to {actual}")
    return data
