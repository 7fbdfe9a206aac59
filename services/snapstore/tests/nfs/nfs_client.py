"""A tiny ONC RPC client for the tests (the host has no NFS client): a preamble, calls by xid
with pipelining, and decoders for the NFSv3 structures the tests look at."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from dataclasses import dataclass

from aenv_snapstore.nfs import consts as c
from aenv_snapstore.nfs.xdr import Packer, Unpacker

AUTH_NONE, AUTH_SYS = 0, 1


def auth_sys(uid: int, gid: int, gids: tuple[int, ...] = ()) -> tuple[int, bytes]:
    body = Packer().u32(0).string("test").u32(uid).u32(gid).u32(len(gids))
    for gid_ in gids:
        body.u32(gid_)
    return AUTH_SYS, body.bytes()


ROOT = auth_sys(0, 0)


@dataclass
class Reply:
    xid: int
    reply_stat: int  # 0 accepted, 1 denied
    stat: int  # accept_stat (accepted) or reject_stat (denied)
    body: Unpacker


def call_record(xid: int, prog: int, vers: int, proc: int, args: bytes,
                cred: tuple[int, bytes] = ROOT, rpcvers: int = 2) -> bytes:
    packer = Packer().u32(xid).u32(0).u32(rpcvers).u32(prog).u32(vers).u32(proc)
    packer.u32(cred[0]).opaque(cred[1]).u32(0).opaque(b"")
    return packer.bytes() + args


def mark(data: bytes, last: bool = True) -> bytes:
    return struct.pack(">I", (0x80000000 if last else 0) | len(data)) + data


class RpcClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._xids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Reply]] = {}
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, address: tuple[str, int], preamble: bytes) -> RpcClient:
        reader, writer = await asyncio.open_connection(*address)
        writer.write(preamble)
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while True:
                data = b""
                while True:
                    header = struct.unpack(">I", await self.reader.readexactly(4))[0]
                    data += await self.reader.readexactly(header & 0x7FFFFFFF)
                    if header & 0x80000000:
                        break
                body = Unpacker(data)
                xid, _reply, reply_stat = body.u32(), body.u32(), body.u32()
                if reply_stat == 0:
                    body.u32()
                    body.opaque()
                stat = body.u32()
                future = self._waiting.pop(xid, None)
                if future is not None and not future.done():
                    future.set_result(Reply(xid, reply_stat, stat, body))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"connection closed: {exc!r}"))

    async def closed(self, within_s: float = 5.0) -> bool:
        """Whether the server closed the connection (waits up to within_s)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._task), within_s)
        except TimeoutError:
            return False
        return True

    def send(self, xid: int, record: bytes, fragments: int = 1) -> asyncio.Future[Reply]:
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiting[xid] = future
        step = max(1, -(-len(record) // fragments))
        pieces = [record[i : i + step] for i in range(0, len(record), step)] or [b""]
        for index, piece in enumerate(pieces):
            self.writer.write(mark(piece, index == len(pieces) - 1))
        return future

    async def call(self, prog: int, vers: int, proc: int, args: bytes = b"",
                   cred: tuple[int, bytes] = ROOT, fragments: int = 1) -> Reply:
        xid = next(self._xids)
        future = self.send(xid, call_record(xid, prog, vers, proc, args, cred), fragments)
        return await asyncio.wait_for(future, 10)

    async def nfs(self, proc: int, args: bytes = b"", cred: tuple[int, bytes] = ROOT) -> Unpacker:
        """An NFS call that must be accepted; the body from its nfsstat3 on."""
        reply = await self.call(c.NFS_PROGRAM, c.NFS_V3, proc, args, cred)
        assert (reply.reply_stat, reply.stat) == (0, 0), reply
        return reply.body

    async def mount(self, export: str) -> bytes:
        reply = await self.call(c.MOUNT_PROGRAM, c.MOUNT_V3, c.MNT_MNT, Packer().string(export)
                                .bytes())
        assert reply.body.u32() == c.MNT3_OK
        return reply.body.opaque()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


# ---- decoders -------------------------------------------------------------------------------


@dataclass
class Fattr:
    type: int
    mode: int
    nlink: int
    uid: int
    gid: int
    size: int
    used: int
    fsid: int
    fileid: int
    atime: tuple[int, int]
    mtime: tuple[int, int]
    ctime: tuple[int, int]


def fattr(u: Unpacker) -> Fattr:
    kind, mode, nlink, uid, gid = u.u32(), u.u32(), u.u32(), u.u32(), u.u32()
    size, used = u.u64(), u.u64()
    u.u32()
    u.u32()
    fsid, fileid = u.u64(), u.u64()
    times = [(u.u32(), u.u32()) for _ in range(3)]
    return Fattr(kind, mode, nlink, uid, gid, size, used, fsid, fileid, *times)


def post_op_attr(u: Unpacker) -> Fattr | None:
    return fattr(u) if u.boolean() else None


def wcc(u: Unpacker) -> tuple[tuple[int, tuple[int, int], tuple[int, int]] | None, Fattr | None]:
    before = (u.u64(), (u.u32(), u.u32()), (u.u32(), u.u32())) if u.boolean() else None
    return before, post_op_attr(u)


def post_op_fh(u: Unpacker) -> bytes | None:
    return u.opaque() if u.boolean() else None


# ---- argument builders ----------------------------------------------------------------------


def fh(handle: bytes) -> Packer:
    return Packer().opaque(handle)


def diropargs(handle: bytes, name: str | bytes) -> Packer:
    raw = name.encode() if isinstance(name, str) else name
    return Packer().opaque(handle).opaque(raw)


def sattr(mode: int | None = None, uid: int | None = None, gid: int | None = None,
          size: int | None = None, mtime: tuple[int, int] | None = None) -> bytes:
    p = Packer()
    for value in (mode, uid, gid):
        p.boolean(value is not None)
        if value is not None:
            p.u32(value)
    p.boolean(size is not None)
    if size is not None:
        p.u64(size)
    p.u32(0)  # atime: don't change
    if mtime is None:
        p.u32(0)
    else:
        p.u32(2).u32(mtime[0]).u32(mtime[1])
    return p.bytes()
