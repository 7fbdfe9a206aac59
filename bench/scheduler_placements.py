"""Scheduler placements per second through the real gRPC scheduler on a real etcd, beside the
floor: raw etcd transactions per second from the same client in the same run, of the shape a
placement writes (compare the leader key's value, put a reservation).

The scheduler runs as its own process (`python -m aenv_scheduler`), exactly as deployed; this
process registers fake node records with room for every placement (they measure nothing, so the
nominal rule places), waits until the scheduler leads, then drives `Schedule` from CONCURRENCY
concurrent callers. After each round it counts the reservations the placements wrote to etcd
(`<prefix>/scheduler/reservations/`; the nodes never account for them, so none ends within the
run): `reservations_written` equal to the placements says every placement really wrote its
reservation, 0 says this scheduler reserves in memory only.

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
from aenv_testing.etcd import EtcdServer
from aenv_testing.ports import free_port

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
    """A placement's write without the placement: a transaction guarded by a leader key's
    value putting a reservation-sized record."""
    client = store.client
    txn = client.transactions
    leader = f"{PREFIX}/floor/leader".encode()
    await client.put(leader, b"bench-floor")
    rates = []
    for r in range(ROUNDS):

        async def one(i: int, r: int = r) -> None:
            key = f"{PREFIX}/floor/{r}/{i}".encode()
            held, _ = await client.transaction(
                compare=[txn.value(leader) == b"bench-floor"],
                success=[txn.put(key, b"x" * 64)],
                failure=[],
            )
            assert held

        rates.append(await run_round(PER_ROUND, one, latencies))
    return rates


async def reservations_in_etcd(store: ClusterStore) -> int:
    prefix = store.keys.prefix.encode() + b"/scheduler/reservations/"
    return len(await store.client.get_prefix(prefix, keys_only=True))


async def until_leading(store: ClusterStore) -> None:
    """Only the leader places: wait for the scheduler to hold the leader key."""
    for _ in range(300):
        if await store.client.get(store.keys.scheduler_leader) is not None:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the scheduler did not take the leader key within 30 s")


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


async def placements(
    port: int, store: ClusterStore, latencies: list[float], written: list[int]
) -> list[float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await wait_serving(channel)
        await until_leading(store)
        stub = scheduler_pb2_grpc.SchedulerServiceStub(channel)  # type: ignore[no-untyped-call]
        rates = []
        for r in range(ROUNDS):

            async def one(i: int, r: int = r) -> None:
                spec = cluster_pb2.SandboxSpec(sandbox_id=f"r{r}s{i}", template_id="base")
                reply = await stub.Schedule(scheduler_pb2.ScheduleRequest(spec=spec), timeout=30)
                assert reply.placement.node_id

            rates.append(await run_round(PER_ROUND, one, latencies))
            written.append(await reservations_in_etcd(store))
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
                written: list[int] = []
                cpu_before, wall_before = cpu_seconds(scheduler.pid), time.perf_counter()
                placed = await placements(port, store, place_latencies, written)
                scheduler_cpu = (cpu_seconds(scheduler.pid) - cpu_before) / (
                    time.perf_counter() - wall_before
                )
            finally:
                scheduler.terminate()
                scheduler.wait(timeout=15)
        finally:
            await store.close()
    every_one_written = [PER_ROUND * (r + 1) for r in range(ROUNDS)]
    ratio = statistics.median(placed) / statistics.median(floor)
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
            # Reservations in etcd after each round (cumulative): PER_ROUND more each round when
            # every placement wrote its own.
            "reservations_written": written,
            "placements_write_reservations": written == every_one_written,
            "floor_etcd_txn_per_s": round(statistics.median(floor), 1),
            "floor_etcd_txn_per_s_rounds": [round(x, 1) for x in floor],
            "floor_etcd_txn_latency": summary_ms(floor_latencies),
            "ratio_placements_to_floor": round(ratio, 3),
            "target_placements_per_s": 1000,
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
