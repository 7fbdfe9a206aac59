"""Two scheduler replicas on one etcd: only the leader places, a standby answers UNAVAILABLE;
the leader's reservations live in etcd, so a successor counts them and does not over-place the
node they are on; a deposed leader cannot place; refusals of the queue carry when to retry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.retry_info import retry_after_from
from aenv_scheduler.config import SchedulerSettings
from aenv_scheduler.ledger import NotLeader, ReservationLedger
from aenv_scheduler.reservations import Reservation
from aenv_scheduler.server import SchedulerServer

from .test_scheduler_etcd import NodeFactory, R, core, make_node, request, store, until

pytestmark = pytest.mark.etcd

__all__ = ["make_node", "store"]  # fixtures used by name


def settings(common: CommonSettings, name: str, **extra: object) -> SchedulerSettings:
    return SchedulerSettings(
        common=common,
        listen="127.0.0.1:0",
        instance_id=name,
        queue_wait_seconds=0.5,
        leader_ttl_seconds=2,
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture
async def replicas(etcd_settings: CommonSettings) -> AsyncIterator[list[SchedulerServer]]:
    apps = [SchedulerServer(settings(etcd_settings, name)) for name in ("sched-a", "sched-b")]
    try:
        for app in apps:
            await app.start()
        await until(lambda: sum(core(app).leading for app in apps) == 1)
        yield apps
    finally:
        for app in apps:
            await app.stop()


async def schedule(app: SchedulerServer, sandbox_id: str) -> scheduler_pb2.Placement:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        stub = scheduler_pb2_grpc.SchedulerServiceStub(channel)  # type: ignore[no-untyped-call]
        response: scheduler_pb2.ScheduleResponse = await stub.Schedule(
            request("base", sandbox_id), timeout=5
        )
    return response.placement


async def test_only_the_leader_places_and_a_successor_adopts_its_reservations(
    replicas: list[SchedulerServer], store: ClusterStore, make_node: NodeFactory
) -> None:
    await make_node("n1", 3, ["base"])  # room for 3; the node never accounts for them
    await until(lambda: all(core(app).live_nodes() for app in replicas))
    leader, standby = sorted(replicas, key=lambda app: not core(app).leading)

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await schedule(standby, "s0")
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert (await schedule(leader, "s1")).node_id == "n1"
    assert (await schedule(leader, "s2")).node_id == "n1"
    stored = await store.client.get_prefix(store.keys.prefix.encode() + b"/scheduler/reservations/")
    assert sorted(kv.key.rsplit(b"/", 1)[1] for kv in stored) == [b"s1", b"s2"]

    await leader.stop()  # steps down: the standby campaigns at once
    await until(lambda: core(standby).leading)
    assert len(core(standby).reservations) == 2
    assert (await schedule(standby, "s3")).node_id == "n1"
    with pytest.raises(grpc.aio.AioRpcError) as full:
        await schedule(standby, "s4")  # 2 adopted + 1: the node is full, not over-placed
    assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert retry_after_from(full.value.trailing_metadata()) == 5.0


async def test_a_deposed_leader_cannot_write_a_placement(
    replicas: list[SchedulerServer], store: ClusterStore
) -> None:
    ledger = ReservationLedger(store, "not-the-leader")
    with pytest.raises(NotLeader):
        await ledger.record(Reservation("s1", "n1", R(vcpus=1), 0.0), 60)
    assert not await store.client.get_prefix(
        store.keys.prefix.encode() + b"/scheduler/reservations/"
    )


async def test_placements_together_are_written_together_a_repeated_one_once(
    replicas: list[SchedulerServer], store: ClusterStore, make_node: NodeFactory
) -> None:
    await make_node("n1", 40, ["base"])
    await until(lambda: all(core(app).live_nodes() for app in replicas))
    [leader] = [app for app in replicas if core(app).leading]
    ids = [f"s{i}" for i in range(30)] + ["s0", "s1"]  # two sent again at once
    placed = await asyncio.gather(*(schedule(leader, sandbox_id) for sandbox_id in ids))
    assert {p.node_id for p in placed} == {"n1"}
    stored = await store.client.get_prefix(store.keys.prefix.encode() + b"/scheduler/reservations/")
    assert len(stored) == 30 and len(core(leader).reservations) == 30
