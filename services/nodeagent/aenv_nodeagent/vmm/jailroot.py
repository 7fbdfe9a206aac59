"""The root a jailed QEMU sees (run by jail.py, standard library only): a mount namespace of its
own whose `/` is a fresh tmpfs holding the system's programs and libraries read-only, a few
device nodes, a /proc showing only its own uid's processes, and the VM's own files bind-mounted
at the paths the host knows them by (its command line and QMP paths need no translation) —
as Firecracker's jailer does with its chroot, but with pivot_root, so no path leads back out.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_MNT_DETACH = 2
_CLONE_NEWNS = 0x20000
_SYS_PIVOT_ROOT = 155  # x86-64

# What QEMU and its libraries read: read-only, and none of the host's data (/root, /home, /var,
# /etc, /tmp, the node's state) comes along.
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/kvm",
           "/dev/net/tun")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                       ctypes.c_ulong(flags), data and data.encode()), f"mount {target}")


def _bind(source: str, target: str, *, writable: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
    _mount(source, target, None, _MS_BIND | _MS_REC)
    flags = _MS_BIND | _MS_REMOUNT | _MS_NOSUID | (0 if writable else _MS_RDONLY)
    if not source.startswith("/dev/"):
        flags |= _MS_NODEV
    _mount(None, target, None, flags)


def _system(root: str) -> None:
    for path in SYSTEM_DIRS:
        if os.path.islink(path):  # /lib -> usr/lib on merged-/usr systems
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            _bind(path, root + path, writable=False)
    for device in DEVICES:
        if os.path.exists(device):
            _bind(device, root + device, writable=True)
    os.makedirs(root + "/proc")
    # Only this uid's processes (its own and its frozen copies), nothing of the host's kernel.
    _mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
           "hidepid=invisible,subset=pid")


def enter(root: str, writable: Sequence[str], readonly: Sequence[str]) -> None:
    """Make `root` (an empty directory) this process's `/`, holding the system and the given
    paths (files or directories), in a mount namespace of its own."""
    _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing of ours leaks back to the host
    _mount("aenv-jail", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    _system(root)
    for path in writable:
        _bind(path, root + path, writable=True)
    for path in readonly:
        _bind(path, root + path, writable=False)
    os.chdir(root)
    os.makedirs(".old")
    _check(_libc.syscall(_SYS_PIVOT_ROOT, b".", b".old"), "pivot_root")
    _check(_libc.umount2(b"/.old", _MNT_DETACH), "umount /.old")
    os.rmdir("/.old")
    _mount(None, "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir("/")
