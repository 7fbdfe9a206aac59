"""Client side of snapstore: chunk, push and pull snapshot files (memory, device state, disk
layers) as content-addressed, zstd-compressed chunks plus a manifest."""

from aenv_common.snapshots._rpc import snapstore_stub
from aenv_common.snapshots.chunking import chunk_file
from aenv_common.snapshots.codec import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, ZERO_CHUNK
from aenv_common.snapshots.pull import pull_files
from aenv_common.snapshots.push import PushStats, push_files

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "MAX_CHUNK_SIZE",
    "ZERO_CHUNK",
    "PushStats",
    "chunk_file",
    "pull_files",
    "push_files",
    "snapstore_stub",
]
