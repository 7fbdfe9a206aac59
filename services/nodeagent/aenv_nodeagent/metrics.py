"""The node agent's Prometheus metrics: its operations' times and their phases' (recorded by
`PhaseTimer`), and, read at each scrape, its sandboxes by state, the warm pool's depth, the
capacity it offers, what it has allocated, what its VMs really use (PSS, not nominal RAM) within
its memory budget, and memory pressure.
Served on `metrics_listen` (aenv_common.metrics)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from aenv.cluster.v1 import cluster_pb2
from aenv_common.metrics import LATENCY_BUCKETS

OPERATION_SECONDS = Histogram(
    "aenv_node_operation_seconds",
    "A sandbox operation on this node (sandbox.create, .resume, .pause, .snapshot, .reset, "
    ".kill), by outcome", ["operation", "outcome"], buckets=LATENCY_BUCKETS)
PHASE_SECONDS = Histogram(
    "aenv_node_operation_phase_seconds",
    "One phase of a sandbox operation (network, restore, envd_ready, publish, …)",
    ["operation", "phase"], buckets=LATENCY_BUCKETS)

MIB = 1 << 20


@dataclass(frozen=True)
class NodeReadings:
    """What a scrape reads from the running agent (each callable is cheap and never blocks)."""

    sandboxes_by_state: Callable[[], dict[str, int]]
    pool_depth: Callable[[], dict[str, int]]
    # Creates that took a woken guest, a pre-started VM, or nothing from the pool (so far).
    pool_takes: Callable[[], dict[str, int]]
    capacity: cluster_pb2.Resources
    allocated: Callable[[], cluster_pb2.Resources]
    # Sampled in the background (capacity/meter.py): a scrape reads no VM's page tables.
    vm_pss_bytes: Callable[[], int]
    host_available_bytes: Callable[[], int]
    memory_budget_mib: int
    # Why the host is under memory pressure ("": it is not).
    pressure: Callable[[], str]


class NodeCollector(Collector):
    def __init__(self, readings: NodeReadings) -> None:
        self._readings = readings

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        r = self._readings
        yield _by_label("aenv_node_sandboxes", "Sandboxes on this node, by state", "state",
                        r.sandboxes_by_state())
        yield _by_label("aenv_node_pool_ready", "Warm pool: network slots, overlays and "
                        "pre-started VMs and woken guests ready", "kind", r.pool_depth())
        takes = CounterMetricFamily("aenv_node_pool_takes", "Creates from a template, by what "
                                    "the warm pool had for them", labels=["took"])
        for took, count in sorted(r.pool_takes().items()):
            takes.add_metric([took], float(count))
        yield takes
        yield _resources("aenv_node_capacity", "What this node offers the scheduler",
                         r.capacity)
        yield _resources("aenv_node_allocated", "What this node's sandboxes were given",
                         r.allocated())
        used = GaugeMetricFamily("aenv_node_vm_memory_pss_bytes",
                                 "Host memory the sandboxes' VMs really use (PSS, summed)")
        used.add_metric([], float(r.vm_pss_bytes()))
        yield used
        available = GaugeMetricFamily("aenv_node_host_memory_available_bytes",
                                      "The host's MemAvailable")
        available.add_metric([], float(r.host_available_bytes()))
        yield available
        budget = GaugeMetricFamily("aenv_node_memory_budget_bytes",
                                   "Host memory this node's sandboxes may really use")
        budget.add_metric([], float(r.memory_budget_mib * MIB))
        yield budget
        pressure = GaugeMetricFamily("aenv_node_memory_pressure",
                                     "1 while host memory pressure stops new sandboxes here")
        pressure.add_metric([], float(bool(r.pressure())))
        yield pressure


def _by_label(name: str, doc: str, label: str, counts: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=[label])
    for value, count in sorted(counts.items()):
        family.add_metric([value], float(count))
    return family


def _resources(name: str, doc: str, resources: cluster_pb2.Resources) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["resource"])
    family.add_metric(["vcpus"], float(resources.vcpus))
    family.add_metric(["memory_bytes"], float(resources.memory_mib * MIB))
    family.add_metric(["disk_bytes"], float(resources.disk_mib * MIB))
    return family
