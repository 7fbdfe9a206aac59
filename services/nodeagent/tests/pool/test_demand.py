"""The warm pool's demand: as many woken guests as creates recently asked for, within a cap."""

from __future__ import annotations

from aenv_nodeagent.pool import Demand


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_template_nobody_asked_for_gets_none() -> None:
    assert Demand(4).target("base") == 0


def test_a_burst_is_followed_within_the_cap_then_decays_then_idles_out() -> None:
    clock = Clock()
    demand = Demand(4, window_s=60, idle_s=600, clock=clock)
    for _ in range(3):
        demand.took("base")
    assert demand.target("base") == 3
    for _ in range(5):
        demand.took("base")
    assert demand.target("base") == 4  # the cap
    assert demand.target("other") == 0
    clock.now += 61
    assert demand.target("base") == 1  # the burst is past; one kept while it may come back
    clock.now += 600
    assert demand.target("base") == 0  # idle: its memory goes back to the host


def test_a_zero_cap_keeps_none_and_forget_drops_the_history() -> None:
    clock = Clock()
    off = Demand(0, clock=clock)
    off.took("base")
    assert off.target("base") == 0
    on = Demand(2, clock=clock)
    on.took("base")
    on.forget("base")
    assert on.target("base") == 0
