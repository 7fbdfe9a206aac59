"""NFSv3 attribute structures: fattr3, post_op_attr, wcc_data, sattr3, and ACCESS's answer."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from .api import AttrLike
from .consts import (
    ACCESS3_DELETE,
    ACCESS3_EXECUTE,
    ACCESS3_EXTEND,
    ACCESS3_LOOKUP,
    ACCESS3_MODIFY,
    ACCESS3_READ,
    DONT_CHANGE,
    NF3DIR,
    NF3LNK,
    NF3REG,
    SET_TO_CLIENT_TIME,
    SET_TO_SERVER_TIME,
)
from .rpc import Credential
from .xdr import Packer, Unpacker, XdrError

_FTYPE = {"FILE": NF3REG, "DIRECTORY": NF3DIR, "SYMLINK": NF3LNK}
_NS = 1_000_000_000
_U32_MAX = 0xFFFFFFFF


def ftype(attr: AttrLike) -> int:
    return _FTYPE[attr.kind.name]


def is_dir(attr: AttrLike) -> bool:
    return attr.kind.name == "DIRECTORY"


def fsid_of(seen_as: str) -> int:
    """One file system id per export, stable across connections and server restarts."""
    return int.from_bytes(hashlib.sha256(seen_as.encode("utf-8")).digest()[:8], "big")


def nfstime(packer: Packer, ns: int) -> None:
    seconds, nanos = divmod(max(ns, 0), _NS)
    packer.u32(min(seconds, _U32_MAX)).u32(nanos)


def split_time(ns: int) -> tuple[int, int]:
    seconds, nanos = divmod(max(ns, 0), _NS)
    return min(seconds, _U32_MAX), nanos


def fattr3(packer: Packer, attr: AttrLike, fsid: int) -> None:
    packer.u32(ftype(attr)).u32(attr.mode & 0o7777).u32(attr.nlink)
    packer.u32(attr.uid).u32(attr.gid).u64(attr.size).u64(attr.used)
    packer.u32(0).u32(0)  # rdev: no devices here
    packer.u64(fsid).u64(attr.ino)
    nfstime(packer, attr.atime_ns)
    nfstime(packer, attr.mtime_ns)
    nfstime(packer, attr.ctime_ns)


def post_op_attr(packer: Packer, attr: AttrLike | None, fsid: int) -> None:
    packer.boolean(attr is not None)
    if attr is not None:
        fattr3(packer, attr, fsid)


def pre_op_attr(packer: Packer, attr: AttrLike | None) -> None:
    packer.boolean(attr is not None)
    if attr is not None:
        packer.u64(attr.size)
        nfstime(packer, attr.mtime_ns)
        nfstime(packer, attr.ctime_ns)


def wcc_data(packer: Packer, before: AttrLike | None, after: AttrLike | None, fsid: int) -> None:
    pre_op_attr(packer, before)
    post_op_attr(packer, after, fsid)


def post_op_fh3(packer: Packer, handle: bytes | None) -> None:
    packer.boolean(handle is not None)
    if handle is not None:
        packer.opaque(handle)


@dataclass(frozen=True)
class SetAttrs:
    """A decoded sattr3: None for each attribute the client leaves alone."""

    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    size: int | None = None
    atime_ns: int | None = None
    mtime_ns: int | None = None

    def any(self) -> bool:
        return any(value is not None for value in vars(self).values())

    def times_only(self) -> SetAttrs:
        return SetAttrs(atime_ns=self.atime_ns, mtime_ns=self.mtime_ns)


def _set_time(unpacker: Unpacker, now_ns: int) -> int | None:
    how = unpacker.u32()
    if how == DONT_CHANGE:
        return None
    if how == SET_TO_SERVER_TIME:
        return now_ns
    if how == SET_TO_CLIENT_TIME:
        seconds, nanos = unpacker.u32(), unpacker.u32()
        return seconds * _NS + nanos
    raise XdrError(f"bad time_how {how}")


def sattr3(unpacker: Unpacker) -> SetAttrs:
    mode = unpacker.u32() & 0o7777 if unpacker.boolean() else None
    uid = unpacker.u32() if unpacker.boolean() else None
    gid = unpacker.u32() if unpacker.boolean() else None
    size = unpacker.u64() if unpacker.boolean() else None
    now_ns = time.time_ns()
    atime_ns = _set_time(unpacker, now_ns)
    mtime_ns = _set_time(unpacker, now_ns)
    return SetAttrs(mode, uid, gid, size, atime_ns, mtime_ns)


def access(attr: AttrLike, cred: Credential, wanted: int, read_only: bool) -> int:
    """The ACCESS3 bits of `wanted` the caller has, from the mode bits as a local kernel would
    judge them: root may do everything except execute a file no one may execute."""
    directory = is_dir(attr)
    if cred.uid == 0:
        bits = 0o7
        if not directory and not attr.mode & 0o111:
            bits = 0o6
    elif cred.uid == attr.uid:
        bits = (attr.mode >> 6) & 0o7
    elif cred.gid == attr.gid or attr.gid in cred.gids:
        bits = (attr.mode >> 3) & 0o7
    else:
        bits = attr.mode & 0o7
    granted = 0
    if bits & 0o4:
        granted |= ACCESS3_READ
    if bits & 0o2 and not read_only:
        granted |= ACCESS3_MODIFY | ACCESS3_EXTEND | (ACCESS3_DELETE if directory else 0)
    if bits & 0o1:
        granted |= ACCESS3_LOOKUP if directory else ACCESS3_EXECUTE
    return granted & wanted
