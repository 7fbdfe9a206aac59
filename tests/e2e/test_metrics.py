"""Every service of a running platform serves Prometheus `/metrics` (the gateway on its HTTP
edge, the gRPC services on their metrics ports), parseable by prometheus_client, and their
counters move with a create and a snapshot made through the official SDK."""

from __future__ import annotations

import asyncio

import pytest
from e2b import Sandbox

from aenv_cli.platform import Platform
from aenv_cli.ports import address
from aenv_testing.metrics import Samples, moved, scrape, value

from .conftest import until

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]


def endpoints(platform: Platform) -> dict[str, str]:
    ports = platform.ports
    return {"gateway": f"{platform.api_url}/metrics",
            **{name: f"http://{address(port)}/metrics" for name, port in (
                ("scheduler", ports.scheduler_metrics), ("nodeagent", ports.nodeagent_metrics),
                ("snapstore", ports.snapstore_metrics))}}


async def scrape_all(platform: Platform) -> dict[str, Samples]:
    urls = endpoints(platform)
    found = await asyncio.gather(*(asyncio.to_thread(scrape, url) for url in urls.values()))
    return dict(zip(urls, found, strict=True))


async def test_every_service_counts_a_create_and_a_snapshot(
    platform: Platform, sdk_env: None
) -> None:
    before = await scrape_all(platform)
    sandbox = await asyncio.to_thread(Sandbox.create, timeout=300)
    snapshot_id = ""
    try:
        snapshot_id = (await asyncio.to_thread(sandbox.create_snapshot)).snapshot_id
        after = await scrape_all(platform)

        # The snapshot is pushed to snapstore after the call returns.
        async def pushed() -> bool:
            now = await asyncio.to_thread(scrape, endpoints(platform)["snapstore"])
            return moved(before["snapstore"], now, "aenv_snapstore_chunk_bytes_written_total") > 0
        await until(pushed, 120, "the snapshot's chunks to reach snapstore")

        # The meter samples the VMs' PSS every interval, off the create's path.
        async def measured() -> bool:
            now = await asyncio.to_thread(scrape, endpoints(platform)["nodeagent"])
            return value(now, "aenv_node_vm_memory_pss_bytes") > 0

        await until(measured, 30, "the node's meter to measure the VM")
    finally:
        if snapshot_id:
            await asyncio.to_thread(Sandbox.delete_snapshot, snapshot_id)
        await asyncio.to_thread(Sandbox.kill, sandbox.sandbox_id)

    gateway, scheduler, node = after["gateway"], after["scheduler"], after["nodeagent"]
    assert moved(before["gateway"], gateway, "aenv_http_requests_total",
                 method="POST", status="201") >= 1
    assert value(gateway, "aenv_sandboxes", state="running") >= 1
    assert moved(before["scheduler"], scheduler, "aenv_scheduler_placements_total") >= 1
    assert value(scheduler, "aenv_scheduler_node_capacity", node="e2e-node",
                 resource="vcpus") > 0
    for operation in ("sandbox.create", "sandbox.snapshot"):
        assert moved(before["nodeagent"], node, "aenv_node_operation_seconds_count",
                     operation=operation, outcome="ok") >= 1, operation
    # envd_init is the phase of every create, whether the pool had a woken guest or not.
    assert moved(before["nodeagent"], node, "aenv_node_operation_phase_seconds_count",
                 operation="sandbox.create", phase="envd_init") >= 1
    assert sum(moved(before["nodeagent"], node, "aenv_node_pool_takes_total", took=took)
               for took in ("woken", "prestarted", "missed")) >= 1
    assert value(node, "aenv_node_sandboxes", state="running") >= 1
    assert moved(before["nodeagent"], node, "aenv_grpc_requests_total",
                 method="/aenv.nodeagent.v1.NodeAgentService/CreateSandbox", code="OK") >= 1
