"""The warm pool's pre-started VMs for restores from a template's snapshots (a fork's
children), over fakes: taken without waking anything, kept as many as such restores asked for
lately within the cap and while the host has room, let go back to the base share as the demand
lapses, and never handed out twice."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aenv_nodeagent.pool import Demand, PooledVm, WarmPool, warm

from ..fakes.network import FakeNetwork
from .test_woken_guests import Guests, Room, until

BASE = 1  # pre-started VMs the template always keeps


async def given_back(pooled: PooledVm, network: FakeNetwork) -> None:
    """What a restore that took `pooled` and failed undoes."""
    await pooled.vm.shutdown()
    await network.destroy_slot(pooled.slot)
    shutil.rmtree(pooled.directory)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture
async def parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[WarmPool, FakeNetwork, Guests, Room, Clock]]:
    monkeypatch.setattr(warm, "RECHECK_S", 0.02)  # the demand's and the room's changes, soon
    monkeypatch.setattr(warm, "SETTLE_S", 0.05)
    network, guests, room, clock = FakeNetwork(), Guests(), Room(), Clock()
    pool = WarmPool(network, tmp_path / "pool", slots=0, overlays_per_backing=0,  # type: ignore[arg-type]
                    vms_per_template=BASE, vm_root=tmp_path / "sandboxes", room=room,
                    snapshot_demand=Demand(4, window_s=60, idle_s=600, clock=clock))
    pool.start()
    pool.want_vms("base", guests.launch)  # type: ignore[arg-type]
    try:
        yield pool, network, guests, room, clock
    finally:
        await pool.close()
    assert network.live == []
    assert list((tmp_path / "sandboxes").iterdir()) == []


async def test_restores_from_snapshots_grow_the_pre_started_vms_up_to_the_cap(
    parts: tuple[WarmPool, FakeNetwork, Guests, Room, Clock],
) -> None:
    pool, network, guests, _, _ = parts
    await until(pool.full, "the base share")
    assert pool.sizes()["vms"] == BASE

    taken = [pool.take_prestarted("base") for _ in range(6)]  # a fork of 6 children

    handed = [vm for vm in taken if vm is not None]
    assert len(handed) == BASE and len({id(vm) for vm in handed}) == len(handed)
    await until(pool.full, "the demand's share")
    assert pool.sizes()["vms"] == 4  # the cap, not 6
    assert pool.takes["prestarted"] == BASE and pool.takes["missed"] == 5
    assert not any(vm.shut for vm in guests.launched)
    for pooled in handed:
        await given_back(pooled, network)


async def test_the_extra_vms_go_when_the_demand_lapses_or_the_host_needs_room(
    parts: tuple[WarmPool, FakeNetwork, Guests, Room, Clock],
) -> None:
    pool, network, guests, room, clock = parts
    await until(pool.full, "the base share")
    for _ in range(3):
        if (taken := pool.take_prestarted("base")) is not None:
            await given_back(taken, network)
    await until(lambda: pool.sizes()["vms"] == 3, "the demand's share")

    room.free = False  # memory is short: back to the base share, the oldest going first
    await until(lambda: pool.sizes()["vms"] == BASE, "the extra VMs let go")
    kept = [vm for vm in guests.launched if not vm.shut]
    assert len(kept) == BASE and kept[0] is guests.launched[-1]

    room.free = True
    await until(lambda: pool.sizes()["vms"] == 3, "the demand's share again")
    clock.now += 61  # a minute later only the last restore counts, as one VM: the base share
    await until(lambda: pool.sizes()["vms"] == BASE, "the lapsed demand's VMs let go")


async def test_no_vm_is_started_while_a_restore_runs(
    parts: tuple[WarmPool, FakeNetwork, Guests, Room, Clock], monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool, network, guests, _, _ = parts
    monkeypatch.setattr(warm, "SETTLE_S", 0.5)
    await until(pool.full, "the base share")
    launched = len(guests.launched)
    with pool.restoring():
        taken = pool.take_prestarted("base")
        assert taken is not None
        await asyncio.sleep(0.2)  # many refill passes' time
        assert len(guests.launched) == launched and not pool.full()
    await asyncio.sleep(0.05)  # within SETTLE_S of its end, when its first commands run
    assert len(guests.launched) == launched
    await until(pool.full, "the refill once the restore ended")
    assert len(guests.launched) > launched
    await given_back(taken, network)


async def test_a_restore_that_goes_on_delays_the_refill_only_so_long(
    parts: tuple[WarmPool, FakeNetwork, Guests, Room, Clock], monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool, network, _, _, _ = parts
    monkeypatch.setattr(warm, "QUIET_WAIT_S", 0.05)
    await until(pool.full, "the base share")
    with pool.restoring():
        taken = pool.take_prestarted("base")
        assert taken is not None
        await until(pool.full, "the refill beside a long restore")
    await given_back(taken, network)


async def test_no_base_share_means_no_pre_started_vm_at_all(tmp_path: Path) -> None:
    network, guests = FakeNetwork(), Guests()
    pool = WarmPool(network, tmp_path / "pool", slots=1, overlays_per_backing=0,  # type: ignore[arg-type]
                    vms_per_template=0, snapshot_vms_per_template=4,
                    vm_root=tmp_path / "sandboxes")
    pool.start()
    try:
        pool.want_vms("base", guests.launch)  # type: ignore[arg-type]
        assert [pool.take_prestarted("base") for _ in range(3)] == [None] * 3
        await until(pool.full, "the slot")
        await asyncio.sleep(0.1)
        assert guests.launched == [] and pool.sizes()["vms"] == 0
    finally:
        await pool.close()
