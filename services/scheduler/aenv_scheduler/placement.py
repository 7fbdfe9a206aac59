"""Placement arithmetic on plain records: which nodes can take a sandbox, and which is best.

A node's free capacity is its capacity minus what it reports allocated minus what this scheduler
has reserved on it for placements the node has not accounted for yet. Among the nodes that fit,
the one that already caches the template wins (no base image to fetch), then the least loaded.
Disk is only checked on nodes that declare a disk capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aenv.cluster.v1 import cluster_pb2

Resources = cluster_pb2.Resources
NodeRecord = cluster_pb2.NodeRecord

NOTHING = Resources()


def resolve_demand(
    requested: Resources, template_default: Resources | None, fallback: Resources
) -> Resources:
    """Field by field: the request's value, else the template's default, else `fallback`."""

    def pick(field: str) -> int:
        for source in (requested, template_default, fallback):
            if source is not None and getattr(source, field):
                value: int = getattr(source, field)
                return value
        return 0

    return Resources(vcpus=pick("vcpus"), memory_mib=pick("memory_mib"), disk_mib=pick("disk_mib"))


def add(a: Resources, b: Resources) -> Resources:
    return Resources(
        vcpus=a.vcpus + b.vcpus,
        memory_mib=a.memory_mib + b.memory_mib,
        disk_mib=a.disk_mib + b.disk_mib,
    )


def _fits_within(capacity: Resources, used: Resources, need: Resources) -> bool:
    if used.vcpus + need.vcpus > capacity.vcpus:
        return False
    if used.memory_mib + need.memory_mib > capacity.memory_mib:
        return False
    return not capacity.disk_mib or used.disk_mib + need.disk_mib <= capacity.disk_mib


def fits_now(node: NodeRecord, reserved: Resources, need: Resources) -> bool:
    return _fits_within(node.capacity, add(node.allocated, reserved), need)


def fits_when_empty(node: NodeRecord, need: Resources) -> bool:
    return _fits_within(node.capacity, NOTHING, need)


def load(node: NodeRecord, reserved: Resources) -> float:
    """The busier of CPU and memory, as a fraction of capacity."""
    used = add(node.allocated, reserved)
    cpu = used.vcpus / node.capacity.vcpus if node.capacity.vcpus else 1.0
    memory = used.memory_mib / node.capacity.memory_mib if node.capacity.memory_mib else 1.0
    return max(cpu, memory)


def choose_node(
    nodes: Iterable[NodeRecord],
    need: Resources,
    template_id: str,
    reserved: Mapping[str, Resources],
) -> NodeRecord | None:
    best: NodeRecord | None = None
    best_rank: tuple[bool, float, int, str] | None = None
    for node in nodes:
        held = reserved.get(node.node_id, NOTHING)
        if not fits_now(node, held, need):
            continue
        uncached = template_id not in node.cached_templates
        rank = (uncached, load(node, held), node.sandbox_count, node.node_id)
        if best_rank is None or rank < best_rank:
            best, best_rank = node, rank
    return best
