"""Dropping root for a jailed QEMU (run by jail.py, standard library only): its tap opened for
it, then every capability gone (the bounding set too, so nothing executed can regain one)
and the uid and gid of its sandbox, with no supplementary groups."""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct

_PR_CAPBSET_DROP = 24
_TUNSETIFF, _TUNSETOWNER, _TUNSETGROUP = 0x400454CA, 0x400454CC, 0x400454CE
# As the tap was made (network/netlink.py) and QEMU's -netdev tap attaches.
_IFF_TAP, _IFF_NO_PI, _IFF_VNET_HDR = 0x0002, 0x1000, 0x4000

_libc = ctypes.CDLL(None, use_errno=True)


def open_tap(name: str, uid: int) -> int:
    """A descriptor attached to the persistent tap `name` (in this netns), inherited by what is
    executed next, the tap owned by `uid`: without CAP_NET_ADMIN QEMU could not attach, and a
    host's /dev/net/tun may be root's only (0600)."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    try:
        ifreq = struct.pack("16sH22x", name.encode(), _IFF_TAP | _IFF_NO_PI | _IFF_VNET_HDR)
        fcntl.ioctl(fd, _TUNSETIFF, ifreq)
        fcntl.ioctl(fd, _TUNSETOWNER, uid)
        fcntl.ioctl(fd, _TUNSETGROUP, uid)
        os.set_inheritable(fd, True)  # Python opens descriptors close-on-exec
    except OSError:
        os.close(fd)
        raise
    return fd


def tap_by_fd(argv: list[str], name: str, fd: int) -> list[str]:
    """QEMU's `argv` with its `-netdev tap` on `name` taking descriptor `fd` instead (QEMU
    refuses ifname and scripts beside fd; it reads the vnet header flag from the fd)."""
    dropped = ("ifname=", "script=", "downscript=")
    return [",".join([*(o for o in arg.split(",") if not o.startswith(dropped)), f"fd={fd}"])
            if arg.startswith("tap,") and f"ifname={name}" in arg.split(",") else arg
            for arg in argv]


def last_cap() -> int:
    """The highest capability this kernel knows (read before the jail's /proc hides it)."""
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        return int(fh.read())


def drop_to(uid: int, gid: int, last_cap: int) -> None:
    """Become `uid`:`gid` with no groups and no capabilities, for good."""
    prctl = _libc.prctl
    prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    for cap in range(last_cap + 1):
        if prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"PR_CAPBSET_DROP {cap}: {os.strerror(errno)}")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # clears the permitted, effective and ambient sets
