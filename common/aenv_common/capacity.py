"""Whether a sandbox fits on a node: the one rule the scheduler places by and the node agent
enforces on itself (architecture.md, Density), on the node's record.

Two bounds hold at once. Nominal: what the node's sandboxes were given (vCPUs, guest RAM, disk)
plus what is promised to placements it has not accounted for yet stays within `capacity`, the
host's resources times the configured overcommit ratios. Measured: what its VMs really use (PSS)
plus the promised placements' whole guest RAM (not measured yet) plus the new sandbox's whole
guest RAM stays within `memory_budget_mib`, the host memory the sandboxes may really use. A node
under memory pressure takes nothing.
"""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2

Resources = cluster_pb2.Resources
NodeRecord = cluster_pb2.NodeRecord


def add(a: Resources, b: Resources) -> Resources:
    return Resources(
        vcpus=a.vcpus + b.vcpus,
        memory_mib=a.memory_mib + b.memory_mib,
        disk_mib=a.disk_mib + b.disk_mib,
    )


def nominal_refusal(capacity: Resources, used: Resources, need: Resources) -> str | None:
    """Why `need` does not fit beside `used` in `capacity` (None: it fits). Disk is only
    checked where a capacity is declared."""
    if used.vcpus + need.vcpus > capacity.vcpus:
        return f"{used.vcpus} of {capacity.vcpus} vCPUs are taken"
    if used.memory_mib + need.memory_mib > capacity.memory_mib:
        return f"{used.memory_mib} of {capacity.memory_mib} MiB of guest memory are given"
    if capacity.disk_mib and used.disk_mib + need.disk_mib > capacity.disk_mib:
        return f"{used.disk_mib} of {capacity.disk_mib} MiB of disk are given"
    return None


def refusal(node: NodeRecord, reserved: Resources, need: Resources) -> str | None:
    """Why the node cannot take `need` now, beside `reserved` (None: it can)."""
    if node.pressure:
        return f"memory pressure: {node.pressure}"
    nominal = nominal_refusal(node.capacity, add(node.allocated, reserved), need)
    if nominal is not None:
        return nominal
    if not node.memory_budget_mib:
        return None
    measured = node.memory_used_mib + reserved.memory_mib + need.memory_mib
    if measured > node.memory_budget_mib:
        return (
            f"{node.memory_used_mib} MiB used + {reserved.memory_mib} MiB promised + "
            f"{need.memory_mib} MiB > the {node.memory_budget_mib} MiB memory budget"
        )
    return None


def fits_when_empty(node: NodeRecord, need: Resources) -> bool:
    """Whether the node could ever take `need` (pressure passes; an empty node's VMs use 0)."""
    if nominal_refusal(node.capacity, Resources(), need) is not None:
        return False
    return not node.memory_budget_mib or need.memory_mib <= node.memory_budget_mib


def load(node: NodeRecord, reserved: Resources) -> float:
    """The busier of CPU (nominal) and memory (measured where the node measures, else
    nominal), as a fraction of what the node offers."""
    used = add(node.allocated, reserved)
    cpu = used.vcpus / node.capacity.vcpus if node.capacity.vcpus else 1.0
    if node.memory_budget_mib:
        memory = (node.memory_used_mib + reserved.memory_mib) / node.memory_budget_mib
    else:
        memory = used.memory_mib / node.capacity.memory_mib if node.capacity.memory_mib else 1.0
    return max(cpu, memory)
