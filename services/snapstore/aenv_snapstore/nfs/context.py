"""What every NFS procedure works with: the connection's session, the caller, and the helpers
that turn a volume error into the status and failure arm the reply carries."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from .api import AttrLike
from .attrs import fsid_of
from .consts import NAME_MAX, NFS3_FHSIZE, NFS3ERR_NAMETOOLONG, NFS3ERR_SERVERFAULT
from .rpc import Credential
from .session import Nfs3Error, Session, Target, status_of
from .xdr import Packer, Unpacker

log = logging.getLogger("aenv_snapstore.nfs")


@dataclass(frozen=True)
class Ctx:
    session: Session
    cred: Credential
    verifier: bytes  # this server instance's write verifier (8 bytes)
    peer: str


@functools.lru_cache(maxsize=1024)
def fsid(seen_as: str) -> int:
    return fsid_of(seen_as)


def failure(exc: Exception, proc: str) -> int:
    """The nfsstat3 of a failed call; an unexpected error is a SERVERFAULT, logged."""
    status = status_of(exc)
    if status is None:
        log.error("nfs call failed", exc_info=exc, extra={"proc": proc})
        return NFS3ERR_SERVERFAULT
    return status


async def attr_or_none(target: Target | None, ino: int | None = None) -> AttrLike | None:
    """Best-effort attributes for a reply's post-op or failure arm (absent when unavailable)."""
    if target is None:
        return None
    try:
        return await target.volume.getattr(target.ino if ino is None else ino)
    except Exception:
        return None


def handle_arg(args: Unpacker) -> bytes:
    return args.opaque(NFS3_FHSIZE)


def name_arg(args: Unpacker) -> bytes:
    """A filename3 (raw bytes; checked by `check_name` inside the call's error handling)."""
    return args.opaque(NAME_MAX * 4)


def check_name(raw: bytes) -> str:
    """A name as the Volume API takes it: NFS names are bytes (any but "/" and NUL, which the
    volume refuses), carried in str by surrogateescape as the store does."""
    if len(raw) > NAME_MAX:
        raise Nfs3Error(NFS3ERR_NAMETOOLONG, "name longer than 255 bytes")
    return raw.decode("utf-8", "surrogateescape")


def status(code: int) -> Packer:
    return Packer().u32(code)
