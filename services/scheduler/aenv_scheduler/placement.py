"""Placement arithmetic on plain records: which nodes can take a sandbox, and which is best.

A node takes a sandbox when the rule it enforces on itself says so (aenv_common.capacity): its
nominal allocation plus what this scheduler reserved on it for placements the node has not
accounted for yet fits its capacity (the host's times the overcommit ratios), its measured use
(PSS) plus those reservations' guest RAM plus the new sandbox's fits its memory budget, and it
reports no memory pressure. Among the nodes that fit, the one that already caches the template
wins (no base image to fetch), then the least loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aenv.cluster.v1 import cluster_pb2
from aenv_common.capacity import add, fits_when_empty, load, refusal

Resources = cluster_pb2.Resources
NodeRecord = cluster_pb2.NodeRecord

NOTHING = Resources()

__all__ = ["NOTHING", "add", "choose_node", "fits_now", "fits_when_empty", "load", "resolve_demand"]


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


def fits_now(node: NodeRecord, reserved: Resources, need: Resources) -> bool:
    return refusal(node, reserved, need) is None


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
