"""Density by measurement, with real VMs: a node whose memory budget holds 1 sandbox by its
nominal guest RAM takes several, because placement counts what its VMs really use (PSS), until its
measured use says full; a node under memory pressure (here: a floor no host can meet) gets no
placement though it is empty, and refuses a create sent to it straight."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import pytest_asyncio

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_common.cluster import ClusterStore
from aenv_common.errors import ResourceExhausted
from aenv_common.ids import new_sandbox_id, new_secret

from ..conftest import lone_platform_env, running_platform
from .conftest import another_node_agent, opened_store, until

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

NODE = "dense-node"
# Small, so that a few VMs fill it (bench/density.py fills larger budgets).
BUDGET_MIB = 768
GUEST_MIB = 512  # base's guest RAM
NOMINAL = BUDGET_MIB // GUEST_MIB
# Far past what the measured budget can hold: the loop ends by a refusal, not by this.
MOST = 16


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def dense(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Platform]:
    prefix = "aed" + secrets.token_hex(2) + "x"
    env = lone_platform_env(
        prefix,
        AENV_NODEAGENT_NODE_ID=NODE,
        AENV_NODEAGENT_MEMORY_BUDGET_MIB=str(BUDGET_MIB),
        # A placement that cannot fit is answered soon (429) instead of waiting 30 s.
        AENV_SCHEDULER_QUEUE_WAIT_SECONDS="3",
        # Guests answer slowly on a loaded TCG host: a slow one is not a failed create.
        AENV_NODEAGENT_RESTORE_READY_TIMEOUT_S="180",
    )
    async with running_platform(tmp_path_factory.mktemp("dense-home"), env, prefix) as plat:
        yield plat


@pytest_asyncio.fixture(loop_scope="session")
async def store(dense: Platform) -> AsyncIterator[ClusterStore]:
    async with opened_store(dense.etcd_endpoints) as opened:
        yield opened


async def node_record(store: ClusterStore, node_id: str) -> cluster_pb2.NodeRecord:
    record = await store.get_node(node_id)
    assert record is not None
    return record


async def test_measured_use_places_past_the_nominal_count_until_full(
    dense: Platform, store: ClusterStore
) -> None:
    made: list[str] = []
    async with GatewayClient.for_home(dense.home, timeout_s=300) as client:
        try:
            refused: ResourceExhausted | None = None
            while refused is None and len(made) < MOST:
                try:
                    made.append((await client.create_sandbox("base")).sandbox_id)
                except ResourceExhausted as err:
                    refused = err
            node = await node_record(store, NODE)
            assert refused is not None, f"{len(made)} sandboxes and not full: {node}"
            assert len(made) >= 3 * NOMINAL, node  # nominally, 1 fits
            assert node.memory_budget_mib == BUDGET_MIB and not node.pressure
            assert node.sandbox_count == len(made)
            # Full by measure: the next guest's whole RAM no longer fits beside what they use.
            assert node.memory_used_mib + GUEST_MIB > BUDGET_MIB, node
            assert node.allocated.memory_mib == len(made) * GUEST_MIB <= node.capacity.memory_mib
        finally:
            for sandbox_id in made:
                await client.kill_sandbox(sandbox_id)


async def test_pressure_stops_placements_on_the_node(
    dense: Platform, store: ClusterStore, tmp_path: Path
) -> None:
    # Its floor of MemAvailable is more than any host has: under pressure from the start.
    async with another_node_agent(
        dense, tmp_path, "pressed-node",
        AENV_NODEAGENT_PRESSURE_MEMORY_AVAILABLE_MIN_MIB=str(1 << 30),
    ) as (pressed_id, _, _):
        # It serves gRPC a moment before it registers.
        await until(lambda: _registered(store, pressed_id), 30, "the pressed node's record")
        pressed = await node_record(store, pressed_id)
        assert pressed.pressure.startswith("MemAvailable") and pressed.sandbox_count == 0
        made: list[str] = []
        async with GatewayClient.for_home(dense.home, timeout_s=300) as client:
            try:
                # The empty node would win every placement by load; pressure keeps them off it.
                for _ in range(2):
                    record = await client.create_sandbox("base")
                    made.append(record.sandbox_id)
                    assert record.node_id == NODE
            finally:
                for sandbox_id in made:
                    await client.kill_sandbox(sandbox_id)
        # Sent to it straight (a scheduler that raced, a record read before the pressure):
        # refused by the node agent itself.
        async with grpc.aio.insecure_channel(pressed.nodeagent_address) as channel:
            stub = nodeagent_pb2_grpc.NodeAgentServiceStub(channel)  # type: ignore[no-untyped-call]
            spec = cluster_pb2.SandboxSpec(sandbox_id=new_sandbox_id(), template_id="base",
                                           envd_access_token=new_secret())
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.CreateSandbox(nodeagent_pb2.CreateSandboxRequest(spec=spec), timeout=60)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "memory pressure" in (refused.value.details() or "")
        await until(lambda: _no_sandboxes(store, pressed_id), 10, "the pressed node stays empty")


async def _registered(store: ClusterStore, node_id: str) -> bool:
    return await store.get_node(node_id) is not None


async def _no_sandboxes(store: ClusterStore, node_id: str) -> bool:
    return (await node_record(store, node_id)).sandbox_count == 0
