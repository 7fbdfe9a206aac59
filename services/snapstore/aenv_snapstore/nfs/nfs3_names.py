"""NFSv3 procedures that change a directory: CREATE MKDIR SYMLINK MKNOD REMOVE RMDIR RENAME LINK.

New nodes belong to the caller (its AUTH_SYS uid/gid) unless the sattr3 names an owner. An
EXCLUSIVE create keeps the client's verifier in the new file's atime and mtime seconds (as Linux's
knfsd does) until the client's following SETATTR sets real times: a retransmitted create finds
the same verifier there and succeeds instead of failing with EXIST.
"""

from __future__ import annotations

from .api import AttrLike
from .attrs import SetAttrs, post_op_attr, post_op_fh3, sattr3, split_time, wcc_data
from .consts import (
    EXCLUSIVE,
    GUARDED,
    NFS3_OK,
    NFS3ERR_EXIST,
    NFS3ERR_NOTSUPP,
    NFS3ERR_XDEV,
    UNCHECKED,
)
from .context import Ctx, attr_or_none, check_name, failure, fsid, handle_arg, name_arg, status
from .nfs3_files import apply_setattr
from .session import Nfs3Error, Target, status_of
from .xdr import Unpacker, XdrError

_FILE_MODE, _DIR_MODE = 0o644, 0o755
_NS = 1_000_000_000


def _made(target: Target, attr: AttrLike, before: AttrLike | None,
          after: AttrLike | None) -> bytes:
    fs = fsid(target.seen_as)
    reply = status(NFS3_OK)
    post_op_fh3(reply, target.handle(attr.ino))
    post_op_attr(reply, attr, fs)
    wcc_data(reply, before, after, fs)
    return reply.bytes()


async def _dir_failure(exc: Exception, proc: str, target: Target | None,
                       before: AttrLike | None) -> bytes:
    reply = status(failure(exc, proc))
    wcc_data(reply, before, await attr_or_none(target), fsid(target.seen_as) if target else 0)
    return reply.bytes()


async def _exclusive(ctx: Ctx, target: Target, name: str, verifier: bytes) -> AttrLike:
    high, low = int.from_bytes(verifier[:4], "big"), int.from_bytes(verifier[4:], "big")
    volume = target.volume
    try:
        attr = await volume.create(target.ino, name, mode=_FILE_MODE, uid=ctx.cred.uid,
                                   gid=ctx.cred.gid, exclusive=True)
    except Exception as exc:
        if status_of(exc) != NFS3ERR_EXIST:
            raise
        existing = await volume.lookup(target.ino, name)
        stored = (split_time(existing.atime_ns)[0], split_time(existing.mtime_ns)[0])
        if existing.kind.name == "FILE" and stored == (high, low):
            return existing  # the same create, retransmitted
        raise
    return await volume.setattr(attr.ino, atime_ns=high * _NS, mtime_ns=low * _NS)


async def create(ctx: Ctx, args: Unpacker) -> bytes:
    handle, raw, how = handle_arg(args), name_arg(args), args.u32()
    if how in (UNCHECKED, GUARDED):
        attrs, verifier = sattr3(args), None
    elif how == EXCLUSIVE:
        attrs, verifier = SetAttrs(), args.fixed(8)
    else:
        raise XdrError(f"bad createmode3 {how}")
    target: Target | None = None
    before: AttrLike | None = None
    try:
        target = await ctx.session.resolve(handle)
        target.require_writable()
        name = check_name(raw)
        before = await target.volume.getattr(target.ino)
        if verifier is not None:
            attr = await _exclusive(ctx, target, name, verifier)
        else:
            attr = await target.volume.create(
                target.ino, name, mode=_FILE_MODE if attrs.mode is None else attrs.mode,
                uid=ctx.cred.uid if attrs.uid is None else attrs.uid,
                gid=ctx.cred.gid if attrs.gid is None else attrs.gid,
                exclusive=how == GUARDED)
            rest = SetAttrs(size=attrs.size, atime_ns=attrs.atime_ns, mtime_ns=attrs.mtime_ns)
            if rest.any():
                attr = await apply_setattr(target, attr.ino, rest)
    except Exception as exc:
        return await _dir_failure(exc, "CREATE", target, before)
    return _made(target, attr, before, await attr_or_none(target))


async def mkdir(ctx: Ctx, args: Unpacker) -> bytes:
    handle, raw, attrs = handle_arg(args), name_arg(args), sattr3(args)
    target: Target | None = None
    before: AttrLike | None = None
    try:
        target = await ctx.session.resolve(handle)
        target.require_writable()
        name = check_name(raw)
        before = await target.volume.getattr(target.ino)
        attr = await target.volume.mkdir(
            target.ino, name, mode=_DIR_MODE if attrs.mode is None else attrs.mode,
            uid=ctx.cred.uid if attrs.uid is None else attrs.uid,
            gid=ctx.cred.gid if attrs.gid is None else attrs.gid)
        if attrs.times_only().any():
            attr = await apply_setattr(target, attr.ino, attrs.times_only())
    except Exception as exc:
        return await _dir_failure(exc, "MKDIR", target, before)
    return _made(target, attr, before, await attr_or_none(target))


async def symlink(ctx: Ctx, args: Unpacker) -> bytes:
    handle, raw, attrs = handle_arg(args), name_arg(args), sattr3(args)
    link_target = args.opaque(4096)
    target: Target | None = None
    before: AttrLike | None = None
    try:
        target = await ctx.session.resolve(handle)
        target.require_writable()
        name = check_name(raw)
        path = link_target.decode("utf-8", "surrogateescape")
        before = await target.volume.getattr(target.ino)
        attr = await target.volume.symlink(
            target.ino, name, path, uid=ctx.cred.uid if attrs.uid is None else attrs.uid,
            gid=ctx.cred.gid if attrs.gid is None else attrs.gid)
    except Exception as exc:
        return await _dir_failure(exc, "SYMLINK", target, before)
    return _made(target, attr, before, await attr_or_none(target))


async def mknod(ctx: Ctx, args: Unpacker) -> bytes:
    """Devices, sockets and FIFOs have no place in a volume: NOTSUPP (after ROFS)."""
    handle, _raw = handle_arg(args), name_arg(args)
    target: Target | None = None
    before: AttrLike | None = None
    try:
        target = await ctx.session.resolve(handle)
        target.require_writable()
        before = await target.volume.getattr(target.ino)
        raise Nfs3Error(NFS3ERR_NOTSUPP, "special files are not supported")
    except Exception as exc:
        return await _dir_failure(exc, "MKNOD", target, before)


async def _unlink(ctx: Ctx, args: Unpacker, proc: str) -> bytes:
    handle, raw = handle_arg(args), name_arg(args)
    target: Target | None = None
    before: AttrLike | None = None
    try:
        target = await ctx.session.resolve(handle)
        target.require_writable()
        name = check_name(raw)
        before = await target.volume.getattr(target.ino)
        if proc == "RMDIR":
            await target.volume.rmdir(target.ino, name)
        else:
            await target.volume.remove(target.ino, name)
    except Exception as exc:
        return await _dir_failure(exc, proc, target, before)
    reply = status(NFS3_OK)
    wcc_data(reply, before, await attr_or_none(target), fsid(target.seen_as))
    return reply.bytes()


async def remove(ctx: Ctx, args: Unpacker) -> bytes:
    return await _unlink(ctx, args, "REMOVE")


async def rmdir(ctx: Ctx, args: Unpacker) -> bytes:
    return await _unlink(ctx, args, "RMDIR")


async def rename(ctx: Ctx, args: Unpacker) -> bytes:
    from_handle, from_raw = handle_arg(args), name_arg(args)
    to_handle, to_raw = handle_arg(args), name_arg(args)
    source: Target | None = None
    dest: Target | None = None
    from_before: AttrLike | None = None
    to_before: AttrLike | None = None
    try:
        source = await ctx.session.resolve(from_handle)
        dest = await ctx.session.resolve(to_handle)
        source.require_writable()
        if source.seen_as != dest.seen_as:
            raise Nfs3Error(NFS3ERR_XDEV, "rename across volumes")
        from_name, to_name = check_name(from_raw), check_name(to_raw)
        from_before = await source.volume.getattr(source.ino)
        to_before = await dest.volume.getattr(dest.ino)
        await source.volume.rename(source.ino, from_name, dest.ino, to_name)
        code = NFS3_OK
    except Exception as exc:
        code = failure(exc, "RENAME")
    reply = status(code)
    wcc_data(reply, from_before, await attr_or_none(source),
             fsid(source.seen_as) if source else 0)
    wcc_data(reply, to_before, await attr_or_none(dest), fsid(dest.seen_as) if dest else 0)
    return reply.bytes()


async def link(ctx: Ctx, args: Unpacker) -> bytes:
    file_handle, dir_handle, raw = handle_arg(args), handle_arg(args), name_arg(args)
    file: Target | None = None
    directory: Target | None = None
    before: AttrLike | None = None
    try:
        file = await ctx.session.resolve(file_handle)
        directory = await ctx.session.resolve(dir_handle)
        file.require_writable()
        if file.seen_as != directory.seen_as:
            raise Nfs3Error(NFS3ERR_XDEV, "link across volumes")
        name = check_name(raw)
        before = await directory.volume.getattr(directory.ino)
        await file.volume.link(file.ino, directory.ino, name)
        code = NFS3_OK
    except Exception as exc:
        code = failure(exc, "LINK")
    reply = status(code)
    post_op_attr(reply, await attr_or_none(file), fsid(file.seen_as) if file else 0)
    wcc_data(reply, before, await attr_or_none(directory),
             fsid(directory.seen_as) if directory else 0)
    return reply.bytes()
