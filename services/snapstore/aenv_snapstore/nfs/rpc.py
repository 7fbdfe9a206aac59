"""ONC RPC v2 (RFC 5531) over TCP: record marking, call headers, credentials, reply headers.

A record is one or more fragments, each behind a 4-byte mark (the top bit says "last fragment",
the other 31 bits its length). The server reads whole records (a call), answers each with one
record of a single fragment. Records are bounded: the largest legitimate call is a 1 MiB WRITE plus
its headers, so anything past MAX_RECORD is refused (the connection is closed) rather than
buffered without end.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

from .xdr import Packer, Unpacker, XdrError

MAX_RECORD = 1024 * 1024 + 128 * 1024  # a 1 MiB WRITE plus headers, with room to spare
_MARK = struct.Struct(">I")
_LAST = 0x80000000

RPC_VERSION = 2
CALL, REPLY = 0, 1
MSG_ACCEPTED, MSG_DENIED = 0, 1
SUCCESS, PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL, GARBAGE_ARGS, SYSTEM_ERR = 0, 1, 2, 3, 4, 5
RPC_MISMATCH, AUTH_ERROR = 0, 1
AUTH_BADCRED, AUTH_TOOWEAK = 1, 5
AUTH_NONE, AUTH_SYS = 0, 1

MAX_AUTH_BODY = 400  # RFC 5531: opaque_auth bodies are at most 400 bytes
NOBODY = 65534  # the identity of an AUTH_NONE call


class RecordTooLarge(Exception):
    """A record longer than MAX_RECORD: the peer is broken or hostile; the connection ends."""


class BadCall(Exception):
    """A record that is not an RPC call at all (no reply can be addressed): ignored."""


@dataclass(frozen=True)
class Credential:
    """Who the caller says it is: AUTH_SYS's uid/gid/gids, or nobody for AUTH_NONE."""

    flavor: int
    uid: int
    gid: int
    gids: tuple[int, ...] = ()


ANONYMOUS = Credential(AUTH_NONE, NOBODY, NOBODY)


@dataclass(frozen=True)
class Call:
    xid: int
    rpcvers: int
    prog: int
    vers: int
    proc: int
    cred: Credential | None  # None: a flavor this server does not take, or a malformed body
    args: Unpacker


async def read_record(reader: asyncio.StreamReader) -> bytes:
    """The next whole record; IncompleteReadError at a clean or broken end of stream."""
    fragments: list[bytes] = []
    total = 0
    while True:
        mark = _MARK.unpack(await reader.readexactly(4))[0]
        length = mark & ~_LAST
        total += length
        if total > MAX_RECORD:
            raise RecordTooLarge(f"RPC record of at least {total} bytes (at most {MAX_RECORD})")
        fragments.append(await reader.readexactly(length) if length else b"")
        if mark & _LAST:
            return fragments[0] if len(fragments) == 1 else b"".join(fragments)


def frame(record: bytes) -> bytes:
    """One record as a single last fragment."""
    return _MARK.pack(_LAST | len(record)) + record


def parse_call(record: bytes) -> Call:
    """The call header of a record; BadCall when it has no usable xid or is not a CALL."""
    unpacker = Unpacker(record)
    try:
        xid = unpacker.u32()
        if unpacker.u32() != CALL:
            raise BadCall("not an RPC call")
        rpcvers, prog, vers, proc = unpacker.u32(), unpacker.u32(), unpacker.u32(), unpacker.u32()
        flavor = unpacker.u32()
        body = unpacker.opaque(MAX_AUTH_BODY)
        unpacker.u32()  # the verifier's flavor: AUTH_NONE or AUTH_SYS calls carry none we check
        unpacker.opaque(MAX_AUTH_BODY)
    except XdrError as exc:
        raise BadCall(f"truncated RPC call header: {exc}") from None
    return Call(xid, rpcvers, prog, vers, proc, _credential(flavor, body), unpacker)


def _credential(flavor: int, body: bytes) -> Credential | None:
    if flavor == AUTH_NONE:
        return ANONYMOUS
    if flavor != AUTH_SYS:
        return None
    unpacker = Unpacker(body)
    try:
        unpacker.u32()  # stamp
        unpacker.opaque(255)  # machine name
        uid, gid = unpacker.u32(), unpacker.u32()
        count = unpacker.u32()
        if count > 16:
            return None
        gids = tuple(unpacker.u32() for _ in range(count))
    except XdrError:
        return None
    return Credential(AUTH_SYS, uid, gid, gids)


def accepted(xid: int, stat: int, body: bytes = b"") -> bytes:
    """An accepted reply (AUTH_NONE verifier) with its accept_stat and result body."""
    header = Packer().u32(xid).u32(REPLY).u32(MSG_ACCEPTED).u32(AUTH_NONE).u32(0).u32(stat)
    return header.bytes() + body


def prog_mismatch(xid: int, low: int, high: int) -> bytes:
    return accepted(xid, PROG_MISMATCH, Packer().u32(low).u32(high).bytes())


def rpc_mismatch(xid: int) -> bytes:
    packer = Packer().u32(xid).u32(REPLY).u32(MSG_DENIED).u32(RPC_MISMATCH)
    return packer.u32(RPC_VERSION).u32(RPC_VERSION).bytes()


def auth_error(xid: int, stat: int) -> bytes:
    return Packer().u32(xid).u32(REPLY).u32(MSG_DENIED).u32(AUTH_ERROR).u32(stat).bytes()
