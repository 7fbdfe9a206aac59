"""Which filesystem a path lives on, to refuse watching network mounts (spec §3.5 WatchDir)."""

from __future__ import annotations

import os

NETWORK_FS_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "afs",
        "ceph",
        "glusterfs",
        "9p",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.rclone",
        "fuse.gcsfuse",
        "lustre",
        "gpfs",
    }
)


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def filesystem_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """fstype of the longest mount point containing `path`."""
    real = os.path.realpath(path)
    best, best_type = "", None
    with open(mountinfo) as lines:
        for line in lines:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) < 5 or not right:
                continue
            mount_point = _unescape(fields[4])
            inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= len(best):
                best, best_type = mount_point, right.split()[0]
    return best_type


def is_network_mount(path: str) -> bool:
    return filesystem_type(path) in NETWORK_FS_TYPES
