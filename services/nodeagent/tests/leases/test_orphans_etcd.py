"""Paused sandboxes whose node is gone (kept in snapstore), under a lapsed lease, over a real
etcd and a real snapstore: the keeper (the live node with the lowest id) kills a kill lease's
with a DIED event, a lease_expired certificate and its stored state dropped, and detaches a
pause lease's; a live lease's, a live node's and an unleased one stay; no other node acts, and
two keepers racing on one orphan end it once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.keys import SANDBOXES
from aenv_common.errors import Conflict
from aenv_common.events import EventLog
from aenv_common.events.log import DEATHS, SANDBOX_EVENTS
from aenv_common.leases import KILL, LEASES, PAUSE
from aenv_nodeagent.leases import LeaseReaper
from aenv_nodeagent.leases.orphans import StoredOrphans
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence

from .fakes import PAUSED, FakeSandboxes

pytestmark = [pytest.mark.etcd]
DIED = cluster_pb2.SANDBOX_EVENT_TYPE_DIED
EXPIRED = cluster_pb2.DEATH_CAUSE_LEASE_EXPIRED


class FakeSnapstore:
    """What the keeper asks of snapstore: drop a manifest (in the background)."""

    def __init__(self) -> None:
        self.forgotten: list[str] = []

    def forget_soon(self, manifest_id: str) -> None:
        self.forgotten.append(manifest_id)


def orphan(sandbox_id: str, lease_id: str, action: int, node_id: str = "gone") -> (
        cluster_pb2.SandboxRecord):
    return cluster_pb2.SandboxRecord(
        sandbox_id=sandbox_id, node_id=node_id, state=PAUSED, owner_key_id="k1",
        template_id="base", paused_image=f"paused-{sandbox_id}", lease_id=lease_id,
        lease_on_expiry=action)  # type: ignore[arg-type]


def keeper(store: ClusterStore, node_id: str,
           snapstore: FakeSnapstore | SnapshotPersistence) -> StoredOrphans:
    events = SandboxEvents(store, node_id, EventLog(store, retention_s=600))
    return StoredOrphans(store, node_id, events, cast(SnapshotPersistence, snapstore))


async def stored(persistence: SnapshotPersistence, manifest_ids: list[str], state: Path) -> None:
    """Each id pushed as a paused sandbox's manifest (one small file), once all are in."""
    state.write_bytes(b"paused state")

    async def files() -> Mapping[str, Path]:
        return {"memory": state}

    async def pushed() -> None:
        return None

    for manifest_id in manifest_ids:
        persistence.push_soon(manifest_id, files, pushed, labels={})
    await until_manifests(persistence, lambda held: set(manifest_ids) <= held, "pushed")


async def until_manifests(persistence: SnapshotPersistence, check: Callable[[set[str]], bool],
                          what: str, within_s: float = 180) -> None:
    deadline = time.monotonic() + within_s
    while not check(await persistence.manifests()):
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        await asyncio.sleep(0.1)


async def test_the_keeper_ends_a_lapsed_leases_orphans_and_no_one_else_does(
    cluster_store: ClusterStore, snapstore: str, tmp_path: Path,
) -> None:
    store = cluster_store
    persistence = SnapshotPersistence(snapstore, retry_delays_s=())
    try:
        await _keeper_ends_orphans(store, persistence, tmp_path)
    finally:
        await persistence.close()


async def _keeper_ends_orphans(store: ClusterStore, persistence: SnapshotPersistence,
                               tmp_path: Path) -> None:
    for node_id in ("node-a", "node-b"):
        await store.put_node(cluster_pb2.NodeRecord(node_id=node_id))
    granted = await store.client.lease(60)
    await store.put_record(LEASES, "live", cluster_pb2.LeaseRecord(
        lease_id="live", etcd_lease=granted.id), lease=granted.id)
    records = [orphan("o-kill", "gone-k", KILL), orphan("o-pause", "gone-p", PAUSE),
               orphan("o-live", "live", KILL), orphan("o-none", "", KILL),
               orphan("on-b", "gone-k", KILL, node_id="node-b")]
    for record in records:
        await store.put_sandbox(record)
    await stored(persistence, ["paused-o-kill", "paused-o-pause"], tmp_path / "memory")
    # node-b is alive, node-a too: node-b keeps no orphans, its reconcile touches none.
    other = FakeSandboxes()
    other.orphans = keeper(store, "node-b", persistence)
    assert await other.orphans.leased() == []
    assert await LeaseReaper(store, other, interval_s=60, concurrency=4).reconcile() == []

    mine = FakeSandboxes()
    mine.orphans = keeper(store, "node-a", persistence)
    ended = await LeaseReaper(store, mine, interval_s=60, concurrency=4).reconcile()
    assert sorted(ended) == ["o-kill", "o-pause"]
    assert await store.get_sandbox("o-kill") is None
    log = EventLog(store)
    certificate = await log.death("o-kill")
    assert certificate is not None
    assert (certificate.cause, certificate.detail) == (EXPIRED, "lease gone-k lapsed")
    died = [e for e in await log.events(SANDBOX_EVENTS, "o-kill") if e.type == DIED]
    assert [(e.cause, e.lease_id) for e in died] == [(EXPIRED, "gone-k")]
    # Its stored state is dropped from snapstore; the paused one's stays.
    await until_manifests(persistence, lambda held: "paused-o-kill" not in held, "dropped")
    assert "paused-o-pause" in await persistence.manifests()
    # The pause lease's: still paused and stored, out of the lease, not dead.
    paused = await store.get_sandbox("o-pause")
    assert paused is not None and paused.state == PAUSED and paused.paused_image
    assert (paused.lease_id, paused.lease_on_expiry) == ("", 0)
    assert await log.death("o-pause") is None
    # A live lease's, an unleased one and a live node's stay as they were.
    for record in records[2:]:
        assert await store.get_sandbox(record.sandbox_id) == record
    # A second pass finds nothing more to do.
    assert await LeaseReaper(store, mine, interval_s=60, concurrency=4).reconcile() == []


async def test_two_keepers_racing_on_one_orphan_end_it_once(
    cluster_store: ClusterStore,
) -> None:
    """During a hand-over two nodes may both believe they keep the orphans: the record's
    revision decides, and only the winner writes a death."""
    store = cluster_store
    await store.put_sandbox(orphan("o-race", "gone-r", KILL))
    snapstore = FakeSnapstore()
    keepers = [keeper(store, node_id, snapstore) for node_id in ("node-x", "node-y")]
    seen = [await k.leased() for k in keepers]
    assert all([o.record.sandbox_id for o in found] == ["o-race"] for found in seen)
    outcomes = await asyncio.gather(
        *(k.kill(found[0], cause=EXPIRED, detail="lease gone-r lapsed")
          for k, found in zip(keepers, seen, strict=True)),
        return_exceptions=True)
    assert sorted(type(o).__name__ for o in outcomes) == ["Conflict", "NoneType"]
    assert any(isinstance(o, Conflict) for o in outcomes)
    died = [e for e in await EventLog(store).events(SANDBOX_EVENTS, "o-race") if e.type == DIED]
    assert len(died) == 1 and snapstore.forgotten == ["paused-o-race"]
    assert await store.get_sandbox("o-race") is None


async def test_an_orphans_record_goes_in_the_transaction_that_certifies_it(
    cluster_store: ClusterStore,
) -> None:
    """No revision of etcd in which the sandbox is neither there nor certified: a call never
    finds it gone without its cause, whenever the keeper dies."""
    store = cluster_store
    await store.put_sandbox(orphan("o-one", "gone-1", KILL))
    mine = keeper(store, "node-a", FakeSnapstore())
    [found] = await mine.leased()
    before, _ = await store.snapshot(SANDBOXES, cluster_pb2.SandboxRecord)

    await mine.kill(found, cause=EXPIRED, detail="lease gone-1 lapsed")

    after, records = await store.snapshot(SANDBOXES, cluster_pb2.SandboxRecord)
    certificate = await store.client.get(store.keys.record(DEATHS, "o-one"))
    assert "o-one" not in records and certificate is not None
    assert after == before + 1 and certificate.mod_revision == after


async def test_an_orphan_changed_after_it_was_read_is_left_alone(
    cluster_store: ClusterStore,
) -> None:
    store = cluster_store
    await store.put_sandbox(orphan("o-moved", "gone-m", KILL))
    snapstore = FakeSnapstore()
    mine = keeper(store, "node-a", snapstore)
    [found] = await mine.leased()
    taken = orphan("o-moved", "gone-m", KILL, node_id="node-b")  # a node took it over
    await store.put_sandbox(taken)

    with pytest.raises(Conflict):
        await mine.kill(found, cause=EXPIRED, detail="lease gone-m lapsed")

    assert await store.get_sandbox("o-moved") == taken
    log = EventLog(store)
    assert await log.death("o-moved") is None
    assert await log.events(SANDBOX_EVENTS, "o-moved") == [] and snapstore.forgotten == []
