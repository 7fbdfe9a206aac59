"""Every VM's cgroup on this node, from the detection of what the host offers at start to the
removal of each cgroup when its VM ends.

Layout, in each hierarchy used (v2: one; v1: cpu, memory, pids): `<parent>/aenv-<key>/<vm>`.
`key` names the node by its state directory, so node agents sharing a host each sweep only their
own; `vm` is made at launch (a warm-pool VM does not know its sandbox yet) and re-found from
/proc/<pid>/cgroup when a restarted agent adopts the VM. The parent is, on v1, the agent's own
cgroup in each hierarchy (v1 lets processes sit in inner cgroups, so the VMs stay inside whatever
holds the agent); on v2 `/aenv` under the root (of what is mounted), because a v2 cgroup whose
children use controllers may hold no process itself, and the agent's own cgroup holds the agent.

A cgroup is removed once its last process is gone. A frozen copy (vmm/frozen.py) is a fork of
QEMU and may outlive it for a while: its cgroup is then left to `sweep`, which every later
removal, the next start and the stop run.
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from aenv_common.errors import Internal, Unavailable
from aenv_nodeagent.confinement import cgroupfs
from aenv_nodeagent.confinement.cgroupfs import Hierarchy
from aenv_nodeagent.confinement.limits import (
    LimitSettings,
    VmShape,
    limits_for,
    slice_cpu_files,
    v1_files,
    v2_files,
    vm_cpu_weight_files,
)

log = logging.getLogger(__name__)

V2_PARENT = "/aenv"


class ConfinementUnavailable(Unavailable):
    """The host cannot confine VMs in cgroups (the reason says what it lacks)."""


@dataclass(frozen=True)
class VmCgroup:
    """One VM's cgroup: a directory per hierarchy, all of the same name."""

    name: str
    dirs: tuple[Path, ...]

    @property
    def procs_files(self) -> list[Path]:
        """What the VMM writes its pid into to join (vmm/jail.py)."""
        return [directory / cgroupfs.PROCS for directory in self.dirs]


def set_cpu_idle(cgroup: VmCgroup | None, idle: bool) -> None:
    """Gives the VM of `cgroup` the least CPU share (idle) or the default one, in whichever of
    its hierarchies has a CPU controller; a VM without a cgroup keeps what it has."""
    if cgroup is None:
        return
    for directory in cgroup.dirs:
        for name, value in vm_cpu_weight_files(idle=idle).items():
            if (directory / name).exists():
                cgroupfs.write_files(directory, {name: value})


def detect(mountinfo: str) -> tuple[Hierarchy, ...]:
    """The hierarchies VMs are confined in: v2 when it holds every required controller, else
    v1's when they are all mounted. :raise ConfinementUnavailable: with what the host has."""
    mounts = cgroupfs.parse_mountinfo(mountinfo)
    v2_mounts = {m.path: cgroupfs.read_v2_controllers(m.path) for m in mounts if m.version == 2}
    for mount in mounts:
        if (v2 := cgroupfs.v2_hierarchy(mount, v2_mounts.get(mount.path, frozenset()))):
            return (v2,)
    v1 = cgroupfs.v1_hierarchies(mounts)
    if v1 is not None:
        return v1
    v1_found = sorted({c for m in mounts if m.version == 1 for c in m.controllers}
                      & cgroupfs.REQUIRED)
    v2_found = "; ".join(f"v2 at {path} has [{' '.join(sorted(controllers))}]"
                         for path, controllers in v2_mounts.items()) or "v2 not mounted"
    raise ConfinementUnavailable(
        f"no cgroup hierarchy offers {', '.join(sorted(cgroupfs.REQUIRED))}: "
        f"{v2_found}; v1 mounts [{' '.join(v1_found)}]")


class VmCgroups:
    """The node's slice in each hierarchy and the VM cgroups in it."""

    def __init__(self, hierarchies: tuple[Hierarchy, ...], slices: tuple[Path, ...],
                 settings: LimitSettings) -> None:
        self.hierarchies = hierarchies
        self.slices = slices
        self._settings = settings
        self._live: set[str] = set()  # cgroups a VM of this agent holds (or is about to)

    @classmethod
    def open(cls, hierarchies: tuple[Hierarchy, ...], key: str, settings: LimitSettings,
             own: dict[str, str], parent: str | None = None) -> VmCgroups:
        """Make the node's slice (`own`: the agent's /proc/self/cgroup, parsed).

        :raise ConfinementUnavailable: the slice cannot be made or given its controllers."""
        slices = []
        for hierarchy in hierarchies:
            base = parent or _default_parent(hierarchy, own)
            top = hierarchy.path_of(base)
            if top is None:
                raise ConfinementUnavailable(
                    f"cgroup {base} is outside the hierarchy mounted at {hierarchy.mount.path}")
            slices.append(_make_slice(hierarchy, top / f"aenv-{key}"))
        cgroups = cls(hierarchies, tuple(slices), settings)
        swept = cgroups.sweep()  # an earlier run's, now empty
        log.info("VM cgroups ready", extra={"confinement": cgroups.describe(),
                                            "slices": [str(s) for s in slices],
                                            "stale_removed": len(swept)})
        return cgroups

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(c for hierarchy in self.hierarchies for c in hierarchy.controllers)

    def describe(self) -> str:
        version = self.hierarchies[0].version
        return f"cgroup v{version} ({', '.join(sorted(self.controllers))})"

    def create(self, shape: VmShape) -> VmCgroup:
        """A new cgroup holding a VM to `shape`'s limits (empty until the VMM joins it).

        :raise Internal: the cgroupfs refused (the VM must then not start)."""
        name = f"vm-{secrets.token_hex(6)}"
        limits = limits_for(shape, self._settings)
        self._live.add(name)  # before the directories exist: a sweep must not take them
        made: list[Path] = []
        try:
            for hierarchy, slice_dir in zip(self.hierarchies, self.slices, strict=True):
                if not slice_dir.is_dir():  # removed under us (by hand, a cleanup): made again
                    _make_slice(hierarchy, slice_dir)
                directory = slice_dir / name
                directory.mkdir()
                made.append(directory)
                if hierarchy.version == 2:
                    cgroupfs.write_files(directory, v2_files(limits, hierarchy.controllers))
                for controller in sorted(hierarchy.controllers) if hierarchy.version == 1 else ():
                    cgroupfs.write_files(directory, v1_files(limits, controller))
        except (OSError, ConfinementUnavailable) as err:
            for directory in made:
                cgroupfs.remove_dir(directory)
            self._live.discard(name)
            raise Internal(f"cannot make the VM cgroup {name}: {err}") from err
        return VmCgroup(name, tuple(made))

    def remove(self, cgroup: VmCgroup) -> bool:
        """Remove the cgroup of a VM that ended; False when a process (a frozen copy) still
        holds it: the next sweep takes it."""
        self._live.discard(cgroup.name)
        gone = all([cgroupfs.remove_dir(directory) for directory in cgroup.dirs])
        if not gone:
            log.info("VM cgroup still in use, left to the sweep",
                     extra={"cgroup": cgroup.name,
                            "pids": [p for d in cgroup.dirs for p in cgroupfs.pids_in(d)]})
        self.sweep()
        return gone

    def forget(self, cgroup: VmCgroup) -> None:
        """A VM let go of without being stopped: its cgroup is no longer this agent's to keep
        (the sweep takes it once it is empty)."""
        self._live.discard(cgroup.name)

    def of_pid(self, pid: int) -> VmCgroup | None:
        """The cgroup of a running VMM of this node (one an earlier run started), if it has one;
        it is then this agent's to remove."""
        placed = cgroupfs.proc_cgroup(pid)
        dirs = []
        for hierarchy, slice_dir in zip(self.hierarchies, self.slices, strict=True):
            key = "" if hierarchy.version == 2 else min(hierarchy.controllers)
            directory = hierarchy.path_of(placed.get(key, ""))
            if directory is None or directory.parent != slice_dir:
                return None
            dirs.append(directory)
        if len({d.name for d in dirs}) != 1:
            return None
        self._live.add(dirs[0].name)
        return VmCgroup(dirs[0].name, tuple(dirs))

    def sweep(self) -> list[str]:
        """Remove the cgroups no VM of this agent holds once they are empty; the names removed."""
        removed = []
        for slice_dir in self.slices:
            for directory in cgroupfs.children(slice_dir):
                if directory.name not in self._live and cgroupfs.remove_dir(directory):
                    removed.append(directory.name)
        return removed

    def close(self) -> None:
        """At the agent's stop, once its VMs are gone: the node's slices go too when empty."""
        self.sweep()
        for slice_dir in self.slices:
            cgroupfs.remove_dir(slice_dir)


def _default_parent(hierarchy: Hierarchy, own: dict[str, str]) -> str:
    if hierarchy.version == 2:  # under the top of what is mounted (a container's own subtree)
        return hierarchy.mount.root.rstrip("/") + V2_PARENT
    return own.get(min(hierarchy.controllers), "/")


def _make_slice(hierarchy: Hierarchy, slice_dir: Path) -> Path:
    try:
        slice_dir.mkdir(parents=True, exist_ok=True)
        if hierarchy.version == 2:
            # Every cgroup from the root down to the slice passes the controllers on.
            relative = slice_dir.relative_to(hierarchy.mount.path)
            for depth in range(len(relative.parts) + 1):
                cgroupfs.enable_v2_controllers(
                    hierarchy.mount.path.joinpath(*relative.parts[:depth]), hierarchy.controllers)
        cgroupfs.write_files(slice_dir, slice_cpu_files(
            hierarchy.version, hierarchy.controllers, os.cpu_count() or 1))
    except OSError as err:
        raise ConfinementUnavailable(
            f"cannot make the node's cgroup {slice_dir}: {err.strerror or err}") from err
    return slice_dir
