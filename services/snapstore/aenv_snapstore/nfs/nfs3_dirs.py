"""READDIR and READDIRPLUS (RFC 1813, 3.3.16-17).

Cookies: 1 is ".", 2 is "..", and an entry the volume lists with cookie c is c + 2. The volume's
cookies are stable and resumable (an entry removed meanwhile only drops out), so the cookie
verifier is always zero, which RFC 1813 allows for a server whose cookies never go bad.
Replies stop before the client's byte limits; the client resumes from the last cookie it got.
"""

from __future__ import annotations

from dataclasses import dataclass

from .api import AttrLike
from .attrs import is_dir, post_op_attr, post_op_fh3
from .consts import NFS3_OK, NFS3ERR_NOTDIR, NFS3ERR_TOOSMALL
from .context import Ctx, attr_or_none, failure, fsid, handle_arg, status
from .session import Nfs3Error, Target
from .xdr import Packer, Unpacker

_DOT, _DOTDOT = 1, 2
_ZERO_VERF = bytes(8)
# Bytes of a READDIR(PLUS) reply besides its entries: status, post_op_attr, verifier, list end, eof.
_OVERHEAD = 4 + 88 + 8 + 4 + 4
_PLUS_ATTRS = 88 + 4 + 4 + 64  # post_op_attr + post_op_fh3 with the longest handle
_MAX_BATCH = 4096


@dataclass(frozen=True)
class _Entry:
    name: str
    cookie: int
    attr: AttrLike


def _name_size(name: str) -> int:
    length = len(name.encode("utf-8", "surrogateescape"))
    return 4 + length + (-length % 4)


async def _list(target: Target, directory: AttrLike, cookie: int,
                limit: int) -> tuple[list[_Entry], bool]:
    entries: list[_Entry] = []
    volume = target.volume
    if cookie < _DOT:
        entries.append(_Entry(".", _DOT, directory))
    if cookie < _DOTDOT:
        parent = await volume.getattr(await volume.parent(target.ino))
        entries.append(_Entry("..", _DOTDOT, parent))
    listed, eof = await volume.readdir(target.ino, max(cookie - _DOTDOT, 0), limit)
    entries.extend(_Entry(e.name, e.cookie + _DOTDOT, e.attr) for e in listed)
    return entries, eof


async def _directory(ctx: Ctx, handle: bytes) -> tuple[Target, AttrLike]:
    target = await ctx.session.resolve(handle)
    attr = await target.volume.getattr(target.ino)
    if not is_dir(attr):
        raise Nfs3Error(NFS3ERR_NOTDIR, "not a directory")
    return target, attr


async def readdir(ctx: Ctx, args: Unpacker) -> bytes:
    handle, cookie, _verf, count = handle_arg(args), args.u64(), args.fixed(8), args.u32()
    target: Target | None = None
    try:
        target, directory = await _directory(ctx, handle)
        limit = min(max(count // 32, 1), _MAX_BATCH)
        entries, eof = await _list(target, directory, cookie, limit)
    except Exception as exc:
        reply = status(failure(exc, "READDIR"))
        post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    body = Packer()
    size = _OVERHEAD
    sent = 0
    for entry in entries:
        entry_size = 4 + 8 + _name_size(entry.name) + 8
        if size + entry_size > count:
            break
        body.boolean(True).u64(entry.attr.ino).string(entry.name).u64(entry.cookie)
        size += entry_size
        sent += 1
    return _finish(target, directory, body, sent, entries, eof)


async def readdirplus(ctx: Ctx, args: Unpacker) -> bytes:
    handle, cookie, _verf = handle_arg(args), args.u64(), args.fixed(8)
    dircount, maxcount = args.u32(), args.u32()
    target: Target | None = None
    try:
        target, directory = await _directory(ctx, handle)
        limit = min(max(maxcount // (_PLUS_ATTRS + 32), 1), _MAX_BATCH)
        entries, eof = await _list(target, directory, cookie, limit)
    except Exception as exc:
        reply = status(failure(exc, "READDIRPLUS"))
        post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    fs = fsid(target.seen_as)
    body = Packer()
    size, names_size, sent = _OVERHEAD, 0, 0
    for entry in entries:
        entry_names = 8 + _name_size(entry.name) + 8
        handle_bytes = target.handle(entry.attr.ino)
        entry_size = 4 + entry_names + 88 + 8 + len(handle_bytes) + (-len(handle_bytes) % 4)
        if size + entry_size > maxcount or (sent and names_size + entry_names > dircount):
            break
        body.boolean(True).u64(entry.attr.ino).string(entry.name).u64(entry.cookie)
        post_op_attr(body, entry.attr, fs)
        post_op_fh3(body, handle_bytes)
        size += entry_size
        names_size += entry_names
        sent += 1
    return _finish(target, directory, body, sent, entries, eof)


def _finish(target: Target, directory: AttrLike, body: Packer, sent: int,
            entries: list[_Entry], eof: bool) -> bytes:
    if entries and not sent:
        reply = status(NFS3ERR_TOOSMALL)
        post_op_attr(reply, directory, fsid(target.seen_as))
        return reply.bytes()
    reply = status(NFS3_OK)
    post_op_attr(reply, directory, fsid(target.seen_as))
    reply.fixed(_ZERO_VERF).raw(body.bytes())
    reply.boolean(False).boolean(eof and sent == len(entries))
    return reply.bytes()
