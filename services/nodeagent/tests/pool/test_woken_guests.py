"""The warm pool's woken guests, over fakes: kept by demand and room, each handed out once,
preferred to pre-started VMs, let go when their template goes or memory is short, and a
template whose guests cannot be woken keeps its pre-started VMs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest_asyncio

from aenv_common.errors import Unavailable
from aenv_nodeagent.network import NetSlot
from aenv_nodeagent.pool import Demand, PooledVm, WarmPool

from ..fakes.network import FakeNetwork


class PoolVm:
    """What the pool needs of a VM: that it can be shut down."""

    def __init__(self) -> None:
        self.shut = False

    async def shutdown(self, grace: float = 2.0) -> None:
        self.shut = True


class Guests:
    def __init__(self) -> None:
        self.launched: list[PoolVm] = []
        self.woken: list[PooledVm] = []
        self.fail_wake = False

    async def launch(self, directory: Path, slot: NetSlot) -> PoolVm:
        vm = PoolVm()
        self.launched.append(vm)
        return vm

    async def wake(self, pooled: PooledVm) -> None:
        await asyncio.sleep(0)
        if self.fail_wake:
            raise Unavailable("envd did not answer")
        self.woken.append(pooled)


class Room:
    def __init__(self) -> None:
        self.free = True

    def __call__(self) -> bool:
        return self.free


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@pytest_asyncio.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[WarmPool, FakeNetwork, Guests, Room]]:
    network, guests, room = FakeNetwork(), Guests(), Room()
    pool = WarmPool(network, tmp_path / "pool", slots=0, overlays_per_backing=0,  # type: ignore[arg-type]
                    vms_per_template=1, vm_root=tmp_path / "sandboxes", room=room,
                    demand=Demand(3, window_s=60))
    pool.start()
    try:
        yield pool, network, guests, room
    finally:
        await pool.close()
    assert network.live == []
    assert list((tmp_path / "sandboxes").iterdir()) == []


def want(pool: WarmPool, guests: Guests) -> None:
    pool.want_vms("base", guests.launch, guests.wake)  # type: ignore[arg-type]


async def test_guests_are_woken_as_creates_ask_and_handed_out_once(
    parts: tuple[WarmPool, FakeNetwork, Guests, Room],
) -> None:
    pool, network, guests, _ = parts
    want(pool, guests)
    assert pool.take_vm("base") is None  # the first create finds nothing
    await until(lambda: pool.sizes()["guests"] == 1 and pool.sizes()["vms"] == 1, "a refill")
    taken = [pool.take_vm("base"), pool.take_vm("base")]
    assert [t.woken for t in taken if t] == [True, False]  # woken first, then pre-started
    assert taken[0] is not taken[1]
    # Three asked within the window: three woken kept, each a different VM and directory.
    await until(lambda: pool.sizes()["guests"] == 3, "the demand's three")
    handed = [pool.take_vm("base") for _ in range(3)]
    assert all(h is not None and h.woken for h in handed)
    assert len({id(h) for h in handed}) == 3
    assert len({h.directory for h in handed if h}) == 3
    assert pool.takes == {"woken": 4, "prestarted": 1, "missed": 1}
    await release(network, [h for h in [*taken, *handed] if h is not None])


async def test_guests_go_when_their_template_does_or_memory_is_short(
    parts: tuple[WarmPool, FakeNetwork, Guests, Room],
) -> None:
    pool, network, guests, room = parts
    want(pool, guests)
    taken = [pool.take_vm("base") for _ in range(2)]
    await until(lambda: pool.sizes()["guests"] == 2, "two woken")
    room.free = False
    taken.append(pool.take_vm("base"))  # anything that wakes the refiller; RECHECK_S would too
    await until(lambda: pool.sizes()["guests"] == 0, "let go under memory pressure")
    room.free = True
    taken.append(pool.take_vm("base"))
    await until(lambda: pool.sizes()["guests"] >= 1, "woken again")
    await pool.forget_template("base", Path("/nonexistent/disk.qcow2"))
    assert pool.sizes()["guests"] == 0 and pool.sizes()["vms"] == 0
    handed = [t for t in taken if t is not None]
    kept = [vm for vm in guests.launched if all(id(vm) != id(h.vm) for h in handed)]
    assert kept and all(vm.shut for vm in kept)  # every VM the pool still held is shut down
    await asyncio.sleep(0.05)
    assert pool.take_vm("base") is None  # not made again for a forgotten template
    await release(network, handed)


async def release(network: FakeNetwork, handed: list[PooledVm]) -> None:
    """What a create that took them would end: their VMs, slots and directories."""
    for h in handed:
        await h.vm.shutdown()
        await network.destroy_slot(h.slot)
        h.directory.rmdir()


async def test_a_template_that_could_not_be_woken_keeps_pre_started_vms_then_tries_again(
    tmp_path: Path,
) -> None:
    network, guests, now = FakeNetwork(), Guests(), [0.0]
    pool = WarmPool(network, tmp_path / "pool", slots=0, overlays_per_backing=0,  # type: ignore[arg-type]
                    vms_per_template=1, vm_root=tmp_path / "sandboxes",
                    demand=Demand(2, clock=lambda: now[0]), clock=lambda: now[0])
    pool.start()
    try:
        guests.fail_wake = True
        want(pool, guests)
        pool.take_vm("base")
        await until(lambda: pool.sizes()["vms"] == 1 and any(vm.shut for vm in guests.launched),
                    "a pre-started VM, and the guest that failed to wake discarded")
        assert pool.sizes()["guests"] == 0
        taken = pool.take_vm("base")
        assert taken is not None and not taken.woken
        await release(network, [taken])
        guests.fail_wake = False
        await asyncio.sleep(0.05)
        assert pool.sizes()["guests"] == 0  # not before WAKE_RETRY_S
        now[0] += 61
        again = pool.take_vm("base")
        assert again is not None and not again.woken  # the pre-started VM made meanwhile
        await release(network, [again])
        await until(lambda: pool.sizes()["guests"] >= 1, "woken on the next try")
    finally:
        await pool.close()
    assert network.live == []


async def test_no_guests_are_woken_with_a_zero_cap(tmp_path: Path) -> None:
    network, guests = FakeNetwork(), Guests()
    pool = WarmPool(network, tmp_path / "pool", slots=0, overlays_per_backing=0,  # type: ignore[arg-type]
                    guests_per_template=0, vm_root=tmp_path / "sandboxes")
    pool.start()
    try:
        want(pool, guests)
        assert pool.take_vm("base") is None
        await asyncio.sleep(0.05)
        assert guests.launched == [] and pool.sizes()["guests"] == 0
    finally:
        await pool.close()
