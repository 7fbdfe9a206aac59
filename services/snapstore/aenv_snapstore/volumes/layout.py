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
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

import zstandard

from aenv_common.errors import Internal, NotFound
from aenv_snapstore.backends.base import Backend
from aenv_snapstore.volumes.errors import VolumeNotFound

PREFIX = "volumes/"
CHUNK_PREFIX = "volumes/chunks/"
HEAD_PREFIX = "volumes/heads/"
FORMAT = 1

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
        return json.dumps({"v": FORMAT, **vars(self)}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Head:
        raw = json.loads(data)
        if raw.get("v") != FORMAT:
            raise Internal(f"volume head of unknown format {raw.get('v')!r}")
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
            "v": FORMAT,
            "meta": self.meta,
            "inodes": [[ino, row] for ino, row in self.inodes.items()],
            "dirents": [[d, n, v] for (d, n), v in self.dirents.items()],
            "chunks": [[i, x, v] for (i, x), v in self.chunks.items()],
        }
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True)
        return zstandard.ZstdCompressor(level=3).compress(text.encode())

    @classmethod
    def decode(cls, data: bytes) -> Segment:
        doc = json.loads(zstandard.ZstdDecompressor().decompress(data))
        if doc.get("v") != FORMAT:
            raise Internal(f"volume segment of unknown format {doc.get('v')!r}")
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
        return Head.decode(await backend.get(head_key(volume_id)))
    except NotFound:
        raise VolumeNotFound(f"volume {volume_id} not found") from None


async def load_state(backend: Backend, volume_id: str, head: Head) -> Segment:
    """The volume's every row as of `head`: its checkpoint with the later logs applied. Raises
    NotFound when an object is gone (a compaction since `head` was read: see `read_state`)."""
    state = Segment.decode(await backend.get(checkpoint_key(volume_id, head.checkpoint)))
    logs = await asyncio.gather(*(
        backend.get(log_key(volume_id, seq)) for seq in range(head.checkpoint + 1, head.seq + 1)
    ))
    for data in logs:
        state.apply(Segment.decode(data))
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
