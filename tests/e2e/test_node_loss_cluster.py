"""A node agent SIGKILLed in the cluster (tests/e2e/cluster.py: three hosts in network
namespaces of their own, VMs confined in cgroups and jailed), real VMs: its running
sandboxes are marked lost within the lease TTL and the API says so (get: 404 "lost with its
node", unlisted); list and metrics keep working and new creates go to the other hosts;
restarted, it rejoins: it re-adopts the VMs that outlived it (running again, answering the SDK)
and takes creates again; once all are killed nothing of them is left on any host (QEMU, netns,
VM cgroup)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from e2b import AsyncSandbox
from prometheus_client.parser import text_string_to_metric_families

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.client import GatewayClient
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.errors import NotFound

from ..conftest import netns_names, qemu_pids_under, vm_cgroups
from .cluster import Cluster, Host, kill_all, running_cluster
from .conftest import until

pytestmark = [
    pytest.mark.vm,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="session"),
]

LEASE_TTL_S = 5
SWEEP_S = 1
CREATE_TIMEOUT_S = 600.0


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    node_env = {
        "AENV_NODEAGENT_MEMORY_BUDGET_MIB": "8192",
        # The machine is shared: other work's memory use must not pass for this node's pressure.
        "AENV_NODEAGENT_PRESSURE_MEMORY_AVAILABLE_MIN_MIB": "256",
        "AENV_NODEAGENT_PRESSURE_PSI_SOME_AVG10_MAX": "100",
        # No warm pool: every QEMU and netns left on a host afterwards is a leak.
        "AENV_NODEAGENT_WARM_POOL_VMS": "0",
        "AENV_NODEAGENT_WARM_POOL_GUESTS": "0",
        "AENV_NODEAGENT_WARM_POOL_SLOTS": "0",
        "AENV_NODEAGENT_WARM_POOL_OVERLAYS": "0",
        "AENV_NODEAGENT_RESTORE_READY_TIMEOUT_S": "300",
        "AENV_NODEAGENT_HEARTBEAT_TTL_S": str(LEASE_TTL_S),
        # Confined and jailed, or the node agent does not start.
        "AENV_NODEAGENT_VMM_CGROUPS": "required",
        "AENV_NODEAGENT_VMM_JAIL": "required",
    }
    scheduler_env = {"AENV_SCHEDULER_SWEEP_INTERVAL_SECONDS": str(SWEEP_S)}
    home = tmp_path_factory.mktemp("node-loss")
    async with running_cluster(home, node_env=node_env, scheduler_env=scheduler_env) as made:
        yield made


async def test_a_node_agent_killed_in_the_cluster_is_lost_then_rejoins(cluster: Cluster) -> None:
    store = await ClusterStore.connect(CommonSettings(etcd_endpoints=cluster.etcd_endpoints))
    try:
        async with (
            GatewayClient(
                cluster.grpc_target, cluster.api_key, timeout_s=CREATE_TIMEOUT_S
            ) as client,
            httpx.AsyncClient(
                base_url=cluster.api_url, headers={"X-API-Key": cluster.api_key}, timeout=120
            ) as http,
        ):
            try:
                await _lost_then_rejoined(cluster, store, client, http)
            finally:
                await kill_all(client)
    finally:
        await store.close()
    for host in cluster.hosts:
        await until(_left_nothing(host), 60, f"nothing left of {host.node_id}'s sandboxes")


async def _lost_then_rejoined(
    cluster: Cluster, store: ClusterStore, client: GatewayClient, http: httpx.AsyncClient
) -> None:
    made = await asyncio.gather(*(client.create_sandbox("base") for _ in range(3)))
    assert Counter(r.node_id for r in made) == {h.node_id: 1 for h in cluster.hosts}
    await _confined(cluster, store)
    victim_host = cluster.hosts[0]
    [victim] = [r.sandbox_id for r in made if r.node_id == victim_host.node_id]
    others = sorted(r.sandbox_id for r in made if r.sandbox_id != victim)

    assert victim_host.child is not None
    killed_at = time.monotonic()
    await victim_host.child.crash()
    await until(_marked_lost(store, victim), LEASE_TTL_S + SWEEP_S + 10, "the sandbox marked lost")
    lost_after = time.monotonic() - killed_at
    print(
        f"\nmarked lost {lost_after:.2f} s after the SIGKILL (lease TTL {LEASE_TTL_S} s, "
        f"sweep every {SWEEP_S} s)"
    )
    assert lost_after <= LEASE_TTL_S + SWEEP_S + 2

    # The API says so; list and metrics work with the node down.
    with pytest.raises(NotFound, match="lost with its node"):
        await client.get_sandbox(victim)
    answer = await http.get(f"/sandboxes/{victim}")
    assert answer.status_code == 404 and "lost with its node" in answer.json()["message"]
    assert sorted(r.sandbox_id for r in await client.list_sandboxes()) == others
    assert sorted(s["sandboxID"] for s in (await http.get("/sandboxes")).json()) == others
    assert (await http.get("/metrics")).status_code == 200
    assert await _scheduler_sees_nodes(cluster) == len(cluster.hosts) - 1

    # New creates avoid the dead node.
    placed = await asyncio.gather(*(client.create_sandbox("base") for _ in range(2)))
    assert victim_host.node_id not in {r.node_id for r in placed}

    # Back: it rejoins, the VM that outlived it is re-adopted and runs again, and it takes
    # creates again.
    await victim_host.start()

    async def running_again() -> bool:
        record = await store.get_sandbox(victim)
        return record is not None and record.state == cluster_pb2.SANDBOX_STATE_RUNNING

    # Its record is written again once the node's lease stands (the sweep may mark it lost
    # between the adoption and the registration).
    await until(running_again, 30, "the adopted sandbox running again")

    # The gateway routes to it once it also sees the node's registration, which follows the
    # adoption (a call in between answers 404: the record names a node it does not know yet).
    async def routed_again() -> bool:
        return (await http.get(f"/sandboxes/{victim}")).status_code == 200

    await until(routed_again, 30, "the gateway routing to the adopted sandbox")
    assert (await client.get_sandbox(victim)).node_id == victim_host.node_id
    with pytest.MonkeyPatch.context() as patch:  # the SDK reads its endpoints from there
        for name, value in cluster.e2b_env().items():
            patch.setenv(name, value)
        sandbox = await AsyncSandbox.connect(victim)
        ran = await sandbox.commands.run("echo -n still-$((40+2))", request_timeout=300)
        assert ran.stdout == "still-42"
    await until(_scheduler_has(cluster, len(cluster.hosts)), 30, "the node back in placement")
    again = await asyncio.gather(*(client.create_sandbox("base") for _ in range(3)))
    assert victim_host.node_id in {r.node_id for r in again}


async def _confined(cluster: Cluster, store: ClusterStore) -> None:
    """Every host confines its VMs (cgroups and the jail) and every QEMU is in a VM cgroup."""
    for host in cluster.hosts:
        node = await store.get_node(host.node_id)
        assert node is not None and "cgroup v" in node.confinement, node
        assert "jail" in node.confinement and "off" not in node.confinement, node.confinement
        pids = qemu_pids_under(host.home)
        assert pids
        for pid in pids:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
            assert any("/aenv-" in line and "/vm-" in line for line in lines), lines


def _marked_lost(store: ClusterStore, sandbox_id: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        record = await store.get_sandbox(sandbox_id)
        return record is not None and record.state == cluster_pb2.SANDBOX_STATE_LOST

    return check


async def _scheduler_sees_nodes(cluster: Cluster) -> int:
    """Live nodes as the leading scheduler counts them (its /metrics)."""
    async with httpx.AsyncClient(timeout=5) as http:
        for env in cluster.scheduler_env.values():
            url = f"http://{env['AENV_SCHEDULER_METRICS_LISTEN']}/metrics"
            samples = {
                family.name: family.samples[0].value
                for family in text_string_to_metric_families((await http.get(url)).text)
                if family.name in ("aenv_scheduler_leader", "aenv_scheduler_nodes")
            }
            if samples.get("aenv_scheduler_leader") == 1:
                return int(samples["aenv_scheduler_nodes"])
    raise AssertionError("no scheduler leads")


def _scheduler_has(cluster: Cluster, count: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await _scheduler_sees_nodes(cluster) == count

    return check


def _left_nothing(host: Host) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        state_dir = host.home / "state"
        return not (
            qemu_pids_under(state_dir) or netns_names(host.slot_prefix) or vm_cgroups(state_dir)
        )

    return check
