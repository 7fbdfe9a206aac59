"""A connection's view of the volumes: the preamble's grants, file handles, and the errors NFS
answers with.

A relay opens every connection with `AENV-VOLUMES 1 <ticket> ...\\n`; each ticket is a grant of
one volume under the id its guest knows it by (`seen_as`). A handle names that id and an inode,
and is resolved only through this connection's grants: a handle naming a volume the connection
was not granted is STALE, so no guest reaches another's volume whatever handle it forges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aenv_common.errors import AenvError
from aenv_snapstore.volumes.tickets import BadTicket, Grant, TicketKey

from .api import VolumeLike, VolumeStoreLike
from .consts import NFS3_FHSIZE, NFS3ERR_BADHANDLE, NFS3ERR_ROFS, NFS3ERR_STALE

PREAMBLE_MAGIC = "AENV-VOLUMES"
PREAMBLE_VERSION = "1"
MAX_PREAMBLE = 64 * 1024
_TICKET = re.compile(r"[A-Za-z0-9_.-]+")
_HANDLE_VERSION = 1
_MAX_SEEN_AS = NFS3_FHSIZE - 10  # version, length, id, 8-byte inode


class Nfs3Error(Exception):
    """An NFS status to answer with (a bad handle, a read-only grant, a failed guard...)."""

    def __init__(self, status: int, why: str = "") -> None:
        super().__init__(why or f"nfs status {status}")
        self.status = status


def status_of(exc: BaseException) -> int | None:
    """The nfsstat3 an error maps to; None for an error that has none (a server fault)."""
    if isinstance(exc, Nfs3Error):
        return exc.status
    status = getattr(exc, "nfs_status", None)
    if isinstance(exc, AenvError) and isinstance(status, int):
        return status
    return None


def encode_handle(seen_as: str, ino: int) -> bytes:
    name = seen_as.encode("utf-8")
    return bytes([_HANDLE_VERSION, len(name)]) + name + ino.to_bytes(8, "big")


def decode_handle(handle: bytes) -> tuple[str, int]:
    """(seen_as, ino) of a handle; BADHANDLE when it is not one this server made."""
    if len(handle) < 10 or handle[0] != _HANDLE_VERSION or len(handle) != 10 + handle[1]:
        raise Nfs3Error(NFS3ERR_BADHANDLE, "malformed file handle")
    try:
        seen_as = handle[2 : 2 + handle[1]].decode("utf-8")
    except UnicodeDecodeError:
        raise Nfs3Error(NFS3ERR_BADHANDLE, "malformed file handle") from None
    return seen_as, int.from_bytes(handle[-8:], "big")


class BadPreamble(Exception):
    """The connection's first line is not a preamble of valid tickets (the reason, no ticket)."""


def parse_preamble(line: bytes, key: TicketKey) -> dict[str, Grant]:
    """The grants of a preamble line (without its newline), by seen_as."""
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise BadPreamble("preamble is not ASCII") from None
    words = text.split(" ")
    if len(words) < 2 or words[0] != PREAMBLE_MAGIC:
        raise BadPreamble("not an AENV-VOLUMES preamble")
    if words[1] != PREAMBLE_VERSION:
        raise BadPreamble(f"unsupported preamble version {words[1][:16]!r}")
    tickets = words[2:]
    if tickets == [""]:  # "AENV-VOLUMES 1 \n": zero tickets and a trailing space
        tickets = []
    grants: dict[str, Grant] = {}
    for index, ticket in enumerate(tickets):
        if not _TICKET.fullmatch(ticket):
            raise BadPreamble(f"ticket {index} is malformed")
        try:
            grant = key.verify(ticket)
        except BadTicket as exc:
            raise BadPreamble(f"ticket {index}: {exc.message}") from None
        if len(grant.seen_as.encode("utf-8")) > _MAX_SEEN_AS or "/" in grant.seen_as:
            raise BadPreamble(f"ticket {index} names an id too long for a file handle")
        earlier = grants.get(grant.seen_as)
        if earlier is not None and earlier.volume_id != grant.volume_id:
            raise BadPreamble(f"ticket {index} maps an id already mapped to another volume")
        if earlier is not None and not earlier.read_only:
            continue  # the same volume granted twice: the writable grant stands
        grants[grant.seen_as] = grant
    return grants


@dataclass(frozen=True)
class Target:
    """What a handle resolves to on this connection."""

    seen_as: str
    volume: VolumeLike
    ino: int
    read_only: bool

    def handle(self, ino: int) -> bytes:
        return encode_handle(self.seen_as, ino)

    def require_writable(self) -> None:
        if self.read_only:
            raise Nfs3Error(NFS3ERR_ROFS, "read-only grant")


@dataclass(frozen=True)
class Session:
    """One connection's grants. Volumes are asked of the store on every call (an open volume is
    a dict lookup there), so a volume destroyed or reopened meanwhile is never served stale."""

    store: VolumeStoreLike
    grants: dict[str, Grant]

    async def volume(self, seen_as: str) -> tuple[VolumeLike, Grant]:
        grant = self.grants.get(seen_as)
        if grant is None:
            raise Nfs3Error(NFS3ERR_STALE, "handle of a volume this connection was not granted")
        return await self.store.open(grant.volume_id), grant

    async def resolve(self, handle: bytes) -> Target:
        seen_as, ino = decode_handle(handle)
        volume, grant = await self.volume(seen_as)
        return Target(seen_as, volume, ino, grant.read_only)
