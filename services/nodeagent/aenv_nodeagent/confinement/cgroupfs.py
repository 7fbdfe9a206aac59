"""The cgroup filesystem: which hierarchies this host mounts and where a process sits in them
(parsed from /proc's mountinfo and cgroup files: pure), and the few file operations on them.

Two layouts exist: cgroup v2, one hierarchy holding every controller, and cgroup v1, a hierarchy
per controller (or per group of them). Hybrid hosts mount both, with the controllers on v1 and a
v2 hierarchy that holds none (systemd's `unified`): what a controller does is decided by where
it is attached, so a layout is chosen by the controllers, not by the mounts.
"""

from __future__ import annotations

import contextlib
import errno
from dataclasses import dataclass
from pathlib import Path

# The controllers a VM is held by; io is used where it exists (cgroup v2 only: v1's blkio
# weight needs the CFQ/BFQ scheduler, which multi-queue hosts rarely run).
REQUIRED = frozenset({"cpu", "memory", "pids"})
OPTIONAL_V2 = frozenset({"io"})
PROCS = "cgroup.procs"


@dataclass(frozen=True)
class Mount:
    path: Path
    version: int
    # The cgroup mounted there: not "/" in a cgroup namespace or a bind mount of a subtree.
    root: str
    controllers: frozenset[str]  # v1: from the mount options; v2: filled in by reading the fs


@dataclass(frozen=True)
class Hierarchy:
    """One hierarchy the node uses: where it is mounted and which of its controllers."""

    mount: Mount
    controllers: frozenset[str]

    @property
    def version(self) -> int:
        return self.mount.version

    def path_of(self, cgroup: str) -> Path | None:
        """The directory of `cgroup` (as /proc/<pid>/cgroup names it), None if not mounted."""
        root = self.mount.root.rstrip("/")
        if cgroup != root and not cgroup.startswith(root + "/"):
            return None
        return self.mount.path / cgroup[len(root):].lstrip("/")


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup mounts of a /proc/<pid>/mountinfo (v2 ones without their controllers)."""
    mounts = []
    for line in text.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        version = 2 if tail[0] == "cgroup2" else 1
        options = frozenset(tail[2].split(",")) if version == 1 else frozenset()
        mounts.append(Mount(Path(_unescape(fields[4])), version, _unescape(fields[3]), options))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/<pid>/cgroup as controller -> cgroup path; the v2 hierarchy's under ""."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def v2_hierarchy(mount: Mount, available: frozenset[str]) -> Hierarchy | None:
    """The v2 hierarchy at `mount` if it holds every required controller (`available`: its
    root's cgroup.controllers)."""
    if mount.version != 2 or not REQUIRED <= available:
        return None
    return Hierarchy(Mount(mount.path, 2, mount.root, available),
                     REQUIRED | (OPTIONAL_V2 & available))


def v1_hierarchies(mounts: list[Mount]) -> tuple[Hierarchy, ...] | None:
    """One v1 hierarchy per group of required controllers, if all of them are mounted."""
    chosen: dict[Path, Hierarchy] = {}
    for controller in sorted(REQUIRED):
        mount = next((m for m in mounts if m.version == 1 and controller in m.controllers), None)
        if mount is None:
            return None
        held = chosen.get(mount.path)
        used = (held.controllers if held else frozenset()) | {controller}
        chosen[mount.path] = Hierarchy(mount, used)
    return tuple(chosen.values())


def read_v2_controllers(mount: Path) -> frozenset[str]:
    try:
        return frozenset((mount / "cgroup.controllers").read_text().split())
    except OSError:
        return frozenset()


def enable_v2_controllers(directory: Path, controllers: frozenset[str]) -> None:
    """Let `directory`'s children use `controllers` (a v2 cgroup that holds processes refuses,
    with EBUSY: the "no internal processes" rule)."""
    control = directory / "cgroup.subtree_control"
    enabled = frozenset(control.read_text().split()) if control.exists() else frozenset()
    missing = sorted(controllers - enabled)
    if missing:
        control.write_text(" ".join(f"+{name}" for name in missing))


def write_files(directory: Path, files: dict[str, str]) -> None:
    for name, value in files.items():
        (directory / name).write_text(value)


def remove_dir(directory: Path) -> bool:
    """Remove a cgroup; False while processes are still in it (or it still has children)."""
    try:
        directory.rmdir()
    except FileNotFoundError:
        return True
    except OSError as err:
        if err.errno in (errno.EBUSY, errno.ENOTEMPTY):
            return False
        raise
    return True


def pids_in(directory: Path) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(pid) for pid in (directory / PROCS).read_text().split()]
    return []


def proc_cgroup(pid: int) -> dict[str, str]:
    try:
        return parse_proc_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return {}


def _unescape(field: str) -> str:
    # mountinfo octal-escapes space, tab, newline and backslash.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def children(directory: Path) -> list[Path]:
    """The child cgroups of `directory` (its subdirectories)."""
    try:
        return [entry for entry in directory.iterdir() if entry.is_dir()]
    except FileNotFoundError:
        return []



def proc_cgroup_self() -> dict[str, str]:
    return parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
