"""How a volume lives in the backend: keys, the head, and the metadata segments.

    volumes/heads/<id>              the head: JSON naming the latest sequence number and the
                                    checkpoint it builds on (plus quota and usage, for `usage`)
    volumes/<id>/checkpoint/<seq>   every metadata row as of <seq> (zstd JSON)
    volumes/<id>/log/<seq>          the rows one sync changed (zstd JSON); None = row deleted
    volumes/chunks/<ab>/<hex>       one zstd frame of a data chunk whose sha256 is <hex>

A volume's state at head H with checkpoint C is checkpoint C with logs C+1..H applied in order.
Heads live in their own directory so listing every volume does not walk the chunks; chunks are
sharded by their first byte so no directory of the filesystem backend grows without bound. A
head is written only after everything it names is flushed, so the backend always holds a
consistent state, and objects past the head (a sync cut short by a crash) are never read.

Heads and segments carry their format (`"v"`, aenv_common.state_files): format 1 is what every
snapstore has written. One of a newer format is refused, naming its key, and unknown fields in
either are refused too: a head's numbers and a segment's rows are the volume, and a reader that
dropped one would serve another file tree.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, TypeVar

import zstandard

from aenv_common.errors import Internal, NotFound
from aenv_common.state_files import StateFormat, Unknown
from aenv_snapstore.backends.base import Backend
from aenv_snapstore.volumes.errors import VolumeNotFound

PREFIX = "volumes/"
CHUNK_PREFIX = "volumes/chunks/"
HEAD_PREFIX = "volumes/heads/"
FORMAT = 1
HEAD_FORMAT = StateFormat(
    "volume head", FORMAT,
    frozenset({"incarnation", "seq", "checkpoint", "quota", "used", "files"}), Unknown.REFUSE,
    reader="snapstore", version_key="v")
SEGMENT_FORMAT = StateFormat(
    "volume segment", FORMAT, frozenset({"meta", "inodes", "dirents", "chunks"}), Unknown.REFUSE,
    reader="snapstore", version_key="v")

# Row layouts, shared by the SQLite tables and the segments:
# inode: [kind, mode, nlink, uid, gid, size, atime_ns, mtime_ns, ctime_ns, parent, target]
InodeRow = list[Any]
# dirent (dir, name) -> (ino, cookie); chunk (ino, index) -> hex digest
DirentKey = tuple[int, str]
ChunkKey = tuple[int, int]


def chunk_key(hexdigest: str) -> str:
    return f"{CHUNK_PREFIX}{hexdigest[:2]}/{hexdigest}"


def digest_from_key(key: str) -> str:
    return key.rpartition("/")[2]


def head_key(volume_id: str) -> str:
    return HEAD_PREFIX + volume_id


def volume_prefix(volume_id: str) -> str:
    return f"{PREFIX}{volume_id}/"


def log_key(volume_id: str, seq: int) -> str:
    return f"{PREFIX}{volume_id}/log/{seq:016d}"


def checkpoint_key(volume_id: str, seq: int) -> str:
    return f"{PREFIX}{volume_id}/checkpoint/{seq:016d}"


@dataclass(frozen=True)
class Head:
    incarnation: str  # new for every create/clone: a recreated id never matches an old copy
    seq: int
    checkpoint: int
    quota: int
    used: int
    files: int

    def encode(self) -> bytes:
        return HEAD_FORMAT.encode(vars(self))

    @classmethod
    def decode(cls, data: bytes, source: str = "volume head") -> Head:
        """:raise StateFileError: not a head this snapstore reads (`source` names it)."""
        raw = HEAD_FORMAT.decode(data, source)
        return cls(raw["incarnation"], raw["seq"], raw["checkpoint"], raw["quota"], raw["used"],
                   raw["files"])


@dataclass
class Segment:
    """Rows set (or deleted: None) by one sync, or every row (a checkpoint). Names and symlink
    targets are str carrying bytes by surrogateescape; JSON keeps lone surrogates as escapes."""

    meta: dict[str, int] = field(default_factory=dict)
    inodes: dict[int, InodeRow | None] = field(default_factory=dict)
    dirents: dict[DirentKey, tuple[int, int] | None] = field(default_factory=dict)
    chunks: dict[ChunkKey, str | None] = field(default_factory=dict)

    def encode(self) -> bytes:
        doc = {
            "meta": self.meta,
            "inodes": [[ino, row] for ino, row in self.inodes.items()],
            "dirents": [[d, n, v] for (d, n), v in self.dirents.items()],
            "chunks": [[i, x, v] for (i, x), v in self.chunks.items()],
        }
        return zstandard.ZstdCompressor(level=3).compress(SEGMENT_FORMAT.encode(doc))

    @classmethod
    def decode(cls, data: bytes, source: str = "volume segment") -> Segment:
        """:raise StateFileError: not a segment this snapstore reads (`source` names it)."""
        doc = SEGMENT_FORMAT.decode(zstandard.ZstdDecompressor().decompress(data), source)
        return cls(
            meta=doc["meta"],
            inodes={ino: row for ino, row in doc["inodes"]},
            dirents={(d, n): (tuple(v) if v is not None else None) for d, n, v in doc["dirents"]},
            chunks={(i, x): v for i, x, v in doc["chunks"]},
        )

    def apply(self, later: Segment) -> None:
        """Folds a later segment into this state (a checkpoint): deletions drop rows."""
        self.meta.update(later.meta)
        _fold(self.inodes, later.inodes)
        _fold(self.dirents, later.dirents)
        _fold(self.chunks, later.chunks)


K = TypeVar("K")
V = TypeVar("V")


def _fold(table: dict[K, V | None], changes: dict[K, V | None]) -> None:
    for key, value in changes.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value


async def read_head(backend: Backend, volume_id: str) -> Head:
    try:
        key = head_key(volume_id)
        return Head.decode(await backend.get(key), key)
    except NotFound:
        raise VolumeNotFound(f"volume {volume_id} not found") from None


async def load_state(backend: Backend, volume_id: str, head: Head) -> Segment:
    """The volume's every row as of `head`: its checkpoint with the later logs applied. Raises
    NotFound when an object is gone (a compaction since `head` was read: see `read_state`)."""
    checkpoint = checkpoint_key(volume_id, head.checkpoint)
    state = Segment.decode(await backend.get(checkpoint), checkpoint)
    keys = [log_key(volume_id, seq) for seq in range(head.checkpoint + 1, head.seq + 1)]
    logs = await asyncio.gather(*(backend.get(key) for key in keys))
    for key, data in zip(keys, logs, strict=True):
        state.apply(Segment.decode(data, key))
    return state


async def read_state(backend: Backend, volume_id: str) -> tuple[Head, Segment]:
    """The current head and its state (VolumeNotFound without a head), read again when a
    compaction deleted what the head read named."""
    for _attempt in range(5):
        head = await read_head(backend, volume_id)
        try:
            return head, await load_state(backend, volume_id, head)
        except NotFound:
            await asyncio.sleep(0.05)
    raise Internal(f"volume {volume_id} is missing metadata its head names")
