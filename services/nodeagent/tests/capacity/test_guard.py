"""The node's own limit over its sandbox wing (fake VMs): creates and forks beyond its capacity
refused with RESOURCE_EXHAUSTED, claims of creates in flight, a create sent again for a sandbox
the node holds; the meter: a VM counts its guest RAM until sampled, a first measurement and the
start of memory pressure are written at once, a pressured node refuses creates."""

from __future__ import annotations

import asyncio

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import ResourceExhausted
from aenv_nodeagent.capacity.guard import NodeCapacity
from aenv_nodeagent.capacity.host import Host
from aenv_nodeagent.capacity.meter import MemoryMeter
from aenv_nodeagent.capacity.rules import offer

from ..sandbox.conftest import NODE_ID, Wing
from .test_rules import policy

R = cluster_pb2.Resources
SHAPE = R(vcpus=1, memory_mib=512, disk_mib=2048)


def guard(wing: Wing, **overrides: object) -> NodeCapacity:
    rules = policy(**overrides)
    capacity: NodeCapacity

    def record() -> cluster_pb2.NodeRecord:
        node = cluster_pb2.NodeRecord(node_id=NODE_ID, allocated=wing.service.registry.allocated())
        capacity.fill(node)
        return node

    capacity = NodeCapacity(
        offer(Host(2, 64_000, 100_000), rules),
        MemoryMeter(rules, wing.service.registry),
        wing.service.registry,
        lambda template_id: SHAPE,
        record,
    )
    return capacity


async def test_creates_beyond_the_nominal_capacity_are_refused(wing: Wing) -> None:
    capacity = guard(wing, vcpus=2)
    for _ in range(2):
        spec = wing.spec()
        with capacity.creating(spec):
            await wing.service.creates.create(spec)
    with pytest.raises(ResourceExhausted, match="2 of 2 vCPUs are taken"):
        capacity.creating(wing.spec()).__enter__()
    # A create sent again for a sandbox the node holds passes: it answers that sandbox.
    again = wing.spec(sandbox_id=wing.service.registry.all()[0].sandbox_id)
    with capacity.creating(again):
        pass


async def test_a_create_counts_once_between_running_and_its_end(wing: Wing) -> None:
    """Its sandbox runs (the record's allocation has it) before its create returns (the record
    published, the answer sent): meanwhile its claim must not count it again, or a 40-vCPU node
    with 39 sandboxes refuses the 40th."""
    capacity = guard(wing, vcpus=2)
    spec = wing.spec()
    with capacity.creating(spec):
        await wing.service.creates.create(spec)
        assert wing.service.registry.allocated().vcpus == 1
        # A create sent again while the first attempt is in flight passes (Conflict follows).
        with capacity.creating(spec):
            pass
        with capacity.creating(wing.spec()):  # 1 running + this one: 2 of 2
            pass


async def test_creates_in_flight_hold_their_whole_guest_ram(wing: Wing) -> None:
    capacity = guard(wing, memory_budget_mib=1024)
    with capacity.creating(wing.spec()), capacity.creating(wing.spec()):
        with pytest.raises(ResourceExhausted, match="memory budget"):
            capacity.creating(wing.spec()).__enter__()
    with capacity.creating(wing.spec()):  # released once the creates ended
        pass
    with pytest.raises(ResourceExhausted, match="memory budget"):
        capacity.forking(SHAPE, 3).__enter__()
    with capacity.forking(SHAPE, 2):
        pass


async def test_a_vm_counts_its_guest_ram_until_measured(wing: Wing) -> None:
    capacity = guard(wing, memory_budget_mib=1024)
    sandbox = await wing.create()
    assert capacity.meter.used_mib() == sandbox.record.resources.memory_mib
    with pytest.raises(ResourceExhausted, match="memory budget"):  # its 512 MiB + 512 + 512
        capacity.forking(SHAPE, 2).__enter__()
    # A fake VM's pid is no process: it measures 0 (a real QEMU's PSS: tests/e2e/test_density).
    assert await capacity.meter.sample()  # measured the first time: the record is written
    assert capacity.meter.used_mib() == 0 == capacity.meter.measured_bytes()
    assert not await capacity.meter.sample()  # nothing new
    with capacity.forking(SHAPE, 1):
        pass


async def test_pressure_refuses_creates_and_is_published_when_it_begins(wing: Wing) -> None:
    capacity = guard(wing, available_min_mib=1 << 30)  # no host has that much available
    published = asyncio.Event()

    async def publish() -> None:
        published.set()

    meter = asyncio.create_task(capacity.meter.run(publish, 0.01))
    try:
        await asyncio.wait_for(published.wait(), 5)
    finally:
        meter.cancel()
    record = cluster_pb2.NodeRecord()
    capacity.fill(record)
    assert record.pressure.startswith("MemAvailable") and record.host_memory_available_mib > 0
    assert record.memory_budget_mib == 64_000 - 2048
    with pytest.raises(ResourceExhausted, match="memory pressure"):
        capacity.creating(wing.spec()).__enter__()
