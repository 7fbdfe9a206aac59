"""What a VM's cgroup holds it to, computed from its shape, and the cgroupfs files that say so.
Pure: no I/O (the files are written by `cgroupfs.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from aenv_common.errors import InvalidArgument

MIB = 1 << 20
# The CFS period: quota is vCPUs x this, so a VM gets its vCPUs' worth of host CPU per period.
CPU_PERIOD_US = 100_000
IO_WEIGHT_PER_VCPU = 100  # cgroup v2's default weight is 100: one vCPU's share
_IO_WEIGHT_MAX = 10_000


@dataclass(frozen=True)
class VmShape:
    """What a VM is given: its vCPUs and guest RAM, and whether it makes frozen copies."""

    vcpus: int
    memory_mib: int
    # A frozen copy (vmm/frozen.py) is a fork of QEMU in the same cgroup: every guest page the
    # running VM rewrites while the copy lives is a second page charged to the cgroup.
    freezes: bool = False
    # Memory QEMU needs beside the node's overhead for this VM (TCG's translation cache).
    vmm_extra_mib: int = 0


@dataclass(frozen=True)
class LimitSettings:
    """The node's knobs: what QEMU itself needs beside the guest's RAM, and how many tasks."""

    memory_overhead_mib: int = 256
    pids_max: int = 512

    def __post_init__(self) -> None:
        if self.memory_overhead_mib < 0 or self.pids_max < 1:
            raise InvalidArgument(f"bad VM cgroup limits: {self}")


@dataclass(frozen=True)
class VmLimits:
    cpu_quota_us: int
    cpu_period_us: int
    memory_bytes: int
    pids_max: int
    io_weight: int


def limits_for(shape: VmShape, settings: LimitSettings) -> VmLimits:
    if shape.vcpus < 1 or shape.memory_mib < 1:
        raise InvalidArgument(f"a VM needs vCPUs and memory, got {shape}")
    guest_mib = shape.memory_mib * (2 if shape.freezes else 1)
    return VmLimits(
        cpu_quota_us=shape.vcpus * CPU_PERIOD_US,
        cpu_period_us=CPU_PERIOD_US,
        memory_bytes=(guest_mib + shape.vmm_extra_mib + settings.memory_overhead_mib) * MIB,
        pids_max=settings.pids_max,
        io_weight=min(_IO_WEIGHT_MAX, shape.vcpus * IO_WEIGHT_PER_VCPU),
    )


# cgroup v1's cpu.shares and v2's cpu.weight: one task's share (their defaults), and the bounds.
_V1_SHARES, _V1_SHARES_MAX = 1024, 262_144
_V2_WEIGHT, _V2_WEIGHT_MAX = 100, 10_000


def slice_cpu_files(version: int, controllers: frozenset[str], host_cpus: int) -> dict[str, str]:
    """The node's slice's CPU share: as much as one busy task per host CPU. At the default (one
    task's share) every VM of the node together would get what one process beside them gets,
    and a loaded host would starve them (a fork of 16 took 7x as long on a shared host)."""
    if "cpu" not in controllers:
        return {}
    if version == 2:
        return {"cpu.weight": str(min(_V2_WEIGHT_MAX, _V2_WEIGHT * host_cpus))}
    return {"cpu.shares": str(min(_V1_SHARES_MAX, _V1_SHARES * host_cpus))}


def vm_cpu_weight_files(*, idle: bool) -> dict[str, str]:
    """A VM's CPU share beside its siblings, in v2's and v1's terms: the default one, or (idle:
    a warm-pool guest warming up) the least, so that it never slows a running sandbox."""
    if idle:
        return {"cpu.weight": "1", "cpu.shares": "2"}
    return {"cpu.weight": str(_V2_WEIGHT), "cpu.shares": str(_V1_SHARES)}


def v2_files(limits: VmLimits, controllers: frozenset[str]) -> dict[str, str]:
    """cgroup v2 interface files of the controllers this node has, in write order."""
    files = {
        "cpu": {"cpu.max": f"{limits.cpu_quota_us} {limits.cpu_period_us}"},
        "memory": {"memory.max": str(limits.memory_bytes)},
        "pids": {"pids.max": str(limits.pids_max)},
        "io": {"io.weight": f"default {limits.io_weight}"},
    }
    return {name: value for controller in sorted(controllers) if controller in files
            for name, value in files[controller].items()}


def v1_files(limits: VmLimits, controller: str) -> dict[str, str]:
    """cgroup v1 files of one hierarchy's controller, in write order (the period before the
    quota: a quota is checked against the period in force)."""
    files = {
        "cpu": {"cpu.cfs_period_us": str(limits.cpu_period_us),
                "cpu.cfs_quota_us": str(limits.cpu_quota_us)},
        "memory": {"memory.limit_in_bytes": str(limits.memory_bytes)},
        "pids": {"pids.max": str(limits.pids_max)},
    }
    return files.get(controller, {})
