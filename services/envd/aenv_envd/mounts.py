"""The guest's mount table (/proc/self/mountinfo): which filesystem a path lives on, to refuse
watching network mounts (spec §3.5 WatchDir), and what is mounted where, so /init's volume
mounts skip what a restored guest already has (volume_mounts.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"

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
        "lustre",
        "gpfs",
    }
)
# Upstream envd refuses every FUSE filesystem (statfs magic FUSE_SUPER_MAGIC): a FUSE server
# may forward anything, and inotify sees only what this kernel itself did.
_FUSE_TYPES = ("fuse", "fuseblk")


@dataclass(frozen=True)
class MountEntry:
    """One line of mountinfo (proc(5)): where, what, and the mount point's own options."""

    mount_point: str
    fstype: str
    source: str
    options: frozenset[str]  # per mount point: ro/rw, nosuid, nodev, relatime, ...

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Every well-formed line, in the kernel's order (a later mount on a point hides earlier)."""
    entries = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 2:
            continue
        entries.append(MountEntry(_unescape(fields[4]), tail[0], _unescape(tail[1]),
                                  frozenset(fields[5].split(","))))
    return entries


def read_mountinfo(mountinfo: str = MOUNTINFO) -> list[MountEntry]:
    """:raise OSError: the table cannot be read (no /proc)."""
    with open(mountinfo) as file:
        return parse_mountinfo(file.read())


def mounted_at(path: str, mountinfo: str = MOUNTINFO) -> MountEntry | None:
    """The mount visible at exactly `path` (the topmost of those stacked there), or None."""
    found = None
    for entry in read_mountinfo(mountinfo):
        if entry.mount_point == path:
            found = entry
    return found


def filesystem_type(path: str, mountinfo: str = MOUNTINFO) -> str | None:
    """fstype of the longest mount point containing `path`."""
    real = os.path.realpath(path)
    best, best_type = "", None
    for entry in read_mountinfo(mountinfo):
        mount_point = entry.mount_point
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, entry.fstype
    return best_type


def is_network_filesystem(fstype: str | None) -> bool:
    if fstype is None:
        return False
    return fstype in NETWORK_FS_TYPES or fstype in _FUSE_TYPES or fstype.startswith("fuse.")


def is_network_mount(path: str) -> bool:
    return is_network_filesystem(filesystem_type(path))
