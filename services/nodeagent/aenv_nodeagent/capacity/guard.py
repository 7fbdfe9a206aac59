"""The node's own limit (architecture.md, Density): what it offers and what its meter measured
go into its record, and a create or fork that would pass it is refused here with
RESOURCE_EXHAUSTED, by the rule the scheduler places by (aenv_common.capacity) — schedulers can
race, or place on a record a little old. Creates in flight count their whole guest RAM until
their VMs are measured."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2
from aenv_common.capacity import add, refusal
from aenv_common.errors import ResourceExhausted
from aenv_nodeagent.capacity.host import read_host
from aenv_nodeagent.capacity.meter import MemoryMeter
from aenv_nodeagent.capacity.rules import CapacityPolicy, Offer, offer
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.snapshots.store import SnapshotStore
from aenv_nodeagent.templates.model import TemplateCatalog

log = logging.getLogger(__name__)

Resources = cluster_pb2.Resources


class Shapes(Protocol):
    def __call__(self, template_id: str) -> Resources: ...


class NodeCapacity:
    def __init__(
        self,
        offer: Offer,
        meter: MemoryMeter,
        registry: SandboxRegistry,
        shape: Shapes,
        record: Callable[[], cluster_pb2.NodeRecord],
    ) -> None:
        self.offer = offer
        self.meter = meter
        self._registry = registry
        self._shape = shape
        self._record = record
        self._forking = Resources()  # forks in flight
        # Creates in flight, by sandbox id: one that is running already is in the record's
        # allocation (added before its create returns), and must not count twice meanwhile.
        self._creating: dict[str, Resources] = {}

    @classmethod
    def of_host(
        cls,
        s: NodeAgentSettings,
        registry: SandboxRegistry,
        templates: TemplateCatalog,
        snapshots: SnapshotStore,
        record: Callable[[], cluster_pb2.NodeRecord],
    ) -> NodeCapacity:
        """The node's capacity: its host's resources by its settings."""
        policy = CapacityPolicy.of(s)
        host = read_host(s.resolved_state_dir())
        offered = offer(host, policy)
        log.info(
            "node capacity",
            extra={
                "host_cpus": host.cpus,
                "host_memory_mib": host.memory_mib,
                "host_disk_free_mib": host.disk_free_mib,
                "vcpus": offered.capacity.vcpus,
                "memory_mib": offered.capacity.memory_mib,
                "disk_mib": offered.capacity.disk_mib,
                "memory_budget_mib": offered.memory_budget_mib,
            },
        )
        fallback = Resources(
            vcpus=s.default_vcpus, memory_mib=s.default_memory_mib, disk_mib=s.default_disk_mib
        )
        shape = sandbox_shape(templates, snapshots, fallback)
        return cls(offered, MemoryMeter(policy, registry), registry, shape, record)

    def fill(self, record: cluster_pb2.NodeRecord) -> None:
        """The node's offer and what it measured last, into its record (no I/O)."""
        record.capacity.CopyFrom(self.offer.capacity)
        record.memory_budget_mib = self.offer.memory_budget_mib
        record.memory_used_mib = self.meter.used_mib()
        record.host_memory_available_mib = self.meter.available_mib
        record.pressure = self.meter.pressure

    def creating(self, spec: cluster_pb2.SandboxSpec) -> contextlib.AbstractContextManager[None]:
        """Held while the sandbox is made. A create sent again for a sandbox the node holds
        (its answer was lost) or is making passes: it answers that sandbox (or Conflict).

        :raise ResourceExhausted: the sandbox does not fit on this node now.
        """
        if self._registry.has(spec.sandbox_id) or spec.sandbox_id in self._creating:
            return contextlib.nullcontext()  # its first attempt holds the claim
        shape = self._shape(spec.template_id)
        asked = spec.resources
        return self._claim(
            Resources(
                vcpus=asked.vcpus or shape.vcpus,
                memory_mib=asked.memory_mib or shape.memory_mib,
                disk_mib=asked.disk_mib or shape.disk_mib,
            ),
            spec.sandbox_id,
        )

    def forking(self, parent: Resources, count: int) -> contextlib.AbstractContextManager[None]:
        """Held while `count` children of a sandbox shaped `parent` are made.

        :raise ResourceExhausted: they do not fit on this node now.
        """
        return self._claim(
            Resources(
                vcpus=parent.vcpus * count,
                memory_mib=parent.memory_mib * count,
                disk_mib=parent.disk_mib * count,
            )
        )

    def _claimed(self) -> Resources:
        """What creates and forks in flight hold beside the record's allocation."""
        claimed = self._forking
        for sandbox_id, need in self._creating.items():
            if not self._registry.has(sandbox_id):
                claimed = add(claimed, need)
        return claimed

    @contextlib.contextmanager
    def _claim(self, need: Resources, sandbox_id: str | None = None) -> Iterator[None]:
        record = self._record()
        reason = refusal(record, self._claimed(), need)
        if reason is not None:
            log.info("create refused: node full", extra={"reason": reason})
            raise ResourceExhausted(f"node '{record.node_id}' cannot take the sandbox: {reason}")
        if sandbox_id is None:
            self._forking = add(self._forking, need)
        else:
            self._creating[sandbox_id] = need
        try:
            yield
        finally:
            if sandbox_id is None:
                self._forking = Resources(
                    vcpus=self._forking.vcpus - need.vcpus,
                    memory_mib=self._forking.memory_mib - need.memory_mib,
                    disk_mib=self._forking.disk_mib - need.disk_mib,
                )
            else:
                self._creating.pop(sandbox_id, None)


def sandbox_shape(
    templates: TemplateCatalog, snapshots: SnapshotStore, fallback: Resources
) -> Shapes:
    """A sandbox's shape by the template id of its create: the template's (a snapshot's is its
    template's), else `fallback` (a snapshot still in snapstore, a template not pulled yet)."""

    def shape(template_id: str) -> Resources:
        if (snapshot := snapshots.find(template_id)) is not None:
            template_id = snapshot.template_id
        if not templates.has(template_id):
            return fallback
        inputs = templates.inputs(template_id)
        return Resources(vcpus=inputs.vcpus, memory_mib=inputs.memory_mib, disk_mib=inputs.disk_mib)

    return shape
