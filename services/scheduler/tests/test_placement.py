"""Placement logic on plain records (no etcd)."""

from __future__ import annotations

import asyncio

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common import errors
from aenv_scheduler.admission import AdmissionQueue
from aenv_scheduler.placement import choose_node, fits_now, load, resolve_demand
from aenv_scheduler.reservations import Reservations

R = cluster_pb2.Resources


def node(
    node_id: str, *, vcpus: int = 8, used: int = 0, templates: tuple[str, ...] = (), disk: int = 0
) -> cluster_pb2.NodeRecord:
    return cluster_pb2.NodeRecord(
        node_id=node_id,
        capacity=R(vcpus=vcpus, memory_mib=vcpus * 1024, disk_mib=disk),
        allocated=R(vcpus=used, memory_mib=used * 1024),
        cached_templates=list(templates),
    )


def test_demand_resolves_field_by_field() -> None:
    fallback = R(vcpus=1, memory_mib=512)
    assert resolve_demand(R(), None, fallback) == fallback
    assert resolve_demand(R(), R(vcpus=2, memory_mib=2048), fallback) == R(vcpus=2, memory_mib=2048)
    assert resolve_demand(R(vcpus=4), R(vcpus=2, memory_mib=2048), fallback) == R(
        vcpus=4, memory_mib=2048
    )


def test_fit_counts_allocation_and_reservations_and_disk_only_when_declared() -> None:
    need = R(vcpus=2, memory_mib=2048, disk_mib=10_000)
    assert fits_now(node("a", used=6), R(), need)
    assert not fits_now(node("a", used=6), R(vcpus=1, memory_mib=1024), need)
    assert not fits_now(node("a", disk=5_000), R(), need)
    assert fits_now(node("a", disk=50_000), R(), need)
    assert load(node("a", used=2), R(vcpus=2, memory_mib=2048)) == 0.5


def test_cached_template_beats_load_and_load_breaks_ties() -> None:
    need = R(vcpus=1, memory_mib=512)
    nodes = [node("busy-cached", used=6, templates=("base",)), node("idle"), node("idle2", used=1)]

    def chosen(template_id: str, held: dict[str, cluster_pb2.Resources]) -> str:
        best = choose_node(nodes, need, template_id, held)
        assert best is not None
        node_id: str = best.node_id
        return node_id

    assert chosen("base", {}) == "busy-cached"
    assert chosen("other", {}) == "idle"
    assert chosen("other", {"idle": R(vcpus=4, memory_mib=4096)}) == "idle2"


def test_no_node_fits() -> None:
    assert choose_node([node("a", used=8)], R(vcpus=1, memory_mib=512), "base", {}) is None
    assert choose_node([], R(vcpus=1, memory_mib=512), "base", {}) is None


def test_reservations_settle_when_the_node_accounts_for_the_sandbox() -> None:
    res = Reservations(ttl_seconds=60)
    res.add("n1", "s1", R(vcpus=1, memory_mib=512))
    res.add("n1", "s2", R(vcpus=2, memory_mib=512))
    assert res.held["n1"] == R(vcpus=3, memory_mib=1024)
    assert res.node_updated("n1", 10) == 0  # sandbox records not written yet
    res.sandbox_recorded("s1", 11)
    assert res.node_updated("n1", 11) == 0  # node record not newer than the sandbox record
    assert res.node_updated("n1", 12) == 1
    assert res.held["n1"] == R(vcpus=2, memory_mib=512)
    assert res.node_gone("n1") == 1
    assert "n1" not in res.held and len(res) == 0


def test_reservations_expire_and_retries_replace() -> None:
    now = [0.0]
    res = Reservations(ttl_seconds=5, clock=lambda: now[0])
    res.add("n1", "s1", R(vcpus=1))
    now[0] = 3
    res.add("n2", "s1", R(vcpus=1))  # same sandbox scheduled again: moves
    assert set(res.held) == {"n2"}
    res.add("n1", "s2", R(vcpus=1))
    now[0] = 7.5
    assert res.expire() == 0
    now[0] = 8.1
    assert res.expire() == 2 and len(res) == 0


async def test_queue_places_waiters_in_order_when_capacity_appears() -> None:
    capacity = [0]

    def try_place(request: int) -> int | None:
        if capacity[0] <= 0:
            return None
        capacity[0] -= 1
        return request

    queue: AdmissionQueue[int, int] = AdmissionQueue(try_place, max_queued=100)
    tasks = [asyncio.create_task(queue.admit(i, wait_seconds=5)) for i in range(5)]
    await asyncio.sleep(0.01)
    assert len(queue) == 5
    capacity[0] = 3
    queue.retry_waiting()
    assert sorted(await asyncio.gather(*tasks[:3])) == [0, 1, 2]
    capacity[0] = 2
    queue.retry_waiting()
    assert await asyncio.gather(*tasks[3:]) == [3, 4]
    assert len(queue) == 0


async def test_queue_times_out_cleanly_and_bounds_its_length() -> None:
    queue: AdmissionQueue[int, int] = AdmissionQueue(lambda r: None, max_queued=1)
    waiter = asyncio.create_task(queue.admit(1, wait_seconds=0.2))
    await asyncio.sleep(0.01)
    with pytest.raises(errors.ResourceExhausted, match=r"concurrent.*queue is full"):
        await queue.admit(2, wait_seconds=1)
    with pytest.raises(errors.ResourceExhausted, match=r"maximum number of concurrent.*no room"):
        await waiter
    assert len(queue) == 0


async def test_queue_passes_typed_errors_to_the_waiter() -> None:
    fail = [False]

    def try_place(request: int) -> int | None:
        if fail[0]:
            raise errors.NotFound("template 'x' not found")
        return None

    queue: AdmissionQueue[int, int] = AdmissionQueue(try_place, max_queued=10)
    waiter = asyncio.create_task(queue.admit(1, wait_seconds=5))
    await asyncio.sleep(0.01)
    fail[0] = True
    queue.retry_waiting()
    with pytest.raises(errors.NotFound):
        await waiter
