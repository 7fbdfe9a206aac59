"""MOUNT v3 (RFC 1813, appendix I): how a client gets the root handle of `/<seen_as>`.

Exports are exactly this connection's grants: MNT of a granted export answers its root handle
(AUTH_SYS), of a well-formed but ungranted one MNT3ERR_ACCES, of anything else MNT3ERR_NOENT.
A path below an export (`/<seen_as>/sub/dir`) mounts that directory. The server keeps no mount
list (NFSv3 is stateless, and the relay, not the guest, is this server's client): DUMP is empty
and UMNT/UMNTALL succeed.
"""

from __future__ import annotations

import re

from .api import ROOT_INO
from .attrs import is_dir
from .consts import (
    MNT3_OK,
    MNT3ERR_ACCES,
    MNT3ERR_NAMETOOLONG,
    MNT3ERR_NOENT,
    MNT3ERR_NOTDIR,
    MNT_DUMP,
    MNT_EXPORT,
    MNT_MNT,
    MNT_NULL,
    MNT_UMNT,
    MNT_UMNTALL,
    MNTPATHLEN,
)
from .context import Ctx, log
from .rpc import AUTH_SYS
from .session import encode_handle, status_of
from .xdr import Packer, Unpacker

_VOLUME_ID = re.compile(r"vol-[a-z0-9]{1,36}")


async def mnt(ctx: Ctx, args: Unpacker) -> bytes:
    raw = args.opaque(MNTPATHLEN + 1)
    if len(raw) > MNTPATHLEN:
        return Packer().u32(MNT3ERR_NAMETOOLONG).bytes()
    path = raw.decode("utf-8", "replace")
    seen_as, _, below = path.lstrip("/").partition("/")
    if not path.startswith("/") or seen_as not in ctx.session.grants:
        volume_like = path.startswith("/") and _VOLUME_ID.fullmatch(seen_as)
        code = MNT3ERR_ACCES if volume_like else MNT3ERR_NOENT
        log.info("nfs mount refused", extra={"export": path[:64], "peer": ctx.peer,
                                             "status": code})
        return Packer().u32(code).bytes()
    try:
        volume, _grant = await ctx.session.volume(seen_as)
        attr = await volume.resolve("/" + below.strip("/")) if below.strip("/") else \
            await volume.getattr(ROOT_INO)
    except Exception as exc:
        log.info("nfs mount failed", extra={"export": path[:64], "peer": ctx.peer,
                                            "nfs_status": status_of(exc)})
        return Packer().u32(MNT3ERR_NOENT).bytes()
    if not is_dir(attr):
        return Packer().u32(MNT3ERR_NOTDIR).bytes()
    log.info("nfs mount", extra={"export": path[:64], "peer": ctx.peer})
    return Packer().u32(MNT3_OK).opaque(encode_handle(seen_as, attr.ino)).u32(1).u32(
        AUTH_SYS).bytes()


async def export(ctx: Ctx, _args: Unpacker) -> bytes:
    reply = Packer()
    for seen_as in sorted(ctx.session.grants):
        reply.boolean(True).string("/" + seen_as).boolean(False)  # no group restriction listed
    return reply.boolean(False).bytes()


async def dump(_ctx: Ctx, _args: Unpacker) -> bytes:
    return Packer().boolean(False).bytes()


async def umnt(_ctx: Ctx, args: Unpacker) -> bytes:
    args.opaque(MNTPATHLEN)
    return b""


async def void(_ctx: Ctx, _args: Unpacker) -> bytes:
    return b""


PROCEDURES = {
    MNT_NULL: void, MNT_MNT: mnt, MNT_DUMP: dump, MNT_UMNT: umnt, MNT_UMNTALL: void,
    MNT_EXPORT: export,
}
