"""What a volume's callers see (attributes, directory entries, statistics) and the rules on names
and ids every operation checks the same way."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from aenv_common.errors import InvalidArgument
from aenv_snapstore.volumes.errors import InvalidName, NameTooLong

ROOT_INO = 1  # inode numbers are never reused within a volume (no generation needed)
# A volume file's data is synced and fetched in slices of this size; also the NFS rtmax/wtmax.
CHUNK_SIZE = 1 << 20
# The largest file a volume holds (4 TiB): far past any quota, small enough for every client.
MAX_FILE_SIZE = 1 << 42
MAX_NAME_BYTES = 255
MAX_SYMLINK_BYTES = 4095
# Directory cookies start here: 1 and 2 stay free for a server's own "." and ".." entries.
FIRST_COOKIE = 3
# Root of a new volume: writable by every guest user (guests run as root or as "user").
ROOT_MODE = 0o777

_VOLUME_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$")
# Names below volumes/ that are not volume ids (chunk and head directories, the ticket key).
_RESERVED_IDS = frozenset({"chunks", "heads", "ticket-key"})


class Kind(enum.Enum):
    FILE = 1
    DIRECTORY = 2
    SYMLINK = 3


@dataclass(frozen=True)
class Attr:
    ino: int
    kind: Kind
    mode: int  # permission bits only (0o7777)
    nlink: int
    uid: int
    gid: int
    size: int
    used: int  # bytes allocated (~size)
    atime_ns: int
    mtime_ns: int
    ctime_ns: int


@dataclass(frozen=True)
class DirEntry:
    name: str
    cookie: int  # > 0, stable while the entry exists, resumable after it is gone
    attr: Attr


@dataclass(frozen=True)
class FsStat:
    total_bytes: int
    free_bytes: int
    total_files: int
    free_files: int


@dataclass(frozen=True)
class Usage:
    used_bytes: int
    quota_bytes: int
    files: int


def is_volume_id(volume_id: str) -> bool:
    """Ids become object keys and directory names: the gateway mints `vol-` + 20 of [a-z0-9]."""
    return _VOLUME_ID_RE.match(volume_id) is not None and volume_id not in _RESERVED_IDS


def check_volume_id(volume_id: str) -> None:
    if not is_volume_id(volume_id):
        raise InvalidArgument(f"invalid volume id {volume_id!r}")


def name_bytes(name: str) -> bytes:
    """A name as stored: NFS names are bytes, carried in str by surrogateescape."""
    try:
        return name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise InvalidName("name is not encodable") from None


def name_str(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def check_name(name: str) -> bytes:
    """1-255 bytes, no "/" or NUL, not "." or ".."; returns the stored form."""
    raw = name_bytes(name)
    if not raw or raw in (b".", b"..") or b"/" in raw or b"\0" in raw:
        raise InvalidName(f"invalid name {name!r}")
    if len(raw) > MAX_NAME_BYTES:
        raise NameTooLong(f"name longer than {MAX_NAME_BYTES} bytes")
    return raw


def split_path(path: str) -> list[bytes]:
    """An absolute, normalized path's components ("/" has none)."""
    if not path.startswith("/"):
        raise InvalidName(f"path {path!r} is not absolute")
    if path == "/":
        return []
    return [check_name(part) for part in path[1:].split("/")]


def blocks_used(kind: Kind, size: int) -> int:
    """Bytes a node takes, as `du` counts them: whole 4 KiB blocks (a directory is one)."""
    if kind is Kind.DIRECTORY:
        return 4096
    return -(-size // 4096) * 4096
