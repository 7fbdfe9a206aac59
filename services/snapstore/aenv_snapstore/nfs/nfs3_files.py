"""NFSv3 procedures on one object: GETATTR SETATTR LOOKUP ACCESS READLINK READ WRITE COMMIT and
the file system queries FSSTAT FSINFO PATHCONF (RFC 1813, section 3.3)."""

from __future__ import annotations

from .api import AttrLike
from .attrs import SetAttrs, access, fattr3, post_op_attr, sattr3, split_time, wcc_data
from .consts import (
    DTPREF,
    FILE_SYNC,
    FSF3_CANSETTIME,
    FSF3_HOMOGENEOUS,
    FSF3_LINK,
    FSF3_SYMLINK,
    MAX_FILE_SIZE,
    NAME_MAX,
    NFS3_OK,
    NFS3ERR_NOT_SYNC,
    RTMAX,
    UNSTABLE,
    WTMAX,
)
from .context import Ctx, attr_or_none, check_name, failure, fsid, handle_arg, name_arg, status
from .session import Nfs3Error, Target
from .xdr import Unpacker

_PAGE = 4096


async def getattr_(ctx: Ctx, args: Unpacker) -> bytes:
    handle = handle_arg(args)
    try:
        target = await ctx.session.resolve(handle)
        attr = await target.volume.getattr(target.ino)
    except Exception as exc:
        return status(failure(exc, "GETATTR")).bytes()
    reply = status(NFS3_OK)
    fattr3(reply, attr, fsid(target.seen_as))
    return reply.bytes()


async def apply_setattr(target: Target, ino: int, attrs: SetAttrs) -> AttrLike:
    return await target.volume.setattr(
        ino, mode=attrs.mode, uid=attrs.uid, gid=attrs.gid, size=attrs.size,
        atime_ns=attrs.atime_ns, mtime_ns=attrs.mtime_ns)


async def setattr_(ctx: Ctx, args: Unpacker) -> bytes:
    handle = handle_arg(args)
    attrs = sattr3(args)
    guard = (args.u32(), args.u32()) if args.boolean() else None
    target: Target | None = None
    before: AttrLike | None = None
    try:
        target = await ctx.session.resolve(handle)
        target.require_writable()
        before = await target.volume.getattr(target.ino)
        if guard is not None and guard != split_time(before.ctime_ns):
            raise Nfs3Error(NFS3ERR_NOT_SYNC, "the guard's ctime does not match")
        after = await apply_setattr(target, target.ino, attrs)
    except Exception as exc:
        reply = status(failure(exc, "SETATTR"))
        wcc_data(reply, before, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    wcc_data(reply, before, after, fsid(target.seen_as))
    return reply.bytes()


async def lookup(ctx: Ctx, args: Unpacker) -> bytes:
    handle, raw = handle_arg(args), name_arg(args)
    target: Target | None = None
    try:
        target = await ctx.session.resolve(handle)
        attr = await target.volume.lookup(target.ino, check_name(raw))
    except Exception as exc:
        reply = status(failure(exc, "LOOKUP"))
        post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    fs = fsid(target.seen_as)
    reply = status(NFS3_OK).opaque(target.handle(attr.ino))
    post_op_attr(reply, attr, fs)
    post_op_attr(reply, await attr_or_none(target), fs)
    return reply.bytes()


async def access_(ctx: Ctx, args: Unpacker) -> bytes:
    handle, wanted = handle_arg(args), args.u32()
    try:
        target = await ctx.session.resolve(handle)
        attr = await target.volume.getattr(target.ino)
    except Exception as exc:
        reply = status(failure(exc, "ACCESS"))
        post_op_attr(reply, None, 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    post_op_attr(reply, attr, fsid(target.seen_as))
    reply.u32(access(attr, ctx.cred, wanted, target.read_only))
    return reply.bytes()


async def readlink(ctx: Ctx, args: Unpacker) -> bytes:
    handle = handle_arg(args)
    target: Target | None = None
    try:
        target = await ctx.session.resolve(handle)
        path = await target.volume.readlink(target.ino)
    except Exception as exc:
        reply = status(failure(exc, "READLINK"))
        post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as))
    reply.string(path)
    return reply.bytes()


async def read(ctx: Ctx, args: Unpacker) -> bytes:
    handle, offset, count = handle_arg(args), args.u64(), args.u32()
    target: Target | None = None
    try:
        target = await ctx.session.resolve(handle)
        data, eof = await target.volume.read(target.ino, offset, min(count, RTMAX))
    except Exception as exc:
        reply = status(failure(exc, "READ"))
        post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as))
    reply.u32(len(data)).boolean(eof).opaque(data)
    return reply.bytes()


async def write(ctx: Ctx, args: Unpacker) -> bytes:
    handle, offset, count, stable = handle_arg(args), args.u64(), args.u32(), args.u32()
    data = args.opaque_view(WTMAX)[: min(count, WTMAX)]
    target: Target | None = None
    before: AttrLike | None = None
    try:
        target = await ctx.session.resolve(handle)
        target.require_writable()
        before = await target.volume.getattr(target.ino)
        after = await target.volume.write(target.ino, offset, bytes(data))
        if stable != UNSTABLE:
            await target.volume.commit()
    except Exception as exc:
        reply = status(failure(exc, "WRITE"))
        wcc_data(reply, before, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    wcc_data(reply, before, after, fsid(target.seen_as))
    reply.u32(len(data)).u32(UNSTABLE if stable == UNSTABLE else FILE_SYNC).fixed(ctx.verifier)
    return reply.bytes()


async def commit(ctx: Ctx, args: Unpacker) -> bytes:
    handle, _offset, _count = handle_arg(args), args.u64(), args.u32()
    target: Target | None = None
    before: AttrLike | None = None
    try:
        target = await ctx.session.resolve(handle)
        before = await target.volume.getattr(target.ino)
        await target.volume.commit()  # a barrier for every earlier write, so for this range too
    except Exception as exc:
        reply = status(failure(exc, "COMMIT"))
        wcc_data(reply, before, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    wcc_data(reply, before, await attr_or_none(target), fsid(target.seen_as))
    reply.fixed(ctx.verifier)
    return reply.bytes()


async def fsstat(ctx: Ctx, args: Unpacker) -> bytes:
    handle = handle_arg(args)
    target: Target | None = None
    try:
        target = await ctx.session.resolve(handle)
        stat = await target.volume.fsstat()
    except Exception as exc:
        reply = status(failure(exc, "FSSTAT"))
        post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as) if target else 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    post_op_attr(reply, await attr_or_none(target), fsid(target.seen_as))
    free = 0 if target.read_only else stat.free_bytes
    reply.u64(stat.total_bytes).u64(stat.free_bytes).u64(free)
    reply.u64(stat.total_files).u64(stat.free_files).u64(stat.free_files)
    reply.u32(0)  # invarsec: the numbers may change at any time
    return reply.bytes()


async def fsinfo(ctx: Ctx, args: Unpacker) -> bytes:
    handle = handle_arg(args)
    try:
        target = await ctx.session.resolve(handle)
        attr = await target.volume.getattr(target.ino)
    except Exception as exc:
        reply = status(failure(exc, "FSINFO"))
        post_op_attr(reply, None, 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    post_op_attr(reply, attr, fsid(target.seen_as))
    reply.u32(RTMAX).u32(RTMAX).u32(_PAGE)  # rtmax, rtpref, rtmult
    reply.u32(WTMAX).u32(WTMAX).u32(_PAGE)  # wtmax, wtpref, wtmult
    reply.u32(DTPREF).u64(MAX_FILE_SIZE)
    reply.u32(0).u32(1)  # time_delta: 1 ns
    reply.u32(FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME)
    return reply.bytes()


async def pathconf(ctx: Ctx, args: Unpacker) -> bytes:
    handle = handle_arg(args)
    try:
        target = await ctx.session.resolve(handle)
        attr = await target.volume.getattr(target.ino)
    except Exception as exc:
        reply = status(failure(exc, "PATHCONF"))
        post_op_attr(reply, None, 0)
        return reply.bytes()
    reply = status(NFS3_OK)
    post_op_attr(reply, attr, fsid(target.seen_as))
    reply.u32(32000).u32(NAME_MAX)  # linkmax, name_max
    # no_trunc, chown_restricted, case_insensitive, case_preserving
    reply.boolean(True).boolean(True).boolean(False).boolean(True)
    return reply.bytes()

