"""Volumes across nodes in the cluster of tests/e2e/cluster.py (hosts in network
namespaces of their own; snapstore serves NFS on the bridge, where only the hosts' relays
reach it): a file written and closed in a sandbox on one host is whole in a sandbox on the
other, and names each makes are found by the other; after the writer's host is lost (its agent
SIGKILLed, its VMs gone), what the writer had closed is all there for the other host's sandbox,
for the content API and for a new sandbox."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from e2b import AsyncSandbox, AsyncVolume

from aenv_cli.client import GatewayClient

from .cluster import Cluster, kill_all, running_cluster
from .volumes.guest import SANDBOX_TIMEOUT_S, sdk_environment, sh, unique

pytestmark = [
    pytest.mark.vm,
    pytest.mark.sdk,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="session"),
]

CREATE_TIMEOUT_S = 600.0


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    node_env = {
        "AENV_NODEAGENT_MEMORY_BUDGET_MIB": "4096",
        # The machine is shared: other work's memory use must not pass for this node's pressure.
        "AENV_NODEAGENT_PRESSURE_MEMORY_AVAILABLE_MIN_MIB": "256",
        "AENV_NODEAGENT_PRESSURE_PSI_SOME_AVG10_MAX": "100",
        "AENV_NODEAGENT_WARM_POOL_VMS": "0",
        "AENV_NODEAGENT_WARM_POOL_GUESTS": "0",
        "AENV_NODEAGENT_WARM_POOL_SLOTS": "0",
        "AENV_NODEAGENT_WARM_POOL_OVERLAYS": "0",
        "AENV_NODEAGENT_RESTORE_READY_TIMEOUT_S": "300",
        "AENV_NODEAGENT_HEARTBEAT_TTL_S": "5",
    }
    home = tmp_path_factory.mktemp("volumes-cluster")
    async with running_cluster(home, hosts=2, schedulers=1, node_env=node_env) as made:
        yield made


async def test_a_volume_across_nodes_and_a_lost_writer(cluster: Cluster) -> None:
    with sdk_environment(cluster.e2b_env()):
        volume = await AsyncVolume.create(unique("across"))
        try:
            async with GatewayClient(
                cluster.grpc_target, cluster.api_key, timeout_s=CREATE_TIMEOUT_S
            ) as client:
                try:
                    await _across_nodes(cluster, client, volume)
                finally:
                    await kill_all(client)
        finally:
            with contextlib.suppress(Exception):
                await AsyncVolume.destroy(volume.volume_id)


async def _across_nodes(cluster: Cluster, client: GatewayClient, volume: AsyncVolume) -> None:
    writer, reader = await _one_on_each_host(client, volume)
    nodes = {r.sandbox_id: r.node_id for r in await client.list_sandboxes()}
    assert nodes[writer.sandbox_id] != nodes[reader.sandbox_id], nodes

    digest = await sh(writer, "head -c 8388608 /dev/urandom > /data/blob && md5sum < /data/blob")
    assert await sh(reader, "md5sum < /data/blob") == digest
    await sh(reader, "echo from-reader > /data/reader.txt")
    assert await sh(writer, "cat /data/reader.txt") == "from-reader\n"

    # The writer's last file, closed; then its host is lost with everything on it.
    await sh(writer, "echo last-words > /data/last.txt")
    [lost] = [h for h in cluster.hosts if h.node_id == nodes[writer.sandbox_id]]
    assert lost.child is not None
    await lost.child.crash()
    await lost.stop()  # its cleanup: the VMs the agent left go too

    await sh(reader, "sync; echo 3 > /proc/sys/vm/drop_caches")  # read from the server
    assert await sh(reader, "cat /data/last.txt") == "last-words\n"
    assert await sh(reader, "md5sum < /data/blob") == digest
    assert await volume.read_file("/last.txt") == "last-words\n"
    fresh = await AsyncSandbox.create(timeout=300, volume_mounts={"/data": volume})
    assert await sh(fresh, "cat /data/last.txt /data/reader.txt") == "last-words\nfrom-reader\n"


async def _one_on_each_host(
    client: GatewayClient, volume: AsyncVolume
) -> tuple[AsyncSandbox, AsyncSandbox]:
    """Two sandboxes mounting `volume` at /data on different hosts (the scheduler spreads
    creates over empty nodes; a few more tries if it did not)."""
    made: list[AsyncSandbox] = []
    for _ in range(4):
        made.append(
            await AsyncSandbox.create(timeout=SANDBOX_TIMEOUT_S, volume_mounts={"/data": volume})
        )
        nodes = {r.sandbox_id: r.node_id for r in await client.list_sandboxes()}
        first = made[0]
        for other in made[1:]:
            if nodes[other.sandbox_id] != nodes[first.sandbox_id]:
                return first, other
        await asyncio.sleep(0)
    raise AssertionError(f"every sandbox on one node: {nodes}")
