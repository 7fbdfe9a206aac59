"""A real scheduler gRPC server on a real etcd, with node agents represented by registered
NodeRecords (the scheduler only ever sees nodes through etcd)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.cluster import SNAPSHOTS, ClusterStore, NodeRegistration
from aenv_common.config import CommonSettings
from aenv_scheduler.config import SchedulerSettings
from aenv_scheduler.scheduler import Scheduler
from aenv_scheduler.server import SchedulerServer
from aenv_testing.metrics import moved, scrape, value

pytestmark = pytest.mark.etcd

R = cluster_pb2.Resources


class FakeNode:
    """A node agent's cluster presence: its lease-bound record, with capacity we control."""

    def __init__(self, store: ClusterStore, node_id: str, vcpus: int, templates: list[str]) -> None:
        self.record = cluster_pb2.NodeRecord(
            node_id=node_id,
            nodeagent_address=f"{node_id}.agent:50052",
            proxy_address=f"{node_id}.proxy:50080",
            capacity=R(vcpus=vcpus, memory_mib=vcpus * 1024),
            cached_templates=templates,
        )
        self.registration = NodeRegistration(store, lambda: self.record, ttl=2)

    async def set(self, *, vcpus: int | None = None, allocated: int | None = None) -> None:
        if vcpus is not None:
            self.record.capacity.CopyFrom(R(vcpus=vcpus, memory_mib=vcpus * 1024))
        if allocated is not None:
            self.record.allocated.CopyFrom(R(vcpus=allocated, memory_mib=allocated * 512))
            self.record.sandbox_count = allocated
        await self.registration.publish()


@pytest.fixture
async def store(etcd_settings: CommonSettings) -> AsyncIterator[ClusterStore]:
    store = await ClusterStore.connect(etcd_settings)
    try:
        await store.put_template(
            cluster_pb2.TemplateRecord(
                template_id="base", aliases=["py"], default_resources=R(vcpus=1, memory_mib=512)
            )
        )
        await store.put_template(cluster_pb2.TemplateRecord(template_id="other"))
        yield store
    finally:
        await store.close()


NodeFactory = Callable[[str, int, list[str]], Awaitable[FakeNode]]


@pytest.fixture
async def make_node(store: ClusterStore) -> AsyncIterator[NodeFactory]:
    nodes: list[FakeNode] = []

    async def make(node_id: str, vcpus: int, templates: list[str]) -> FakeNode:
        fake = FakeNode(store, node_id, vcpus, templates)
        await fake.registration.start()
        nodes.append(fake)
        return fake

    try:
        yield make
    finally:
        for fake in nodes:
            await fake.registration.stop()


@pytest.fixture
async def app(etcd_settings: CommonSettings) -> AsyncIterator[SchedulerServer]:
    settings = SchedulerSettings(
        common=etcd_settings,
        listen="127.0.0.1:0",
        metrics_listen="127.0.0.1:0",
        queue_wait_seconds=3.0,
        sweep_interval_seconds=0.2,
        leader_ttl_seconds=2,
    )
    app = SchedulerServer(settings)
    await app.start()
    try:
        await until(lambda: core(app).leading)  # a lone replica leads at once; only leaders place
        yield app
    finally:
        await app.stop()


@pytest.fixture
async def stub(app: SchedulerServer) -> AsyncIterator[scheduler_pb2_grpc.SchedulerServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        yield scheduler_pb2_grpc.SchedulerServiceStub(channel)  # type: ignore[no-untyped-call]


def request(
    template_id: str, sandbox_id: str = "", vcpus: int = 0
) -> scheduler_pb2.ScheduleRequest:
    return scheduler_pb2.ScheduleRequest(
        spec=cluster_pb2.SandboxSpec(
            sandbox_id=sandbox_id, template_id=template_id, resources=R(vcpus=vcpus)
        )
    )


def core(app: SchedulerServer) -> Scheduler:
    assert app.scheduler is not None
    return app.scheduler


async def until(condition: Callable[[], bool], within: float = 10) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (polls state that other tasks change)
            await asyncio.sleep(0.02)


async def test_places_by_template_cache_then_load(
    app: SchedulerServer, stub: scheduler_pb2_grpc.SchedulerServiceStub, make_node: NodeFactory
) -> None:
    cached = await make_node("cached", 8, ["base"])
    await cached.set(allocated=6)
    await make_node("idle", 8, [])
    await until(lambda: len(core(app).live_nodes()) == 2)

    placed = (await stub.Schedule(request("base", "s1"), timeout=5)).placement
    assert placed == scheduler_pb2.Placement(
        node_id="cached", nodeagent_address="cached.agent:50052", proxy_address="cached.proxy:50080"
    )
    assert (await stub.Schedule(request("py", "s2"), timeout=5)).placement.node_id == "cached"
    assert (await stub.Schedule(request("other", "s3"), timeout=5)).placement.node_id == "idle"
    # The cached node is full now (6 allocated + 2 reserved): the template no longer helps.
    assert (await stub.Schedule(request("base", "s4"), timeout=5)).placement.node_id == "idle"


async def test_unknown_template_is_not_found(
    stub: scheduler_pb2_grpc.SchedulerServiceStub, make_node: NodeFactory
) -> None:
    await make_node("n1", 8, ["base"])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Schedule(request("nope"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == "template 'nope' not found"


async def test_request_larger_than_any_node_fails_at_once(
    app: SchedulerServer, stub: scheduler_pb2_grpc.SchedulerServiceStub, make_node: NodeFactory
) -> None:
    await make_node("n1", 4, ["base"])
    await until(lambda: bool(core(app).live_nodes()))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Schedule(request("base", vcpus=16), timeout=5)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "can ever hold" in (caught.value.details() or "")


async def test_burst_queues_until_capacity_is_released(
    app: SchedulerServer, stub: scheduler_pb2_grpc.SchedulerServiceStub, make_node: NodeFactory
) -> None:
    """200 at once on room for 50: 50 placed at once, 100 more when capacity is released,
    the last 50 cleanly RESOURCE_EXHAUSTED after the queue wait. None dropped."""
    a = await make_node("a", 25, ["base"])
    b = await make_node("b", 25, [])
    await until(lambda: len(core(app).live_nodes()) == 2)

    async def schedule(i: int) -> str:
        try:
            response = await stub.Schedule(request("base", f"s{i}"), timeout=30)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err
            return "exhausted"
        node_id: str = response.placement.node_id
        return node_id

    burst = [asyncio.create_task(schedule(i)) for i in range(200)]
    await until(lambda: len(core(app).queue) == 150)
    assert core(app).placed == 50
    await asyncio.sleep(0.3)
    await a.set(vcpus=75)
    await b.set(vcpus=75)
    outcomes = Counter(await asyncio.gather(*burst))
    assert outcomes == {"a": 75, "b": 75, "exhausted": 50}
    assert len(core(app).queue) == 0


async def test_reservations_settle_when_the_node_reports_its_sandboxes(
    app: SchedulerServer,
    store: ClusterStore,
    stub: scheduler_pb2_grpc.SchedulerServiceStub,
    make_node: NodeFactory,
) -> None:
    """The node-agent side of a placement: write the sandbox record, then the node record with
    the new allocation. The scheduler then stops counting the reservation twice."""
    node = await make_node("n1", 4, ["base"])
    await until(lambda: bool(core(app).live_nodes()))
    for i in range(4):
        placement = (await stub.Schedule(request("base", f"s{i}"), timeout=5)).placement
        await store.put_sandbox(
            cluster_pb2.SandboxRecord(
                sandbox_id=f"s{i}", node_id=placement.node_id, template_id="base"
            )
        )
    await node.set(allocated=4)
    await until(lambda: len(core(app).reservations) == 0)
    # Two sandboxes end: the node reports the freed capacity, queued requests get it.
    waiting = [
        asyncio.ensure_future(stub.Schedule(request("base", f"t{i}"), timeout=10)) for i in range(2)
    ]
    await until(lambda: len(core(app).queue) == 2)
    await node.set(allocated=2)
    assert [r.placement.node_id for r in await asyncio.gather(*waiting)] == ["n1", "n1"]


async def test_leader_marks_sandboxes_of_a_dead_node_lost(
    app: SchedulerServer, store: ClusterStore, make_node: NodeFactory
) -> None:
    await until(lambda: app.election is not None and app.election.is_leader)
    alive = await make_node("alive", 4, [])
    dying = await make_node("dying", 4, [])
    for sandbox_id, owner in (("s-alive", alive), ("s-dying", dying)):
        await store.put_sandbox(
            cluster_pb2.SandboxRecord(
                sandbox_id=sandbox_id,
                node_id=owner.record.node_id,
                state=cluster_pb2.SANDBOX_STATE_RUNNING,
            )
        )
    await dying.registration.stop()  # its record goes with its lease
    for _ in range(100):
        record = await store.get_sandbox("s-dying")
        if record is not None and record.state == cluster_pb2.SANDBOX_STATE_LOST:
            break
        await asyncio.sleep(0.1)
    assert record is not None and record.state == cluster_pb2.SANDBOX_STATE_LOST
    survivor = await store.get_sandbox("s-alive")
    assert survivor is not None and survivor.state == cluster_pb2.SANDBOX_STATE_RUNNING


async def test_snapshot_places_on_its_node_or_after_its_loss_from_snapstore(
    app: SchedulerServer,
    stub: scheduler_pb2_grpc.SchedulerServiceStub,
    make_node: NodeFactory,
    store: ClusterStore,
) -> None:
    """A snapshot's files live on one node: creating from it goes there even when another node
    is idler. While that node is gone it fails as UNAVAILABLE, unless the snapshot is in
    snapstore: then any node takes it."""
    busy = await make_node("busy", 8, ["base"])
    await busy.set(allocated=4)
    await make_node("idle", 8, ["base"])
    await until(lambda: len(core(app).live_nodes()) == 2)
    snapshot = cluster_pb2.SnapshotRecord(
        snapshot_id="snap-1",
        node_id="busy",
        template_id="base",
        resources=R(vcpus=1, memory_mib=512),
    )
    await store.put_record(SNAPSHOTS, "snap-1", snapshot)
    await until(lambda: core(app).snapshot("snap-1") is not None)
    for n in range(3):
        placed = (await stub.Schedule(request("snap-1", f"s{n}"), timeout=5)).placement
        assert placed.node_id == "busy"

    await store.put_record(
        SNAPSHOTS,
        "snap-2",
        cluster_pb2.SnapshotRecord(snapshot_id="snap-2", node_id="gone", template_id="base"),
    )
    await until(lambda: core(app).snapshot("snap-2") is not None)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Schedule(request("snap-2"), timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "snap-2" in (caught.value.details() or "")

    await store.put_record(
        SNAPSHOTS,
        "snap-3",
        cluster_pb2.SnapshotRecord(
            snapshot_id="snap-3", node_id="gone", template_id="base", persisted=True
        ),
    )
    await until(lambda: core(app).snapshot("snap-3") is not None)
    placed = (await stub.Schedule(request("snap-3", "s-pulled"), timeout=5)).placement
    assert placed.node_id == "idle"  # the idler of the live nodes


async def test_metrics_show_placements_queue_leader_and_nodes(
    app: SchedulerServer, stub: scheduler_pb2_grpc.SchedulerServiceStub, make_node: NodeFactory
) -> None:
    url = f"http://127.0.0.1:{app.metrics_port}/metrics"
    before = await asyncio.to_thread(scrape, url)
    node = await make_node("a", 4, ["base"])
    node.record.memory_budget_mib, node.record.memory_used_mib = 4096, 300
    await node.registration.publish()
    pressed = await make_node("b", 4, [])
    pressed.record.pressure = "MemAvailable 200 MiB < 1024 MiB"
    await pressed.registration.publish()
    await until(lambda: len(core(app).live_nodes()) == 2)
    await until(lambda: app.election is not None and app.election.is_leader)
    for i in range(3):
        await stub.Schedule(request("base", f"m{i}"), timeout=5)
    after = await asyncio.to_thread(scrape, url)
    assert moved(before, after, "aenv_scheduler_placements_total") == 3
    assert (
        moved(
            before,
            after,
            "aenv_grpc_requests_total",
            method="/aenv.scheduler.v1.SchedulerService/Schedule",
            code="OK",
        )
        == 3
    )
    assert value(after, "aenv_scheduler_reservations") == 3
    assert value(after, "aenv_scheduler_queue_depth") == 0
    assert value(after, "aenv_scheduler_leader") == 1
    assert value(after, "aenv_scheduler_nodes") == 2
    assert value(after, "aenv_scheduler_node_capacity", node="a", resource="vcpus") == 4
    assert value(after, "aenv_scheduler_node_memory_budget_bytes", node="a") == 4096 << 20
    assert value(after, "aenv_scheduler_node_memory_used_bytes", node="a") == 300 << 20
    assert value(after, "aenv_scheduler_node_memory_pressure", node="a") == 0
    assert value(after, "aenv_scheduler_node_memory_pressure", node="b") == 1
