"""Filesystem calls made with the calling user's permissions (issue 18).

envd runs as root; a files request names a user (Basic auth, `username`). Checking paths
ourselves would race with the guest's own processes (a symlink swapped in after the check),
so the kernel checks instead: around the call, the current thread's filesystem identity
becomes the user's (fsuid, fsgid, supplementary groups), which also drops root's
CAP_DAC_OVERRIDE and friends for that thread. Every lookup, `..` and symlink included, is
then judged as if the user made it, and what is created belongs to the user.

The raw syscalls change only the calling thread (glibc's wrappers for setgroups change every
thread of the process). The call runs without yielding to the event loop, so no other
request runs meanwhile on that thread; the identity is restored before returning.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from .users import User

P = ParamSpec("P")
T = TypeVar("T")

# (setgroups, setfsuid, setfsgid) by architecture.
_SYSCALLS = {"x86_64": (116, 122, 123), "aarch64": (159, 151, 152)}
_SETGROUPS, _SETFSUID, _SETFSGID = _SYSCALLS[platform.machine()]
_libc = ctypes.CDLL(None, use_errno=True)


class IdentityNotRestored(RuntimeError):
    """The thread could not become root again: nothing may run on it any more."""


def as_user(user: User, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`call(*args, **kwargs)` with `user`'s filesystem permissions (root: unchanged)."""
    if user.uid == 0 or os.geteuid() != 0:  # envd not root (a test): it acts as itself
        return call(*args, **kwargs)
    groups = os.getgroups()
    _become(user.uid, user.gid, user.groups)
    try:
        return call(*args, **kwargs)
    finally:
        _become(0, os.getegid(), groups)
        if _libc.syscall(_SETFSUID, -1) != 0:  # -1 changes nothing and returns the fsuid
            raise IdentityNotRestored("envd's thread is not root again")


def _become(uid: int, gid: int, groups: tuple[int, ...] | list[int]) -> None:
    array = (ctypes.c_uint * len(groups))(*groups)
    if _libc.syscall(_SETGROUPS, len(groups), array) != 0:
        raise OSError(ctypes.get_errno(), "setgroups failed")
    # setfsgid before setfsuid: once fsuid is not 0, the thread may not pick any gid.
    _libc.syscall(_SETFSGID, gid)
    _libc.syscall(_SETFSUID, uid)
    if _libc.syscall(_SETFSUID, -1) != uid or _libc.syscall(_SETFSGID, -1) != gid:
        raise OSError(f"the thread did not take uid {uid} / gid {gid}")
