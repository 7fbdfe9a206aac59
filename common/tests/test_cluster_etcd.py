"""The cluster-state layer against a real etcd."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_common.cluster import (
    SANDBOXES,
    ClusterStore,
    LeaderElection,
    NodeRegistration,
    RecordCache,
    mark_lost_sandboxes,
)
from aenv_common.config import CommonSettings
from aenv_testing.etcd import EtcdServer
from aenv_testing.ports import free_port

pytestmark = pytest.mark.etcd

RUNNING = cluster_pb2.SANDBOX_STATE_RUNNING
LOST = cluster_pb2.SANDBOX_STATE_LOST


@pytest.fixture
def store(cluster_store: ClusterStore) -> ClusterStore:
    return cluster_store


def sandbox(sandbox_id: str, node_id: str = "n1") -> cluster_pb2.SandboxRecord:
    return cluster_pb2.SandboxRecord(
        sandbox_id=sandbox_id, node_id=node_id, template_id="base", state=RUNNING
    )


def node(node_id: str) -> cluster_pb2.NodeRecord:
    return cluster_pb2.NodeRecord(
        node_id=node_id,
        nodeagent_address="127.0.0.1:1",
        capacity=cluster_pb2.Resources(vcpus=8, memory_mib=8192),
    )


async def test_connect_to_unreachable_etcd_raises_unavailable() -> None:
    settings = CommonSettings(etcd_endpoints=f"127.0.0.1:{free_port()}")
    with pytest.raises(errors.Unavailable, match="unreachable"):
        await ClusterStore.connect(settings)


async def test_sandbox_crud(store: ClusterStore) -> None:
    revision = await store.put_sandbox(sandbox("s1"))
    assert revision > 0
    await store.put_sandbox(sandbox("s2", node_id="n2"))
    assert await store.get_sandbox("s1") == sandbox("s1")
    assert sorted(r.sandbox_id for r in await store.list_sandboxes()) == ["s1", "s2"]
    await store.delete_sandbox("s1")
    assert await store.get_sandbox("s1") is None
    assert [r.sandbox_id for r in await store.list_sandboxes()] == ["s2"]


async def test_node_and_template_crud(store: ClusterStore) -> None:
    await store.put_node(node("n1"))
    assert await store.get_node("n1") == node("n1")
    assert [n.node_id for n in await store.list_nodes()] == ["n1"]
    template = cluster_pb2.TemplateRecord(template_id="base", aliases=["py"])
    await store.put_template(template)
    assert await store.get_template("base") == template
    assert await store.list_templates() == [template]
    await store.delete_template("base")
    assert await store.get_template("base") is None


async def test_update_of_missing_sandbox_raises_not_found(store: ClusterStore) -> None:
    with pytest.raises(errors.NotFound):
        await store.update_sandbox("nope", lambda r: None)


async def test_concurrent_updates_lose_nothing(store: ClusterStore) -> None:
    await store.put_sandbox(sandbox("s1"))

    def increment(record: cluster_pb2.SandboxRecord) -> None:
        record.metadata["count"] = str(int(record.metadata.get("count", "0")) + 1)

    await asyncio.gather(*(store.update_sandbox("s1", increment) for _ in range(20)))
    final = await store.get_sandbox("s1")
    assert final is not None and final.metadata["count"] == "20"


async def test_guarded_puts_create_once_and_swap_at_the_revision_read(
    store: ClusterStore,
) -> None:
    # Ten writers create the same absent key at once: exactly one does, with its companion.
    won = await asyncio.gather(*(
        store.put_guarded(SANDBOXES, "claimed", 0,
                          (SANDBOXES, "claimed", sandbox("claimed", f"n{i}")),
                          (SANDBOXES, f"companion{i}", sandbox(f"companion{i}")))
        for i in range(10)))
    assert won.count(True) == 1
    winner = won.index(True)
    assert [r.sandbox_id for r in await store.list_sandboxes()] == ["claimed", f"companion{winner}"]
    seen = await store.get_versioned(SANDBOXES, "claimed", cluster_pb2.SandboxRecord)
    assert seen is not None and seen.record.node_id == f"n{winner}"
    replaced = sandbox("claimed", "new")
    assert not await store.put_guarded(SANDBOXES, "claimed", seen.mod_revision - 1,
                                       (SANDBOXES, "claimed", replaced))
    assert await store.put_guarded(SANDBOXES, "claimed", seen.mod_revision,
                                   (SANDBOXES, "claimed", replaced))
    assert not await store.delete_guarded(SANDBOXES, "claimed", seen.mod_revision)
    now = await store.get_versioned(SANDBOXES, "claimed", cluster_pb2.SandboxRecord)
    assert now is not None and now.record == replaced
    assert await store.delete_guarded(SANDBOXES, "claimed", now.mod_revision)
    assert await store.get_sandbox("claimed") is None


async def test_update_keeps_the_lease(store: ClusterStore) -> None:
    lease = await store.client.lease(30)
    try:
        await store.put_sandbox(sandbox("s1"), lease=lease.id)
        await store.update_sandbox("s1", lambda r: r.metadata.update(k="v"))
        kv = await store.client.get(store.keys.sandbox("s1"))
        assert kv is not None and kv.lease == lease.id
    finally:
        await lease.revoke()


async def test_cache_follows_puts_and_deletes(store: ClusterStore) -> None:
    await store.put_sandbox(sandbox("before"))
    cache = RecordCache(store, SANDBOXES, cluster_pb2.SandboxRecord)
    await cache.start()
    try:
        assert cache.get("before") == sandbox("before")
        await store.put_sandbox(sandbox("after", node_id="n9"))
        found = await cache.wait_for("after", lambda r: r is not None, timeout=5)
        assert found is not None and found.node_id == "n9"
        await store.delete_sandbox("before")
        await cache.wait_for("before", lambda r: r is None, timeout=5)
        assert [r.sandbox_id for r in cache.values()] == ["after"]
        with pytest.raises(errors.DeadlineExceeded):
            await cache.wait_for("never", lambda r: r is not None, timeout=0.2)
    finally:
        await cache.stop()


async def test_cache_resyncs_after_etcd_restart() -> None:
    with EtcdServer() as server:
        store = await ClusterStore.connect(server.settings())
        cache = RecordCache(store, SANDBOXES, cluster_pb2.SandboxRecord)
        try:
            await store.put_sandbox(sandbox("s1"))
            await cache.start()
            server.kill()
            server.start()
            # Changes the cache cannot see while its watch is broken: found by the resync.
            writer = await ClusterStore.connect(server.settings())
            try:
                await writer.delete_sandbox("s1")
                await writer.put_sandbox(sandbox("s2"))
            finally:
                await writer.close()
            await cache.wait_for("s1", lambda r: r is None, timeout=20)
            await cache.wait_for("s2", lambda r: r is not None, timeout=20)
            assert cache.resyncs >= 2
            # And the watch works again after the resync.
            await store.put_sandbox(sandbox("s3"))
            await cache.wait_for("s3", lambda r: r is not None, timeout=10)
        finally:
            await cache.stop()
            await store.close()


async def test_registration_record_expires_when_heartbeats_stop(store: ClusterStore) -> None:
    registration = NodeRegistration(store, lambda: node("n1"), ttl=2)
    await registration.start()
    try:
        first = await store.get_node("n1")
        assert first is not None and first.heartbeat_time.seconds > 0
        await asyncio.sleep(2.5)  # several heartbeats: still registered past one TTL
        beat = await store.get_node("n1")
        assert beat is not None
        assert beat.heartbeat_time.ToNanoseconds() > first.heartbeat_time.ToNanoseconds()
    finally:
        await registration.stop(revoke=False)  # as if the agent hung
    for _ in range(100):
        if await store.get_node("n1") is None:
            break
        await asyncio.sleep(0.1)
    assert await store.get_node("n1") is None


async def test_registration_comes_back_after_lost_lease(store: ClusterStore) -> None:
    registration = NodeRegistration(store, lambda: node("n1"), ttl=2)
    await registration.start()
    try:
        lease_id = registration.lease_id
        assert lease_id is not None
        await store.client.revoke_lease(lease_id)  # e.g. expired during a long pause
        assert await store.get_node("n1") is None
        for _ in range(50):
            if await store.get_node("n1") is not None:
                break
            await asyncio.sleep(0.1)
        assert await store.get_node("n1") is not None
        assert registration.registrations == 2 and registration.lease_id != lease_id
    finally:
        await registration.stop()
    assert await store.get_node("n1") is None  # clean stop revokes at once


async def test_mark_lost_sandboxes(store: ClusterStore) -> None:
    await store.put_sandbox(sandbox("alive", node_id="n1"))
    await store.put_sandbox(sandbox("orphan", node_id="gone"))
    already = sandbox("old", node_id="gone")
    already.state = LOST
    await store.put_sandbox(already)
    assert await mark_lost_sandboxes(store, {"n1"}) == ["orphan"]
    orphan = await store.get_sandbox("orphan")
    assert orphan is not None and orphan.state == LOST and orphan.node_id == "gone"
    alive = await store.get_sandbox("alive")
    assert alive is not None and alive.state == RUNNING
    assert await mark_lost_sandboxes(store, {"n1"}) == []  # idempotent


async def test_a_node_back_since_the_sweep_read_the_live_ones_keeps_its_sandboxes(
    store: ClusterStore,
) -> None:
    await store.put_sandbox(sandbox("back", node_id="n2"))
    await store.put_sandbox(sandbox("gone", node_id="n3"))
    await store.put_node(node("n2"))  # registered again after the sweep read {"n1"}
    assert await mark_lost_sandboxes(store, {"n1"}) == ["gone"]
    back = await store.get_sandbox("back")
    assert back is not None and back.state == RUNNING


async def test_an_update_unless_a_record_exists_writes_only_while_it_is_absent(
    store: ClusterStore,
) -> None:
    await store.put_sandbox(sandbox("s1", node_id="n2"))

    def lose(record: cluster_pb2.SandboxRecord) -> None:
        record.state = LOST

    await store.put_node(node("n2"))
    with pytest.raises(errors.Conflict, match="nodes 'n2' exists"):
        await store.update_record("sandboxes", "s1", cluster_pb2.SandboxRecord, lose,
                                  unless=("nodes", "n2"))
    kept = await store.get_sandbox("s1")
    assert kept is not None and kept.state == RUNNING
    await store.delete_record("nodes", "n2")
    await store.update_record("sandboxes", "s1", cluster_pb2.SandboxRecord, lose,
                              unless=("nodes", "n2"))
    lost = await store.get_sandbox("s1")
    assert lost is not None and lost.state == LOST


async def test_paused_sandboxes_in_snapstore_are_not_lost(store: ClusterStore) -> None:
    stored = sandbox("stored", node_id="gone")
    stored.state = cluster_pb2.SANDBOX_STATE_PAUSED
    stored.paused_image = "paused-stored-1"
    unstored = sandbox("unstored", node_id="gone")
    unstored.state = cluster_pb2.SANDBOX_STATE_PAUSED  # its push had not completed
    for record in (stored, unstored):
        await store.put_sandbox(record)
    assert await mark_lost_sandboxes(store, {"n1"}) == ["unstored"]
    kept = await store.get_sandbox("stored")
    assert kept is not None and kept.state == cluster_pb2.SANDBOX_STATE_PAUSED


async def test_leader_election_fails_over(store: ClusterStore) -> None:
    led: list[str] = []

    def elect(name: str) -> LeaderElection:
        async def leading() -> None:
            led.append(name)
            await asyncio.Event().wait()

        return LeaderElection(store, store.keys.scheduler_leader, name, leading, ttl=2)

    first, second = elect("a"), elect("b")
    first.start()
    await _until(lambda: first.is_leader)
    second.start()
    try:
        await asyncio.sleep(0.5)
        assert not second.is_leader
        await first.stop()
        await _until(lambda: second.is_leader)
        assert led == ["a", "b"]
        kv = await store.client.get(store.keys.scheduler_leader)
        assert kv is not None and kv.value == b"b"
    finally:
        await first.stop()
        await second.stop()
    assert await store.client.get(store.keys.scheduler_leader) is None


async def _until(condition: Callable[[], bool], within: float = 10) -> None:
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (polls state that other tasks change)
            await asyncio.sleep(0.05)
