"""The scheduler's Prometheus metrics, read from it at each scrape: placements made, requests
waiting in the admission queue, reservations held, whether this replica leads, and every live
node's capacity, allocation, memory budget, measured use and pressure as the scheduler sees them
(its watched copy of `nodes/`): what placement decided on."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from aenv.cluster.v1 import cluster_pb2
from aenv_scheduler.scheduler import Scheduler

MIB = 1 << 20


class SchedulerCollector(Collector):
    def __init__(self, scheduler: Scheduler, leading: Callable[[], bool]) -> None:
        self._scheduler = scheduler
        self._leading = leading

    def collect(self) -> Iterator[Metric]:
        s = self._scheduler
        placements = CounterMetricFamily(
            "aenv_scheduler_placements", "Sandboxes placed by this replica"
        )
        placements.add_metric([], float(s.placed))
        yield placements
        yield _gauge(
            "aenv_scheduler_queue_depth",
            "Creates waiting in the admission queue for capacity",
            len(s.queue),
        )
        yield _gauge(
            "aenv_scheduler_reservations",
            "Placements holding room on a node until its record accounts for them",
            len(s.reservations),
        )
        yield _gauge(
            "aenv_scheduler_leader", "1 while this replica is the active one", int(self._leading())
        )
        nodes = s.live_nodes()
        yield _gauge("aenv_scheduler_nodes", "Live nodes", len(nodes))
        yield _per_node(
            "aenv_scheduler_node_capacity",
            "What each node offers",
            nodes,
            lambda node: node.capacity,
        )
        yield _per_node(
            "aenv_scheduler_node_allocated",
            "What each node has allocated",
            nodes,
            lambda node: node.allocated,
        )
        yield _per_node_value(
            "aenv_scheduler_node_memory_budget_bytes",
            "Memory each node's VMs may really use (0: the node reports no budget)",
            nodes,
            lambda node: node.memory_budget_mib * MIB,
        )
        yield _per_node_value(
            "aenv_scheduler_node_memory_used_bytes",
            "Memory each node's VMs really use (PSS), as the node last measured it",
            nodes,
            lambda node: node.memory_used_mib * MIB,
        )
        yield _per_node_value(
            "aenv_scheduler_node_memory_pressure",
            "1 while a node reports memory pressure (it gets no placement)",
            nodes,
            lambda node: float(bool(node.pressure)),
        )


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, doc)
    gauge.add_metric([], float(value))
    return gauge


def _per_node(
    name: str,
    doc: str,
    nodes: list[cluster_pb2.NodeRecord],
    resources: Callable[[cluster_pb2.NodeRecord], cluster_pb2.Resources],
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["node", "resource"])
    for node in nodes:
        held = resources(node)
        family.add_metric([node.node_id, "vcpus"], float(held.vcpus))
        family.add_metric([node.node_id, "memory_bytes"], float(held.memory_mib * MIB))
    return family


def _per_node_value(
    name: str,
    doc: str,
    nodes: list[cluster_pb2.NodeRecord],
    value: Callable[[cluster_pb2.NodeRecord], float],
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["node"])
    for node in nodes:
        family.add_metric([node.node_id], float(value(node)))
    return family
