"""The sandbox's volumes: POST /init's `volumeMounts`, each an NFSv3 mount made with mount(2).

The guest mounts `<server>:<export>` (the node agent's relay on the tap's gateway address, which
carries the sandbox's tickets to the volume server in snapstore). The kernel's NFS
client is called directly through libc's mount(2) with text options (`addr=` because nothing
resolves the server's name, `mountport`/`mountproto` because the relay serves MOUNT on the same
TCP port, `nolock` because there is no lock manager), so no mount.nfs / nfs-common is needed
and bring-your-own images mount as well as ours. The nfsv3 module and its dependencies are
loaded by the initramfs.

/init comes again after every restore (a resume, a fork child, a snapshot's sandbox), into a
kernel that still holds the mounts of its capture: a path already mounted from the same source
is left as it is (NFSv3 is stateless: its RPC client re-dials the relay of the new slot), one
mounted from another source is detached and mounted anew.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import ipaddress
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import mounts as mount_table
from .errors import EnvdError
from .mounts import MountEntry, mounted_at

log = logging.getLogger(__name__)

# <sys/mount.h>
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MNT_DETACH = 0x2

MAX_MOUNTS = 64
MAX_PATH_BYTES = 4096
# A volume's export is `/<volume id>`; kept to characters that need no quoting anywhere.
_EXPORT = re.compile(r"/[A-Za-z0-9._-]{1,255}(/[A-Za-z0-9._-]{1,255})*")
# Volume files are shared between sandboxes: no set-uid binary or device node written by one
# sandbox's root takes effect in another.
_MOUNT_FLAGS = MS_NOSUID | MS_NODEV
# The options every aenv component assumes (close-to-open consistency, one TCP port for MOUNT
# and NFS, a hard mount that outlives a pause); `port` and `addr` are the mount's own.
_NFS_OPTIONS = ("vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock,hard,"
                "timeo=100,retrans=3,lookupcache=positive,actimeo=1,addr={server}")


@dataclass(frozen=True)
class VolumeMount:
    path: str  # absolute, normalised mount point in the guest
    server: str  # IPv4 address
    port: int
    export: str  # "/vol-..."
    read_only: bool

    @property
    def source(self) -> str:
        return f"{self.server}:{self.export}"

    @property
    def options(self) -> str:
        return _NFS_OPTIONS.format(port=self.port, server=self.server)

    @property
    def flags(self) -> int:
        return _MOUNT_FLAGS | (MS_RDONLY if self.read_only else 0)


def parse_volume_mounts(raw: object) -> tuple[VolumeMount, ...]:
    """`volumeMounts` of an /init body (null: none). Nested paths come after their parents.

    :raise ValueError: a malformed list or mount (the caller answers 400).
    """
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("volumeMounts must be a list")
    if len(raw) > MAX_MOUNTS:
        raise ValueError(f"volumeMounts has {len(raw)} mounts, at most {MAX_MOUNTS}")
    mounts = tuple(_parse_one(i, item) for i, item in enumerate(raw))
    paths = [m.path for m in mounts]
    for path in paths:
        if paths.count(path) > 1:
            raise ValueError(f"volumeMounts mounts {path} twice")
    # A parent mounted after its child would hide it.
    return tuple(sorted(mounts, key=lambda m: m.path.count("/")))


def _parse_one(index: int, item: object) -> VolumeMount:
    where = f"volumeMounts[{index}]"
    if not isinstance(item, dict):
        raise ValueError(f"{where} must be an object")
    path, server, port, export = (item.get(k) for k in ("path", "server", "port", "export"))
    read_only = item.get("readOnly", False)
    if not isinstance(path, str) or not _is_mount_point(path):
        raise ValueError(f"{where}.path must be an absolute, normalised path other than /")
    if not isinstance(server, str) or not _is_ipv4(server):
        raise ValueError(f"{where}.server must be an IPv4 address")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"{where}.port must be a TCP port number")
    if not isinstance(export, str) or not _EXPORT.fullmatch(export):
        raise ValueError(f"{where}.export must be an absolute path of [A-Za-z0-9._-] names")
    if ".." in export.split("/") or "." in export.split("/"):
        raise ValueError(f"{where}.export must be normalised")
    if not isinstance(read_only, bool):
        raise ValueError(f"{where}.readOnly must be a boolean")
    return VolumeMount(path, server, port, export, read_only)


def _is_mount_point(path: str) -> bool:
    return (
        path.startswith("/") and path != "/" and os.path.normpath(path) == path
        and not path.startswith("//") and len(path.encode()) <= MAX_PATH_BYTES
        and path.isprintable()
    )


def _is_ipv4(text: str) -> bool:
    try:
        return str(ipaddress.IPv4Address(text)) == text
    except ValueError:
        return False


# The syscalls, at the ctypes boundary (tests replace `_libc`).
_libc: Any = None


def _library() -> Any:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                               ctypes.c_char_p)
        libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
        _libc = libc
    return _libc


def _check(result: int, path: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)


def sys_mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    """mount(2). :raise OSError: with the call's errno."""
    result = _library().mount(source.encode(), target.encode(),
                              fstype.encode() if fstype else None, flags,
                              data.encode() if data else None)
    _check(result, target)


def sys_umount2(target: str, flags: int) -> None:
    """umount2(2). :raise OSError: with the call's errno."""
    _check(_library().umount2(target.encode(), flags), target)


def ensure_mounted(mount: VolumeMount, mountinfo: str | None = None) -> str:
    """Mounts one volume unless it already is; returns what was done (for the log).

    :raise OSError: the mount point cannot be made or a syscall failed.
    """
    table = mountinfo or mount_table.MOUNTINFO
    # A restored guest (resume, fork child) has its mounts at their own paths: found as given,
    # without a stat — which would block /init on the NFS client's re-dial through the new
    # slot's relay. mountinfo names mount points with their symlinks resolved (mount(2)
    # follows them), so a path under a symlink is looked up resolved.
    current = mounted_at(mount.path, table) or mounted_at(os.path.realpath(mount.path), table)
    if current is not None and _same_source(current, mount):
        if current.read_only == mount.read_only:
            return "kept"
        # Per mount point flags only: the NFS superblock and its RPC client stay as they are.
        sys_mount("none", mount.path, None, MS_REMOUNT | MS_BIND | mount.flags, None)
        return "remounted " + ("read-only" if mount.read_only else "read-write")
    replaced = current is not None and current.fstype == "nfs"
    if replaced:
        # Another volume (a fork child's own) where the capture had one: its handles name a
        # volume this sandbox may not reach. Detached, not unmounted: a process blocked in it
        # must not keep this /init waiting.
        sys_umount2(mount.path, MNT_DETACH)
    os.makedirs(mount.path, mode=0o755, exist_ok=True)
    sys_mount(mount.source, mount.path, "nfs", mount.flags, mount.options)
    return "replaced" if replaced else "mounted"


def _same_source(entry: MountEntry, mount: VolumeMount) -> bool:
    return entry.fstype == "nfs" and entry.source == mount.source


class VolumeMounter:
    """Runs /init's mounts one /init at a time, within one deadline for all of them."""

    def __init__(self, timeout_s: float, mountinfo: str | None = None) -> None:
        self._timeout_s = timeout_s
        self._mountinfo = mountinfo
        self._lock = asyncio.Lock()

    async def ensure(self, mounts: Sequence[VolumeMount]) -> None:
        """:raise EnvdError: a mount failed or did not finish in time (internal: 500)."""
        if not mounts:
            return
        async with self._lock:
            deadline = time.monotonic() + self._timeout_s
            for mount in mounts:
                await self._ensure_one(mount, deadline - time.monotonic())

    async def _ensure_one(self, mount: VolumeMount, remaining_s: float) -> None:
        where = f"volume {mount.source} at {mount.path}"
        started = time.monotonic()
        # A hard NFS mount may block in the kernel; the thread is left to finish on its own
        # (nothing can cancel a syscall), /init answers meanwhile.
        scope = asyncio.timeout(max(remaining_s, 0.0))
        try:
            async with scope:
                done = await asyncio.to_thread(ensure_mounted, mount, self._mountinfo)
        except OSError as exc:
            # Not `except TimeoutError`: mount(2)'s own ETIMEDOUT is a TimeoutError too.
            if scope.expired():
                raise EnvdError("internal", f"cannot mount {where}: timed out after "
                                            f"{self._timeout_s:g}s") from None
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            raise EnvdError("internal", f"cannot mount {where}: {exc.strerror} ({name})") from exc
        # Said in the message: the guest's console (where envd logs) shows no extra fields.
        log.info("volume %s %s at %s in %.3fs", mount.source, done, mount.path,
                 time.monotonic() - started)
