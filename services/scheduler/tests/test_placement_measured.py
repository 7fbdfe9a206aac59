"""Placement on measured use: a node's memory budget, its VMs' PSS, reservations of placements
not measured yet, and memory pressure (aenv_common.capacity, through the scheduler's filter)."""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2
from aenv_common.capacity import refusal
from aenv_scheduler.placement import choose_node, fits_now, fits_when_empty, load

R = cluster_pb2.Resources
GUEST = R(vcpus=1, memory_mib=512)


def measured_node(
    node_id: str, *, running: int, used_mib: int, budget_mib: int = 2048, pressure: str = ""
) -> cluster_pb2.NodeRecord:
    """`running` sandboxes of GUEST's shape whose VMs use `used_mib` in all, on a node whose
    nominal capacity is 8x its budget (the overcommit ratio)."""
    return cluster_pb2.NodeRecord(
        node_id=node_id,
        capacity=R(vcpus=64, memory_mib=budget_mib * 8),
        allocated=R(vcpus=running, memory_mib=running * GUEST.memory_mib),
        sandbox_count=running,
        memory_budget_mib=budget_mib,
        memory_used_mib=used_mib,
        host_memory_available_mib=20_000,
        pressure=pressure,
        cached_templates=["base"],
    )


def test_measured_use_admits_past_the_nominal_count() -> None:
    # 4 guests of 512 MiB are the budget nominally; 10 of them use 70 MiB each.
    node = measured_node("a", running=10, used_mib=700)
    assert fits_now(node, R(), GUEST)
    # Full once the use plus a whole new guest's RAM passes the budget.
    assert not fits_now(measured_node("a", running=22, used_mib=1540 + 1), R(), GUEST)
    assert fits_now(measured_node("a", running=22, used_mib=1536), R(), GUEST)


def test_reservations_count_their_whole_guest_ram_until_measured() -> None:
    node = measured_node("a", running=2, used_mib=140)
    assert fits_now(node, R(vcpus=2, memory_mib=1024), GUEST)
    assert not fits_now(node, R(vcpus=3, memory_mib=1536), GUEST)
    reason = refusal(node, R(vcpus=3, memory_mib=1536), GUEST)
    assert reason is not None and "memory budget" in reason


def test_the_overcommit_ratio_still_bounds_nominal_memory() -> None:
    # 32 guests of 512 MiB are 8x the 2 GiB budget: the 33rd is refused however little they use.
    node = measured_node("a", running=32, used_mib=320)
    reason = refusal(node, R(), GUEST)
    assert reason is not None and "guest memory" in reason


def test_pressure_stops_placement_but_not_for_ever() -> None:
    node = measured_node("a", running=1, used_mib=70, pressure="MemAvailable 300 MiB < 512 MiB")
    assert not fits_now(node, R(), GUEST)
    assert "memory pressure" in (refusal(node, R(), GUEST) or "")
    assert fits_when_empty(node, GUEST)  # it waits in the queue, it is not refused for ever
    assert not fits_when_empty(node, R(vcpus=1, memory_mib=4096))  # beyond the budget: never


def test_measured_load_steers_to_the_node_using_less() -> None:
    light = measured_node("light", running=8, used_mib=400)
    heavy = measured_node("heavy", running=2, used_mib=1200)
    squeezed = measured_node("squeezed", running=0, used_mib=0, pressure="PSI some avg10 40%")
    assert load(light, R()) < load(heavy, R())
    best = choose_node([heavy, squeezed, light], GUEST, "base", {})
    assert best is not None and best.node_id == "light"
    assert choose_node([squeezed], GUEST, "base", {}) is None


def test_a_node_that_measures_nothing_is_placed_by_nominal_capacity() -> None:
    node = cluster_pb2.NodeRecord(
        node_id="old", capacity=R(vcpus=4, memory_mib=2048), allocated=R(vcpus=3, memory_mib=1536)
    )
    assert fits_now(node, R(), GUEST)
    assert not fits_now(node, R(vcpus=1, memory_mib=512), GUEST)
    assert load(node, R()) == 0.75
