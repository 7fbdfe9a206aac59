"""The reaper over a real etcd: lease keys bound to etcd leases of a short ttl, as the gateway
writes them. A lapse (expiry or release) is seen by the watch within a second, with the action
the lease said while it lived; a reaper that starts after the lapse still ends its sandboxes;
a lease kept alive keeps its sandboxes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_common.errors import Conflict
from aenv_common.leases import KILL, LEASES, PAUSE
from aenv_nodeagent.leases import LeaseReaper
from aenv_nodeagent.sandbox.records import lease_on_expiry

from .fakes import PAUSED, FakeSandboxes

pytestmark = [pytest.mark.etcd]
EXPIRED = "DEATH_CAUSE_LEASE_EXPIRED"


async def _lease(store: ClusterStore, lease_id: str, ttl_s: int, action: int) -> int:
    """A lease as the gateway takes it (core/leases/records.py there): its etcd lease's id."""
    granted = await store.client.lease(ttl_s)
    record = cluster_pb2.LeaseRecord(
        lease_id=lease_id, ttl_seconds=ttl_s, etcd_lease=granted.id,
        on_expiry=action)  # type: ignore[arg-type]
    await store.put_record(LEASES, lease_id, record, lease=granted.id)
    return int(granted.id)


@pytest.fixture
async def reapers(cluster_store: ClusterStore) -> AsyncIterator[list[LeaseReaper]]:
    started: list[LeaseReaper] = []
    try:
        yield started
    finally:
        for reaper in started:
            await reaper.stop()


async def _until(condition: Callable[[], bool], within_s: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > within_s:
            raise AssertionError(f"not within {within_s} s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def test_the_watch_ends_a_lapsed_leases_sandboxes(
    cluster_store: ClusterStore, reapers: list[LeaseReaper],
) -> None:
    store, sandboxes = cluster_store, FakeSandboxes()
    await _lease(store, "lease-k", 2, KILL)
    await _lease(store, "lease-p", 2, PAUSE)
    kept = await _lease(store, "lease-kept", 2, KILL)
    released = await _lease(store, "lease-r", 60, KILL)
    for sid, lease_id in (("k1", "lease-k"), ("p1", "lease-p"), ("kept1", "lease-kept"),
                          ("r1", "lease-r")):
        sandboxes.add(sid, lease_id)
    sandboxes.add("k2", "lease-k", PAUSED)
    sandboxes.add("p2", "lease-p", PAUSED)
    # A reconcile an hour away: only the watch can end them in this test.
    reaper = LeaseReaper(store, sandboxes, interval_s=3600, concurrency=4)
    await reaper.start()
    reapers.append(reaper)
    assert sandboxes.done == []
    await store.client.revoke_lease(released)  # a release is a lapse too
    await _until(lambda: "r1" not in sandboxes.sandboxes, 2, "the released lease's sandbox")
    lapsed_at = time.monotonic()
    for _ in range(8):  # the kept lease renewed while the others lapse
        await store.client.refresh_lease(kept)
        await asyncio.sleep(0.5)
    await _until(lambda: len(sandboxes.done) == 6, 5, "the lapsed leases' sandboxes ended")
    waited = time.monotonic() - lapsed_at
    assert sorted(sandboxes.done) == [
        ("detach", "p1", "lease-p"), ("detach", "p2", "lease-p"),
        ("kill", "k1", f"{EXPIRED}: lease lease-k lapsed"),
        ("kill", "k2", f"{EXPIRED}: lease lease-k lapsed"),
        ("kill", "r1", f"{EXPIRED}: lease lease-r lapsed"),
        ("pause", "p1", "lease lease-p lapsed"),
    ]
    assert set(sandboxes.sandboxes) == {"p1", "p2", "kept1"}
    assert waited < 6  # 2 s ttls: etcd ends them within a second or two of it
    assert await store.get_record(LEASES, "lease-kept", cluster_pb2.LeaseRecord) is not None


async def test_a_reaper_started_after_the_lapse_still_ends_them(
    cluster_store: ClusterStore, reapers: list[LeaseReaper],
) -> None:
    store, sandboxes = cluster_store, FakeSandboxes()
    gone = await _lease(store, "lease-gone", 30, PAUSE)
    await _lease(store, "lease-live", 30, KILL)
    sandboxes.add("a", "lease-gone")
    sandboxes.add("b", "lease-live")
    await store.client.revoke_lease(gone)  # lapsed while no reaper ran (an agent restarting)
    reaper = LeaseReaper(store, sandboxes, interval_s=3600, concurrency=4)
    await reaper.start()  # its first reconcile is part of its start
    reapers.append(reaper)
    # Its action died with its record: killed, the default.
    assert sandboxes.done == [("kill", "a", f"{EXPIRED}: lease lease-gone lapsed")]
    assert set(sandboxes.sandboxes) == {"b"}


async def test_the_periodic_reconcile_catches_what_the_watch_did_not_end(
    cluster_store: ClusterStore, reapers: list[LeaseReaper],
) -> None:
    """A sandbox the watch's end could not take (busy at the time) is ended by the reconcile."""
    store, sandboxes = cluster_store, FakeSandboxes()
    lease = await _lease(store, "lease-x", 30, KILL)
    sandboxes.add("busy", "lease-x")
    sandboxes.failures["busy"] = Conflict("another operation holds it")
    reaper = LeaseReaper(store, sandboxes, interval_s=0.5, concurrency=4)
    await reaper.start()
    reapers.append(reaper)
    await store.client.revoke_lease(lease)
    await _until(lambda: not sandboxes.sandboxes, 3, "the busy sandbox ended by a reconcile")
    assert sandboxes.done == [("kill", "busy", f"{EXPIRED}: lease lease-x lapsed")]
    assert "busy" not in sandboxes.failures  # the watch's try met the failure first


async def test_an_agent_down_when_a_pause_lease_lapsed_pauses_its_sandboxes(
    cluster_store: ClusterStore, reapers: list[LeaseReaper],
) -> None:
    """The action is read from etcd at the create (as the wing's create reads it) and kept on
    the sandbox's record: a reaper that never saw the lease alive still pauses."""
    store, sandboxes = cluster_store, FakeSandboxes()
    gone = await _lease(store, "lease-pz", 30, PAUSE)
    kept = await lease_on_expiry(store, "lease-pz")
    assert kept == PAUSE
    sandboxes.add("a", "lease-pz", on_expiry=kept)
    sandboxes.add("b", "lease-pz", PAUSED, on_expiry=kept)
    await store.client.revoke_lease(gone)  # lapsed while no reaper ran (an agent restarting)
    reaper = LeaseReaper(store, sandboxes, interval_s=3600, concurrency=4)
    await reaper.start()
    reapers.append(reaper)
    assert sorted(sandboxes.done) == [
        ("detach", "a", "lease-pz"), ("detach", "b", "lease-pz"),
        ("pause", "a", "lease lease-pz lapsed")]
    assert set(sandboxes.sandboxes) == {"a", "b"}
