"""The reaper's decisions, over a fake etcd read and fake sandboxes: which of this node's
sandboxes end when their lease is gone, and how (the watch's path, over a real etcd, is in
test_reaper_etcd.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore, Versioned
from aenv_common.errors import Conflict, Unavailable
from aenv_common.leases import KILL, PAUSE
from aenv_nodeagent.leases import LeaseReaper
from aenv_nodeagent.leases.reaper import decide

from .fakes import PAUSED, RUNNING, FakeSandboxes

LEASE_EXPIRED = "DEATH_CAUSE_LEASE_EXPIRED"


class FakeLeases:
    """The `leases/` records etcd holds now (what a reconcile reads)."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.reads = 0

    async def snapshot(self, kind: str, record_type: Any) -> tuple[int, dict[str, Any]]:
        assert kind == "leases"
        self.reads += 1
        return 1, {i: Versioned(_lease(i, a), 1, 1, 7) for i, a in self.live.items()}


def _lease(lease_id: str, action: int) -> cluster_pb2.LeaseRecord:
    return cluster_pb2.LeaseRecord(lease_id=lease_id, on_expiry=action)  # type: ignore[arg-type]


def _reaper(leases: FakeLeases, sandboxes: FakeSandboxes) -> LeaseReaper:
    return LeaseReaper(cast(ClusterStore, leases), sandboxes, interval_s=60, concurrency=2)


@pytest.mark.parametrize("state, action, decided", [
    (RUNNING, KILL, "kill"), (PAUSED, KILL, "kill"),
    (RUNNING, PAUSE, "pause"), (PAUSED, PAUSE, "detach"),
    (cluster_pb2.SANDBOX_STATE_KILLING, KILL, None),
    (cluster_pb2.SANDBOX_STATE_CREATING, PAUSE, None),
])
def test_what_a_lapse_does_to_a_sandbox(state: int, action: int, decided: str | None) -> None:
    record = cluster_pb2.SandboxRecord(
        sandbox_id="s", lease_id="lease-a", state=state)  # type: ignore[arg-type]
    assert decide(record, action) == decided


async def test_a_reconcile_ends_only_the_sandboxes_of_lapsed_leases() -> None:
    leases, sandboxes = FakeLeases(), FakeSandboxes()
    leases.live = {"lease-live": KILL, "lease-k": KILL, "lease-p": PAUSE}
    for sid, lease in (("a1", "lease-k"), ("a2", "lease-k"), ("b1", "lease-p"),
                       ("c1", "lease-live"), ("d1", "")):
        sandboxes.add(sid, lease)
    sandboxes.add("b2", "lease-p", PAUSED)
    sandboxes.add("a3", "lease-k", PAUSED)
    reaper = _reaper(leases, sandboxes)
    assert await reaper.reconcile() == [] and sandboxes.done == []
    # The two lapse: the reconcile saw their actions while they lived.
    leases.live = {"lease-live": KILL}
    assert sorted(await reaper.reconcile()) == ["a1", "a2", "a3", "b1", "b2"]
    assert sorted(sandboxes.done) == [
        ("detach", "b1", "lease-p"), ("detach", "b2", "lease-p"),
        ("kill", "a1", f"{LEASE_EXPIRED}: lease lease-k lapsed"),
        ("kill", "a2", f"{LEASE_EXPIRED}: lease lease-k lapsed"),
        ("kill", "a3", f"{LEASE_EXPIRED}: lease lease-k lapsed"),
        ("pause", "b1", "lease lease-p lapsed"),
    ]
    # The pause came before the detach; the paused sandboxes stay, out of the lease.
    assert sandboxes.done.index(("pause", "b1", "lease lease-p lapsed")) < sandboxes.done.index(
        ("detach", "b1", "lease-p"))
    assert {s: (r.state, r.lease_id) for s, r in sandboxes.sandboxes.items()} == {
        "b1": (PAUSED, ""), "b2": (PAUSED, ""), "c1": (RUNNING, "lease-live"), "d1": (RUNNING, "")}
    assert reaper.reaped == 5
    # Nothing left to end: a later pass does nothing (and reads etcd only while a sandbox here
    # names a lease).
    sandboxes.done.clear()
    assert await reaper.reconcile() == [] and sandboxes.done == []
    del sandboxes.sandboxes["c1"]
    reads = leases.reads
    await reaper.reconcile()
    assert leases.reads == reads


async def test_a_lease_never_seen_alive_is_a_kill() -> None:
    """A reaper that starts after the lapse cannot know the action: the record is gone."""
    leases, sandboxes = FakeLeases(), FakeSandboxes()
    sandboxes.add("a", "lease-gone")
    sandboxes.add("b", "lease-gone", PAUSED)
    assert sorted(await _reaper(leases, sandboxes).reconcile()) == ["a", "b"]
    assert sorted(w for w, _, _ in sandboxes.done) == ["kill", "kill"]


async def test_a_sandbox_not_ended_now_is_ended_by_a_later_pass() -> None:
    leases, sandboxes = FakeLeases(), FakeSandboxes()
    leases.live = {"lease-p": PAUSE}
    sandboxes.add("busy", "lease-p")
    sandboxes.add("down", "lease-p")
    reaper = _reaper(leases, sandboxes)
    await reaper.reconcile()
    leases.live = {}
    sandboxes.failures = {"busy": Conflict("busy"), "down": Unavailable("etcd down")}
    await reaper.reconcile()
    assert sandboxes.done == []
    # The action is remembered across the passes, though no read shows the lease any more.
    await reaper.reconcile()
    assert sorted(sandboxes.done) == [
        ("detach", "busy", "lease-p"), ("detach", "down", "lease-p"),
        ("pause", "busy", "lease lease-p lapsed"), ("pause", "down", "lease lease-p lapsed")]


async def test_a_lapse_no_watch_saw_follows_each_sandbox_s_own_record() -> None:
    """An agent that was down while a lease lapsed knows its action from the sandboxes' records
    alone: a PAUSE lease's sandboxes pause, and one kept nothing (made before records kept it)
    is killed, the default."""
    leases, sandboxes = FakeLeases(), FakeSandboxes()
    sandboxes.add("p1", "lease-p", on_expiry=PAUSE)
    sandboxes.add("p2", "lease-p", PAUSED, on_expiry=PAUSE)
    sandboxes.add("k1", "lease-k", on_expiry=KILL)
    sandboxes.add("old", "lease-old")
    await _reaper(leases, sandboxes).reconcile()
    assert sorted(sandboxes.done) == [
        ("detach", "p1", "lease-p"), ("detach", "p2", "lease-p"),
        ("kill", "k1", f"{LEASE_EXPIRED}: lease lease-k lapsed"),
        ("kill", "old", f"{LEASE_EXPIRED}: lease lease-old lapsed"),
        ("pause", "p1", "lease lease-p lapsed"),
    ]


async def test_the_action_seen_alive_comes_before_the_record_s() -> None:
    leases, sandboxes = FakeLeases(), FakeSandboxes()
    leases.live = {"lease-a": KILL}
    sandboxes.add("a1", "lease-a", on_expiry=PAUSE)
    reaper = _reaper(leases, sandboxes)
    assert await reaper.reconcile() == []
    leases.live = {}
    assert await reaper.reconcile() == ["a1"]
    assert sandboxes.done == [("kill", "a1", f"{LEASE_EXPIRED}: lease lease-a lapsed")]
