"""Sandboxes per host at a given memory budget, measured, beside the nominal count.

A single-node platform whose node agent has BUDGET_MIB of memory budget
(AENV_NODEAGENT_MEMORY_BUDGET_MIB) takes idle `base` sandboxes, created one after another through
the native client, until the node says full (the create is refused: 429). Its record then says
what its VMs really use (PSS, summed) — read again after IDLE_S of idling. The nominal count is
what the old rule allowed: the budget over the guest's RAM. Each round ends with every sandbox
killed and the node empty again.

Run: .venv/bin/python bench/density.py  (BUDGET_MIB=1024 ROUNDS=2 IDLE_S=10 by default: every
sandbox is a TCG guest on this 2-core host, and a loaded host slows them all)
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import sys
import time

from _platform import running_platform
from _stats import emit, summary_ms

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_common.capacity import refusal
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.errors import ResourceExhausted
from aenv_testing.subnets import free_subnet

BUDGET_MIB = int(os.environ.get("BUDGET_MIB", "1024"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))
IDLE_S = float(os.environ.get("IDLE_S", "10"))
NODE = "density-node"
MOST = 200  # a bound on one fill, far past any budget here


async def node_record(store: ClusterStore) -> cluster_pb2.NodeRecord:
    record = await store.get_node(NODE)
    assert record is not None, "the node is not registered"
    return record


async def fill(
    client: GatewayClient, store: ClusterStore, create_s: list[float]
) -> dict[str, object]:
    """Creates until refused; kills them all. What the node said when full and after idling."""
    made: list[str] = []
    try:
        while len(made) < MOST:
            started = time.perf_counter()
            try:
                made.append((await client.create_sandbox("base")).sandbox_id)
            except ResourceExhausted:
                break
            create_s.append(time.perf_counter() - started)
            print(
                f"{len(made)} sandboxes, {(await node_record(store)).memory_used_mib} MiB used",
                file=sys.stderr,
                flush=True,
            )
        full = await node_record(store)
        await asyncio.sleep(IDLE_S)
        idle = await node_record(store)
    finally:
        await asyncio.gather(*(client.kill_sandbox(sandbox_id) for sandbox_id in made))
    count = len(made)
    guest_mib = full.allocated.memory_mib // count if count else 0
    guest = cluster_pb2.Resources(
        vcpus=full.allocated.vcpus // max(count, 1),
        memory_mib=guest_mib,
        disk_mib=full.allocated.disk_mib // max(count, 1),
    )
    return {
        "count": count,
        "guest_mib": guest_mib,
        "nominal_count": BUDGET_MIB // guest_mib if guest_mib else 0,
        "used_mib_when_full": full.memory_used_mib,
        "used_mib_after_idle": idle.memory_used_mib,
        "pss_mib_per_sandbox_when_full": round(full.memory_used_mib / count, 1) if count else 0,
        "pss_mib_per_sandbox_after_idle": round(idle.memory_used_mib / count, 1) if count else 0,
        "host_available_mib_when_full": full.host_memory_available_mib,
        "pressure": full.pressure,
        # Which bound the next sandbox met, by the rule the scheduler and node apply.
        "full_because": refusal(full, cluster_pb2.Resources(), guest),
    }


async def until_empty(store: ClusterStore) -> None:
    for _ in range(300):
        if (await node_record(store)).sandbox_count == 0:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError("the node still holds sandboxes 60 s after they were killed")


async def run(platform: Platform) -> dict[str, object]:
    store = await ClusterStore.connect(CommonSettings(etcd_endpoints=platform.etcd_endpoints))
    create_s: list[float] = []
    rounds = []
    try:
        async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
            for _ in range(ROUNDS):
                rounds.append(await fill(client, store, create_s))
                await until_empty(store)
    finally:
        await store.close()

    def median(field: str) -> float:
        return float(statistics.median(float(str(r[field])) for r in rounds))

    counts = median("count")
    nominal = median("nominal_count")
    return {
        "budget_mib": BUDGET_MIB,
        "rounds": ROUNDS,
        "idle_s": IDLE_S,
        "sandboxes_measured": counts,
        "sandboxes_nominal": nominal,
        "ratio_measured_to_nominal": round(counts / nominal, 2) if nominal else None,
        "pss_mib_per_sandbox_when_full": median("pss_mib_per_sandbox_when_full"),
        "pss_mib_per_sandbox_after_idle": median("pss_mib_per_sandbox_after_idle"),
        "create_latency": summary_ms(create_s),
        "per_round": rounds,
    }


async def main() -> None:
    os.environ.update(
        AENV_NODEAGENT_NODE_ID=NODE,
        AENV_NODEAGENT_MEMORY_BUDGET_MIB=str(BUDGET_MIB),
        AENV_NODEAGENT_PREWARM_CODE_INTERPRETER="false",
        # A create that cannot fit is answered soon (429) instead of after 30 s in the queue.
        AENV_SCHEDULER_QUEUE_WAIT_SECONDS="3",
        # Guests answer slowly on a loaded TCG host: a slow one is not a failed create.
        AENV_NODEAGENT_RESTORE_READY_TIMEOUT_S="180",
    )
    prefix = "abd" + secrets.token_hex(2) + "x"
    async with running_platform(prefix, free_subnet(22)) as platform:
        emit("density", await run(platform))


if __name__ == "__main__":
    asyncio.run(main())
