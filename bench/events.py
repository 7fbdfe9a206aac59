"""Event delivery latency, and what recording events costs a create — beside their floors.

- floor: raw etcd, no services: a put of a 500-key burst, each key's latency from its put to a
  prefix watcher seeing it.
- pipeline: 500 sandboxes' state changes recorded by `EventLog` (the code every node agent and
  the scheduler record with) into the platform's etcd, 4 changes each (2,000 events) at a steady
  rate, followed by a trainer through the gateway's gRPC `WatchSandboxEvents`: each event's
  latency from the change's time (stamped when it is recorded) to the subscriber.
- guests: real sandboxes created, paused, resumed and killed through the gateway while the same
  subscriber follows them: each event's latency from its node's stamp to the subscriber.
- create overhead: create → envd ready (REST create + envd /health, as bench/create_latency.py)
  on a platform whose node agent records events, and on one with events switched off
  (AENV_NODEAGENT_EVENTS_ENABLED=false), in the same run.

Environment: BENCH_SANDBOXES (500), BENCH_CHANGES (4), BENCH_RATE (events/s, 500),
BENCH_GUESTS (8), BENCH_ROUNDS (creates per arm, 15).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import aetcd
import grpc
import httpx
from _platform import running_platform
from _stats import emit, summary_ms

from aenv.cluster.v1 import cluster_pb2 as c
from aenv.gateway.v1 import gateway_pb2 as g
from aenv.gateway.v1 import gateway_pb2_grpc as gg
from aenv_cli.platform import Platform
from aenv_common.cluster import ClusterStore, EtcdKeys
from aenv_common.events import EventLog
from aenv_testing.subnets import free_subnet

SANDBOXES = int(os.environ.get("BENCH_SANDBOXES", "500"))
CHANGES = int(os.environ.get("BENCH_CHANGES", "4"))
RATE = float(os.environ.get("BENCH_RATE", "500"))
GUESTS = int(os.environ.get("BENCH_GUESTS", "8"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "15"))
CYCLE = (c.SANDBOX_EVENT_TYPE_CREATED, c.SANDBOX_EVENT_TYPE_READY, c.SANDBOX_EVENT_TYPE_PAUSED,
         c.SANDBOX_EVENT_TYPE_RESUMED, c.SANDBOX_EVENT_TYPE_KILLED)


def p99(samples_s: list[float]) -> dict[str, float]:
    stats: dict[str, float] = summary_ms(samples_s)
    if len(samples_s) > 1:
        stats["p99_ms"] = round(statistics.quantiles(
            [x * 1000 for x in samples_s], n=100, method="inclusive")[98], 2)
    return stats


def etcd_client(plat: Platform) -> aetcd.Client:
    host, port = plat.etcd_endpoints.split(",")[0].rsplit(":", 1)
    return aetcd.Client(host, int(port))


async def etcd_floor(plat: Platform) -> dict[str, float]:
    """Put → watch latency of raw etcd, for SANDBOXES keys."""
    prefix = b"/bench-floor/"
    sent: dict[bytes, float] = {}
    seen: list[float] = []
    done = asyncio.Event()
    async with etcd_client(plat) as client:
        watch = await client.watch_prefix(prefix)

        async def follow() -> None:
            async for event in watch:
                seen.append(time.perf_counter() - sent[event.kv.key])
                if len(seen) == SANDBOXES:
                    done.set()
                    return

        task = asyncio.create_task(follow())
        for i in range(SANDBOXES):
            key = prefix + f"s{i:04d}".encode()
            sent[key] = time.perf_counter()
            await client.put(key, b"x")
            await asyncio.sleep(1 / RATE)
        await asyncio.wait_for(done.wait(), 60)
        task.cancel()
        await client.delete_prefix(prefix)
    return p99(seen)


async def subscriber(plat: Platform, expected: int, received: list[float],
                     types: dict[str, list[int]]) -> None:
    """Follows every event through the gateway; records each one's latency from its stamp."""
    metadata = (("x-api-key", plat.api_key),)
    async with grpc.aio.insecure_channel(plat.grpc_address) as channel:
        stub = gg.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        async for reply in stub.WatchSandboxEvents(g.WatchSandboxEventsRequest(),
                                                   metadata=metadata):
            event = reply.event
            received.append(time.time() - event.time.ToNanoseconds() / 1e9)
            types.setdefault(event.sandbox_id, []).append(event.type)
            if len(received) >= expected:
                return


async def pipeline(plat: Platform) -> dict[str, object]:
    """SANDBOXES * CHANGES events recorded at RATE, followed through the gateway."""
    received: list[float] = []
    types: dict[str, list[int]] = {}
    total = SANDBOXES * CHANGES
    follow = asyncio.create_task(subscriber(plat, total, received, types))
    await asyncio.sleep(1.0)  # the subscription is open
    async with etcd_client(plat) as client:
        log = EventLog(ClusterStore(client, EtcdKeys()))
        started = time.perf_counter()
        for step in range(CHANGES):
            for i in range(SANDBOXES):
                await log.record(c.SandboxEvent(sandbox_id=f"bench-{i:04d}",
                                                type=CYCLE[step % len(CYCLE)], node_id="bench"))
                await asyncio.sleep(1 / RATE)
        recorded_s = time.perf_counter() - started
        await asyncio.wait_for(follow, 120)
    complete = sum(len(v) == CHANGES for k, v in types.items() if k.startswith("bench-"))
    return {"events": total, "recorded_per_s": round(total / recorded_s, 1),
            "sandboxes_complete": complete, "latency": p99(received)}


async def guests(plat: Platform) -> dict[str, object]:
    """GUESTS real sandboxes through create, pause, resume, kill, followed by the subscriber."""
    received: list[float] = []
    types: dict[str, list[int]] = {}
    # created, ready, paused, resumed, ready?, killed: at least five each.
    follow = asyncio.create_task(subscriber(plat, GUESTS * 5, received, types))
    await asyncio.sleep(1.0)
    headers = {"X-API-Key": plat.api_key}
    async with httpx.AsyncClient(base_url=plat.api_url, headers=headers, timeout=300) as http:

        async def one() -> None:
            resp = await http.post("/v2/sandboxes", json={"templateID": "base"})
            resp.raise_for_status()
            sid = resp.json()["sandboxID"]
            (await http.post(f"/sandboxes/{sid}/pause")).raise_for_status()
            (await http.post(f"/sandboxes/{sid}/resume", json={})).raise_for_status()
            (await http.delete(f"/sandboxes/{sid}")).raise_for_status()

        await asyncio.gather(*(one() for _ in range(GUESTS)))
    await asyncio.wait_for(follow, 60)
    return {"sandboxes": GUESTS, "events": len(received), "latency": p99(received)}


async def creates(plat: Platform) -> dict[str, float]:
    """Create → envd /health through the data plane, ROUNDS times, one at a time."""
    totals: list[float] = []
    headers = {"X-API-Key": plat.api_key}
    async with httpx.AsyncClient(headers=headers, timeout=120) as http:
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            resp = await http.post(f"{plat.api_url}/v2/sandboxes", json={"templateID": "base"})
            resp.raise_for_status()
            sid = resp.json()["sandboxID"]
            route = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983"}
            await until_healthy(http, plat, route)
            totals.append(time.perf_counter() - t0)
            await http.delete(f"{plat.api_url}/sandboxes/{sid}")
    stats: dict[str, float] = summary_ms(totals)
    return stats


async def until_healthy(http: httpx.AsyncClient, plat: Platform, route: dict[str, str]) -> None:
    for _ in range(5000):
        if (await http.get(f"{plat.sandbox_url}/health", headers=route)).status_code < 300:
            return
        await asyncio.sleep(0.002)
    raise TimeoutError(f"envd of {route['E2b-Sandbox-Id']} never answered")


async def main() -> None:
    result: dict[str, object] = {"sandboxes": SANDBOXES, "changes_each": CHANGES,
                                 "rate_per_s": RATE}
    async with running_platform("aebev", free_subnet(20)) as plat:
        result["floor_etcd_put_to_watch"] = await etcd_floor(plat)
        result["pipeline_through_gateway"] = await pipeline(plat)
        result["guests_through_gateway"] = await guests(plat)
        result["create_events_on"] = await creates(plat)
    async with running_platform("aebeo", free_subnet(20),
                                env={"AENV_NODEAGENT_EVENTS_ENABLED": "false"}) as plat:
        result["create_events_off"] = await creates(plat)
    on = result["create_events_on"]["p50_ms"]  # type: ignore[index]
    off = result["create_events_off"]["p50_ms"]  # type: ignore[index]
    result["create_p50_ratio_on_to_off"] = round(on / off, 3)
    pipe = result["pipeline_through_gateway"]["latency"]["p50_ms"]  # type: ignore[index]
    floor = result["floor_etcd_put_to_watch"]["p50_ms"]  # type: ignore[index]
    result["pipeline_p50_ratio_to_floor"] = round(pipe / floor, 2)
    emit("events", result)


if __name__ == "__main__":
    asyncio.run(main())
