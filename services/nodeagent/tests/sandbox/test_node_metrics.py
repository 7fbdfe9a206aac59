"""The node's Prometheus metrics: each operation and its phases timed (PhaseTimer), and at a
scrape, its sandboxes by state, the pool's depth, capacity, allocation and real memory use."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, Internal
from aenv_nodeagent.metrics import NodeCollector, NodeReadings
from aenv_testing.metrics import parse, value

from .conftest import Wing


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_operations_and_their_phases_are_timed(wing: Wing) -> None:
    ok = {"operation": "sandbox.create", "outcome": "ok"}
    publish = {"operation": "sandbox.create", "phase": "publish"}
    killed = {"operation": "sandbox.kill", "outcome": "ok"}
    before = [sample("aenv_node_operation_seconds_count", **ok),
              sample("aenv_node_operation_phase_seconds_count", **publish),
              sample("aenv_node_operation_seconds_count", **killed)]
    sandbox = await wing.create()
    await wing.service.kills.kill(sandbox.sandbox_id)
    after = [sample("aenv_node_operation_seconds_count", **ok),
             sample("aenv_node_operation_phase_seconds_count", **publish),
             sample("aenv_node_operation_seconds_count", **killed)]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1]


async def test_a_fork_is_timed_with_its_capture_and_children(wing: Wing) -> None:
    fork = {"operation": "sandbox.fork", "outcome": "ok"}
    children = {"operation": "sandbox.fork", "phase": "children"}
    # Over the fake VM no memory image can be made for the children: each fails (an error entry),
    # the fork itself answers.
    creates = {"operation": "sandbox.create", "outcome": "error"}
    parent = await wing.create()
    before = [sample("aenv_node_operation_seconds_count", **fork),
              sample("aenv_node_operation_phase_seconds_count", **children),
              sample("aenv_node_operation_seconds_count", **creates)]
    results = await wing.service.forks.fork(parent.sandbox_id, 2)
    assert len(results) == 2 and all(isinstance(result, AenvError) for result in results)
    after = [sample("aenv_node_operation_seconds_count", **fork),
             sample("aenv_node_operation_phase_seconds_count", **children),
             sample("aenv_node_operation_seconds_count", **creates)]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 2]


async def test_a_failed_operation_is_timed_as_an_error(wing: Wing) -> None:
    failed = {"operation": "sandbox.create", "outcome": "error"}
    before = sample("aenv_node_operation_seconds_count", **failed)
    wing.envd.fail_on["init"] = Internal("envd /init failed: HTTP 500")
    with pytest.raises(Internal):
        await wing.create()
    assert sample("aenv_node_operation_seconds_count", **failed) - before == 1


async def test_a_scrape_reads_sandboxes_pool_capacity_and_use(wing: Wing) -> None:
    await wing.create()
    registry = CollectorRegistry()
    registry.register(NodeCollector(NodeReadings(
        sandboxes_by_state=lambda: {"running": len(wing.service.registry.all()),
                                    "paused": len(wing.service.registry.paused_ids())},
        pool_depth=lambda: {"slots": 3, "overlays": 2, "vms": 1, "guests": 4},
        pool_takes=lambda: {"woken": 5, "prestarted": 1, "missed": 2},
        capacity=cluster_pb2.Resources(vcpus=8, memory_mib=4096),
        allocated=wing.service.registry.allocated,
        vm_pss_bytes=lambda: 300 << 20,
        host_available_bytes=lambda: 20_000 << 20,
        memory_budget_mib=2048,
        pressure=lambda: "MemAvailable 100 MiB < 1024 MiB",
    )))
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "aenv_node_sandboxes", state="running") == 1
    assert value(samples, "aenv_node_sandboxes", state="paused") == 0
    assert value(samples, "aenv_node_pool_ready", kind="slots") == 3
    assert value(samples, "aenv_node_pool_ready", kind="guests") == 4
    assert value(samples, "aenv_node_pool_takes_total", took="woken") == 5
    assert value(samples, "aenv_node_pool_takes_total", took="missed") == 2
    assert value(samples, "aenv_node_capacity", resource="memory_bytes") == 4096 << 20
    assert value(samples, "aenv_node_allocated", resource="vcpus") == 1
    assert value(samples, "aenv_node_vm_memory_pss_bytes") == 300 << 20
    assert value(samples, "aenv_node_host_memory_available_bytes") == 20_000 << 20
    assert value(samples, "aenv_node_memory_budget_bytes") == 2048 << 20
    assert value(samples, "aenv_node_memory_pressure") == 1
