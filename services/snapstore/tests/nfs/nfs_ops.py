"""NFSv3 calls as the tests make them: each returns the nfsstat3 and the decoded result."""

from __future__ import annotations

from dataclasses import dataclass

from aenv_snapstore.nfs import consts as c
from aenv_snapstore.nfs.xdr import Packer

from .nfs_client import (
    ROOT,
    Fattr,
    RpcClient,
    diropargs,
    fattr,
    fh,
    post_op_attr,
    post_op_fh,
    sattr,
    wcc,
)

Cred = tuple[int, bytes]


@dataclass
class Made:
    status: int
    handle: bytes | None = None
    attr: Fattr | None = None
    dir_after: Fattr | None = None


class Ops:
    def __init__(self, client: RpcClient, cred: Cred = ROOT) -> None:
        self.client, self.cred = client, cred

    async def getattr(self, handle: bytes) -> tuple[int, Fattr | None]:
        u = await self.client.nfs(c.GETATTR, fh(handle).bytes(), self.cred)
        status = u.u32()
        return status, fattr(u) if status == 0 else None

    async def setattr(self, handle: bytes, attrs: bytes,
                      guard: tuple[int, int] | None = None) -> tuple[int, Fattr | None]:
        args = fh(handle).raw(attrs).boolean(guard is not None)
        if guard is not None:
            args.u32(guard[0]).u32(guard[1])
        u = await self.client.nfs(c.SETATTR, args.bytes(), self.cred)
        status = u.u32()
        return status, wcc(u)[1]

    async def lookup(self, handle: bytes, name: str) -> tuple[int, bytes | None, Fattr | None]:
        u = await self.client.nfs(c.LOOKUP, diropargs(handle, name).bytes(), self.cred)
        status = u.u32()
        if status:
            return status, None, None
        found = u.opaque()
        return status, found, post_op_attr(u)

    async def _made(self, proc: int, args: Packer) -> Made:
        u = await self.client.nfs(proc, args.bytes(), self.cred)
        status = u.u32()
        if status:
            return Made(status, dir_after=wcc(u)[1])
        handle, attr = post_op_fh(u), post_op_attr(u)
        return Made(status, handle, attr, wcc(u)[1])

    async def create(self, handle: bytes, name: str, how: int = c.UNCHECKED,
                     attrs: bytes | None = None, verifier: bytes = b"") -> Made:
        args = diropargs(handle, name).u32(how)
        if how == c.EXCLUSIVE:
            args.fixed(verifier)
        else:
            args.raw(attrs if attrs is not None else sattr(mode=0o644))
        return await self._made(c.CREATE, args)

    async def mkdir(self, handle: bytes, name: str, attrs: bytes | None = None) -> Made:
        args = diropargs(handle, name).raw(attrs if attrs is not None else sattr(mode=0o755))
        return await self._made(c.MKDIR, args)

    async def symlink(self, handle: bytes, name: str, target: str) -> Made:
        return await self._made(c.SYMLINK, diropargs(handle, name).raw(sattr()).string(target))

    async def write(self, handle: bytes, offset: int, data: bytes,
                    stable: int = c.UNSTABLE) -> tuple[int, int, int, bytes, Fattr | None]:
        args = fh(handle).u64(offset).u32(len(data)).u32(stable).opaque(data)
        u = await self.client.nfs(c.WRITE, args.bytes(), self.cred)
        status = u.u32()
        _before, after = wcc(u)
        if status:
            return status, 0, 0, b"", after
        return status, u.u32(), u.u32(), u.fixed(8), after

    async def read(self, handle: bytes, offset: int, count: int) -> tuple[int, bytes, bool]:
        u = await self.client.nfs(c.READ, fh(handle).u64(offset).u32(count).bytes(), self.cred)
        status = u.u32()
        post_op_attr(u)
        if status:
            return status, b"", False
        length, eof, data = u.u32(), u.boolean(), u.opaque()
        assert length == len(data)
        return status, data, eof

    async def status_of(self, proc: int, args: Packer) -> int:
        return (await self.client.nfs(proc, args.bytes(), self.cred)).u32()

    async def readdir(self, handle: bytes, cookie: int = 0,
                      count: int = 4096) -> tuple[int, list[tuple[str, int, int]], bool]:
        args = fh(handle).u64(cookie).fixed(bytes(8)).u32(count)
        u = await self.client.nfs(c.READDIR, args.bytes(), self.cred)
        status = u.u32()
        post_op_attr(u)
        if status:
            return status, [], False
        u.fixed(8)
        entries = []
        while u.boolean():
            fileid, name, next_cookie = u.u64(), u.string(), u.u64()
            entries.append((name, fileid, next_cookie))
        return status, entries, u.boolean()

    async def readdirplus(
        self, handle: bytes, cookie: int = 0, dircount: int = 8192, maxcount: int = 65536,
    ) -> tuple[int, list[tuple[str, int, Fattr | None, bytes | None]], bool]:
        args = fh(handle).u64(cookie).fixed(bytes(8)).u32(dircount).u32(maxcount)
        u = await self.client.nfs(c.READDIRPLUS, args.bytes(), self.cred)
        status = u.u32()
        post_op_attr(u)
        if status:
            return status, [], False
        u.fixed(8)
        entries = []
        while u.boolean():
            _fileid, name, next_cookie = u.u64(), u.string(), u.u64()
            entries.append((name, next_cookie, post_op_attr(u), post_op_fh(u)))
        return status, entries, u.boolean()
