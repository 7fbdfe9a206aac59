"""A node agent SIGKILLed in a 2-node cluster, kept down: its lease expires within the TTL, its
running sandbox is marked lost and the API says so, new creates go to the other node, and list
and metrics keep working. Started again, it rejoins and reconciles: the sandbox whose VM ran on
meanwhile is re-adopted, running and answering."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.errors import NotFound
from aenv_testing.metrics import scrape, value

from .conftest import another_node_agent, until
from .test_metrics import endpoints

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

DOWN_NODE = "e2e-node"  # the platform's own node agent (tests/conftest.py)
LEASE_TTL_S = 20.0  # the node agent's heartbeat_ttl_s
SWEEP_S = 10.0  # the scheduler's lost-node sweep runs every 5 s


async def test_a_lost_node_is_marked_avoided_listed_and_reconciled(
    platform: Platform, tmp_path: Path
) -> None:
    store = await ClusterStore.connect(CommonSettings(etcd_endpoints=platform.etcd_endpoints))
    made: list[str] = []
    async with (another_node_agent(platform, tmp_path, "e2e-node-up") as (other, _, _),
                GatewayClient.for_home(platform.home, timeout_s=300) as client):
        try:
            on_down = await _sandbox_on(client, DOWN_NODE, made)
            async with platform.service_down("nodeagent", crash=True):
                killed_at = time.monotonic()

                async def node_gone() -> bool:
                    return await store.get_node(DOWN_NODE) is None
                await until(node_gone, LEASE_TTL_S + 5, "the lost node's lease to expire")
                gone_s = time.monotonic() - killed_at

                async def marked_lost() -> bool:
                    record = await store.get_sandbox(on_down)
                    return record is not None and record.state == cluster_pb2.SANDBOX_STATE_LOST
                await until(marked_lost, SWEEP_S, "its sandbox to be marked lost")
                with pytest.raises(NotFound, match="lost with its node"):
                    await client.get_sandbox(on_down)

                elsewhere = await client.create_sandbox("base", timeout_seconds=600)
                made.append(elsewhere.sandbox_id)
                assert elsewhere.node_id == other  # new creates avoid the lost node
                listed = {rec.sandbox_id: rec for rec in await client.list_sandboxes()}
                assert elsewhere.sandbox_id in listed
                for service in ("gateway", "scheduler", "snapstore"):
                    samples = await asyncio.to_thread(scrape, endpoints(platform)[service])
                    assert samples, service
                gateway = await asyncio.to_thread(scrape, endpoints(platform)["gateway"])
                assert value(gateway, "aenv_sandboxes", state="running") >= 1
            # Back: the VM ran on; the agent takes it over again and publishes it running.
            async def answering_again() -> bool:
                # Until the gateway sees the node registered again, the sandbox's traffic has
                # no owner to go to (NotFound), though its record says running.
                try:
                    record = await client.get_sandbox(on_down)
                    answer = await client.run(on_down, "echo back")
                except NotFound:
                    return False
                return (record.state == cluster_pb2.SANDBOX_STATE_RUNNING
                        and answer.stdout == b"back\n")
            await until(answering_again, 15, "the re-adopted sandbox to run and answer")
            print(f"lease gone {gone_s:.1f} s after the kill")
        finally:
            for sandbox_id in made:
                try:
                    await client.kill_sandbox(sandbox_id)
                except NotFound:
                    pass
            await store.close()


async def _sandbox_on(client: GatewayClient, node_id: str, made: list[str]) -> str:
    """A sandbox placed on `node_id` (placement spreads: a few creates find one)."""
    for _ in range(6):
        sandbox = await client.create_sandbox("base", timeout_seconds=600)
        made.append(sandbox.sandbox_id)
        if sandbox.node_id == node_id:
            return sandbox.sandbox_id
    raise AssertionError(f"no create placed on {node_id}")
