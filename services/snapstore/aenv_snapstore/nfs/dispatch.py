"""From a call record to its reply record: program, version, procedure, credentials."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from . import mount, nfs3_dirs, nfs3_files, nfs3_names
from .consts import MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3, PROC_NAMES
from .context import Ctx
from .rpc import (
    AUTH_BADCRED,
    GARBAGE_ARGS,
    PROC_UNAVAIL,
    PROG_UNAVAIL,
    RPC_VERSION,
    SUCCESS,
    SYSTEM_ERR,
    Call,
    accepted,
    auth_error,
    prog_mismatch,
    rpc_mismatch,
)
from .session import Session
from .xdr import Unpacker, XdrError

log = logging.getLogger("aenv_snapstore.nfs")

Procedure = Callable[[Ctx, Unpacker], Awaitable[bytes]]
# (program, procedure name, status or None, seconds): a hook for metrics, owned by the caller.
Observer = Callable[[str, str, int | None, float], None]


async def _null(_ctx: Ctx, _args: Unpacker) -> bytes:
    return b""


NFS_PROCEDURES: dict[int, Procedure] = dict(enumerate([
    _null, nfs3_files.getattr_, nfs3_files.setattr_, nfs3_files.lookup, nfs3_files.access_,
    nfs3_files.readlink, nfs3_files.read, nfs3_files.write, nfs3_names.create,
    nfs3_names.mkdir, nfs3_names.symlink, nfs3_names.mknod, nfs3_names.remove,
    nfs3_names.rmdir, nfs3_names.rename, nfs3_names.link, nfs3_dirs.readdir,
    nfs3_dirs.readdirplus, nfs3_files.fsstat, nfs3_files.fsinfo, nfs3_files.pathconf,
    nfs3_files.commit,
]))
_MOUNT_NAMES = ("NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT")
_PROGRAMS: dict[int, tuple[str, int, dict[int, Procedure], tuple[str, ...]]] = {
    NFS_PROGRAM: ("nfs", NFS_V3, NFS_PROCEDURES, PROC_NAMES),
    MOUNT_PROGRAM: ("mount", MOUNT_V3, dict(mount.PROCEDURES), _MOUNT_NAMES),
}


async def dispatch(call: Call, session: Session, verifier: bytes, peer: str,
                   observe: Observer | None = None) -> bytes:
    """The reply record of one call (never raises for anything a call can contain)."""
    if call.rpcvers != RPC_VERSION:
        return rpc_mismatch(call.xid)
    program = _PROGRAMS.get(call.prog)
    if program is None:
        return accepted(call.xid, PROG_UNAVAIL)
    program_name, version, procedures, names = program
    if call.vers != version:
        return prog_mismatch(call.xid, version, version)
    procedure = procedures.get(call.proc)
    if procedure is None:
        return accepted(call.xid, PROC_UNAVAIL)
    if call.cred is None:  # neither AUTH_NONE nor a well-formed AUTH_SYS
        return auth_error(call.xid, AUTH_BADCRED)
    ctx = Ctx(session, call.cred, verifier, peer)
    started = time.monotonic()
    try:
        body = await procedure(ctx, call.args)
    except XdrError as exc:
        log.info("nfs garbage arguments", extra={"program": program_name,
                                                 "proc": names[call.proc], "why": str(exc)})
        return accepted(call.xid, GARBAGE_ARGS)
    except Exception:
        log.exception("nfs call failed", extra={"program": program_name,
                                                "proc": names[call.proc]})
        return accepted(call.xid, SYSTEM_ERR)
    if observe is not None:
        code = int.from_bytes(body[:4], "big") if program_name == "nfs" and body else None
        observe(program_name, names[call.proc], code, time.monotonic() - started)
    return accepted(call.xid, SUCCESS, body)
