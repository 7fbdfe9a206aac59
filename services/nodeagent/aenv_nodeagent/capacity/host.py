"""What the host has and what its VMs use, read from /proc and the cgroup and file systems:
CPUs, memory (MemTotal, or the agent's cgroup limit when lower), free disk, MemAvailable, PSI
memory pressure, and a process's PSS. Parsers are pure; the readers never raise (a value the
host does not give reads as its absence)."""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.confinement.cgroupfs import (
    Hierarchy,
    Mount,
    parse_mountinfo,
    proc_cgroup_self,
)

MIB = 1 << 20
# A cgroup v1 memory limit at or above this is "no limit" (the kernel's is PAGE_COUNTER_MAX).
_NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class Host:
    cpus: int
    memory_mib: int
    disk_free_mib: int


def read_host(state_dir: Path) -> Host:
    """The host as this node agent sees it: the CPUs it may run on, its memory (the agent's
    cgroup limit when that is lower than MemTotal), the free disk under `state_dir`."""
    memory = meminfo_kib("MemTotal") // 1024
    limit = cgroup_memory_limit()
    if limit is not None:
        memory = min(memory, limit // MIB)
    return Host(usable_cpus(), memory, disk_free_mib(state_dir))


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a cpuset narrows it)."""
    return len(os.sched_getaffinity(0))


def disk_free_mib(path: Path) -> int:
    """Free space of the file system holding `path` (its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free // MIB


def memory_available_mib() -> int:
    return meminfo_kib("MemAvailable") // 1024


def meminfo_kib(field: str) -> int:
    with contextlib.suppress(OSError):
        return parse_meminfo(Path("/proc/meminfo").read_text()).get(field, 0)
    return 0


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as field -> kiB."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        with contextlib.suppress(ValueError, IndexError):
            found[name] = int(rest.split()[0])
    return found


def psi_memory_some_avg10() -> float | None:
    """The share of the last 10 s some task stalled on memory, in percent (None: no PSI)."""
    with contextlib.suppress(OSError):
        return parse_psi_some_avg10(Path("/proc/pressure/memory").read_text())
    return None


def parse_psi_some_avg10(text: str) -> float | None:
    for line in text.splitlines():
        kind, *fields = line.split()
        if kind == "some":
            for field in fields:
                name, _, value = field.partition("=")
                if name == "avg10":
                    return float(value)
    return None


def cgroup_memory_limit() -> int | None:
    """The memory limit (bytes) of the agent's own cgroup, None when it has none."""
    with contextlib.suppress(OSError, ValueError):
        mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
        return memory_limit_of(mounts, proc_cgroup_self())
    return None


def memory_limit_of(mounts: list[Mount], cgroups: dict[str, str]) -> int | None:
    """The memory limit of the cgroup `cgroups` names (v1's memory hierarchy, else v2's)."""
    v1 = next((m for m in mounts if m.version == 1 and "memory" in m.controllers), None)
    mount, cgroup, name = (
        (v1, cgroups.get("memory"), "memory.limit_in_bytes")
        if v1
        else (next((m for m in mounts if m.version == 2), None), cgroups.get(""), "memory.max")
    )
    directory = Hierarchy(mount, frozenset()).path_of(cgroup) if mount and cgroup else None
    if directory is None:
        return None
    value = (directory / name).read_text().strip()
    if value == "max" or int(value) >= _NO_LIMIT:
        return None
    return int(value)


def pss_bytes(pid: int) -> int:
    """The process's proportional set size (0 once it is gone): shared pages (a template's
    memory image mapped by many guests) count a share each."""
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    return 0
