"""Scheduler placements per second through the real gRPC scheduler on a real etcd, beside the
floor: raw etcd transactions per second (aetcd, compare-version + put) in the same run.

The scheduler runs as its own process (`python -m aenv_scheduler`), exactly as deployed; this
process registers fake node records with room for every placement, then drives `Schedule` from
CONCURRENCY concurrent callers. A placement reads nodes and templates from the scheduler's
watched caches and reserves in memory: it costs no etcd round trip, so the etcd floor says what a
design writing one transaction per placement could reach at best.

Run: PYTHONPATH=common:gen/python/src:services/scheduler python bench/scheduler_placements.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import grpc
from _stats import emit, summary_ms
from grpc_health.v1 import health_pb2, health_pb2_grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.cluster import ClusterStore
from aenv_common.testing.etcd import EtcdServer
from aenv_common.testing.ports import free_port

ROUNDS = 3
PER_ROUND = 3000
CONCURRENCY = 64
NODES = 10
PREFIX = "/aenv-bench/v1"


async def run_round(
    count: int, one: Callable[[int], Awaitable[None]], latencies: list[float]
) -> float:
    """Runs `one(i)` for i < count on CONCURRENCY workers; returns operations per second."""
    next_index = iter(range(count))

    async def worker() -> None:
        for i in next_index:
            started = time.perf_counter()
            await one(i)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return count / (time.perf_counter() - started)


async def etcd_txn_floor(store: ClusterStore, latencies: list[float]) -> list[float]:
    client = store.client
    txn = client.transactions
    rates = []
    for r in range(ROUNDS):

        async def one(i: int, r: int = r) -> None:
            key = f"{PREFIX}/floor/{r}/{i}".encode()
            await client.transaction(
                compare=[txn.version(key) == 0], success=[txn.put(key, b"x" * 64)], failure=[]
            )

        rates.append(await run_round(PER_ROUND, one, latencies))
    return rates


async def register_nodes(store: ClusterStore) -> None:
    await store.put_template(cluster_pb2.TemplateRecord(template_id="base"))
    for n in range(NODES):
        await store.put_node(
            cluster_pb2.NodeRecord(
                node_id=f"node{n}",
                nodeagent_address=f"127.0.0.1:{60000 + n}",
                # Room for every placement of the run: we measure placing, not queueing.
                capacity=cluster_pb2.Resources(vcpus=1_000_000, memory_mib=1_000_000_000),
                cached_templates=["base"] if n % 2 else [],
            )
        )


def start_scheduler(endpoint: str, port: int) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        AENV_ETCD_ENDPOINTS=endpoint,
        AENV_ETCD_PREFIX=PREFIX,
        AENV_LOG_LEVEL="WARNING",
        AENV_SCHEDULER_LISTEN=f"127.0.0.1:{port}",
    )
    return subprocess.Popen([sys.executable, "-m", "aenv_scheduler"], env=env)


async def wait_serving(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service="aenv.scheduler.v1.SchedulerService")
    async with asyncio.timeout(30):
        while True:
            try:
                reply = await health.Check(request, timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)


async def placements(port: int, latencies: list[float]) -> list[float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await wait_serving(channel)
        stub = scheduler_pb2_grpc.SchedulerServiceStub(channel)  # type: ignore[no-untyped-call]
        rates = []
        for r in range(ROUNDS):

            async def one(i: int, r: int = r) -> None:
                spec = cluster_pb2.SandboxSpec(sandbox_id=f"r{r}s{i}", template_id="base")
                reply = await stub.Schedule(scheduler_pb2.ScheduleRequest(spec=spec), timeout=30)
                assert reply.placement.node_id

            rates.append(await run_round(PER_ROUND, one, latencies))
        return rates


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process we started, from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main() -> None:
    with EtcdServer() as etcd:
        store = await ClusterStore.connect(etcd.settings(PREFIX))
        try:
            floor_latencies: list[float] = []
            floor = await etcd_txn_floor(store, floor_latencies)
            await register_nodes(store)
            port = free_port()
            scheduler = start_scheduler(etcd.endpoint, port)
            try:
                place_latencies: list[float] = []
                cpu_before, wall_before = cpu_seconds(scheduler.pid), time.perf_counter()
                placed = await placements(port, place_latencies)
                scheduler_cpu = (cpu_seconds(scheduler.pid) - cpu_before) / (
                    time.perf_counter() - wall_before
                )
            finally:
                scheduler.terminate()
                scheduler.wait(timeout=15)
        finally:
            await store.close()
    emit(
        "scheduler_placements",
        {
            "rounds": ROUNDS,
            "per_round": PER_ROUND,
            "concurrency": CONCURRENCY,
            "nodes": NODES,
            "placements_per_s": round(statistics.median(placed), 1),
            "placements_per_s_rounds": [round(x, 1) for x in placed],
            "placement_latency": summary_ms(place_latencies),
            # Cores the scheduler process used while placing (1.0 = one core saturated).
            "scheduler_cpu_cores": round(scheduler_cpu, 2),
            "floor_etcd_txn_per_s": round(statistics.median(floor), 1),
            "floor_etcd_txn_per_s_rounds": [round(x, 1) for x in floor],
            "floor_etcd_txn_latency": summary_ms(floor_latencies),
            "target_placements_per_s": 1000,
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
