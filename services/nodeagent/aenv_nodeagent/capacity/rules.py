"""What a node offers (pure): the host's resources times the overcommit ratios, the memory
budget its sandboxes may really use, and when the host is under memory pressure."""

from __future__ import annotations

from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.capacity.host import Host
from aenv_nodeagent.config import NodeAgentSettings

Resources = cluster_pb2.Resources


@dataclass(frozen=True)
class CapacityPolicy:
    """The capacity settings (config.py): overrides, ratios, reserve and pressure floors."""

    vcpus: int | None
    memory_mib: int | None
    disk_mib: int | None
    cpu_overcommit: float
    memory_overcommit: float
    disk_overcommit: float
    memory_reserved_mib: int
    memory_budget_mib: int | None
    available_min_mib: int
    psi_some_avg10_max: float

    @classmethod
    def of(cls, s: NodeAgentSettings) -> CapacityPolicy:
        return cls(
            s.capacity_vcpus,
            s.capacity_memory_mib,
            s.capacity_disk_mib,
            s.cpu_overcommit,
            s.memory_overcommit,
            s.disk_overcommit,
            s.memory_reserved_mib,
            s.memory_budget_mib,
            s.pressure_memory_available_min_mib,
            s.pressure_psi_some_avg10_max,
        )


@dataclass(frozen=True)
class Offer:
    """Nominal capacity (what sandboxes may be given) and the memory budget (what their VMs
    may really use)."""

    capacity: Resources
    memory_budget_mib: int


def offer(host: Host, policy: CapacityPolicy) -> Offer:
    budget = policy.memory_budget_mib or max(host.memory_mib - policy.memory_reserved_mib, 0)
    return Offer(
        Resources(
            vcpus=policy.vcpus or int(host.cpus * policy.cpu_overcommit),
            memory_mib=policy.memory_mib or int(budget * policy.memory_overcommit),
            disk_mib=policy.disk_mib or int(host.disk_free_mib * policy.disk_overcommit),
        ),
        budget,
    )


def pressure(available_mib: int, psi_some_avg10: float | None, policy: CapacityPolicy) -> str:
    """Why the host is under memory pressure ("": it is not). A host that gives no PSI is
    judged by MemAvailable alone."""
    if available_mib < policy.available_min_mib:
        return f"MemAvailable {available_mib} MiB < {policy.available_min_mib} MiB"
    if psi_some_avg10 is not None and psi_some_avg10 > policy.psi_some_avg10_max:
        return f"PSI memory some avg10 {psi_some_avg10:.1f}% > {policy.psi_some_avg10_max:.1f}%"
    return ""
