"""A create that takes a woken guest from the warm pool: the sandbox's egress rules replace the
pool's while its guest is continued and given its identity, not before; the create is answered
once both are done; a wake that fails waits for the rules before its slot is taken back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Unavailable
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.guest_commands import CommandSpec, GuestCommands
from aenv_nodeagent.network import EgressPolicy, NetSlot
from aenv_nodeagent.pool import PooledVm, VmLauncher, VmWaker, WarmPool
from aenv_nodeagent.sandbox.pooled_guests import TemplateGuests
from aenv_nodeagent.templates import TemplateStore

from ..fakes.records import RecordingRecords
from ..fakes.templates import FakeTemplates
from ..fakes.vm import FakeVm
from .conftest import TEMPLATE, Wing, build_wing

OPEN = cluster_pb2.NetworkPolicy(allow_internet_access=True)


class HeldPool:
    """The warm pool as the restore pipeline sees it, holding one woken guest; the adoption
    of a sandbox's egress rules waits at `gate`."""

    def __init__(self) -> None:
        self.guests: list[PooledVm] = []
        self.gate = asyncio.Event()
        self.adopting = asyncio.Event()
        self.slot_live_at_adoption: bool | None = None
        self.wing: Wing | None = None

    async def stock(self, wing: Wing, root: Path) -> PooledVm:
        """A woken guest of the template, made as the pool makes one (its wake is a fake's)."""
        self.wing = wing
        slot = await wing.network.create_slot(EgressPolicy())
        directory = root / ".pool-1"
        directory.mkdir(parents=True)
        guests = TemplateGuests(cast(TemplateStore, wing.templates), wing.driver,
                                cast(EnvdClient, wing.envd), None, ready_timeout_s=5)
        vm = await guests.launcher(wing.template)(directory, slot)
        self.guests.append(pooled := PooledVm(directory, slot, vm, woken=True))
        return pooled

    def want_vms(self, key: str, launcher: VmLauncher, waker: VmWaker | None = None) -> None:
        return None

    def take_vm(self, key: str) -> PooledVm | None:
        return self.guests.pop() if self.guests else None

    def restoring(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    async def adopt_policy(self, slot: NetSlot, policy: EgressPolicy) -> None:
        assert self.wing is not None
        self.adopting.set()
        await self.gate.wait()
        self.slot_live_at_adoption = slot in self.wing.network.live
        await self.wing.network.update_policy(slot, policy)


@pytest.fixture
async def pooled(
    tmp_path: Path, templates: FakeTemplates
) -> AsyncIterator[tuple[Wing, HeldPool, PooledVm]]:
    pool = HeldPool()
    wing = build_wing(tmp_path / "state", RecordingRecords(), templates,
                      await templates.get(TEMPLATE), cast(WarmPool, pool))
    guest = await pool.stock(wing, tmp_path / "state" / "sandboxes")
    yield wing, pool, guest
    pool.gate.set()
    await wing.service.destroy_all()
    await wing.relays.close()


async def test_the_guest_wakes_while_its_egress_rules_are_replaced(
    pooled: tuple[Wing, HeldPool, PooledVm],
) -> None:
    wing, pool, guest = pooled
    spec = wing.spec(network=OPEN)
    init = wing.envd.hold("init")
    create = asyncio.ensure_future(wing.service.creates.create(spec))
    # The guest is given its identity while the pool's rules are still being replaced.
    await asyncio.wait_for(asyncio.gather(pool.adopting.wait(), wing.envd.held("init")), 10)
    init.set()
    with pytest.raises(TimeoutError):  # not answered before the sandbox's rules hold
        await asyncio.wait_for(asyncio.shield(create), 0.2)
    pool.gate.set()
    sandbox = await asyncio.wait_for(create, 10)
    assert sandbox.vm is guest.vm and {"cont", "envd_init", "pooled_vm"} <= set(
        sandbox.timings_ms)
    assert wing.network.policies[guest.slot.netns].network == OPEN
    assert wing.records.states(spec.sandbox_id) == [cluster_pb2.SANDBOX_STATE_RUNNING]


async def test_a_failed_wake_takes_the_slot_back_only_after_its_rules_are_in(
    pooled: tuple[Wing, HeldPool, PooledVm],
) -> None:
    wing, pool, guest = pooled
    wing.envd.fail_on["init"] = Unavailable("envd did not answer")
    create = asyncio.ensure_future(wing.service.creates.create(wing.spec(network=OPEN)))
    await asyncio.wait_for(pool.adopting.wait(), 10)
    with pytest.raises(TimeoutError):  # its undo waits for the adoption in flight
        await asyncio.wait_for(asyncio.shield(create), 0.2)
    assert guest.slot in wing.network.live
    pool.gate.set()
    with pytest.raises(Unavailable):
        await asyncio.wait_for(create, 10)
    assert pool.slot_live_at_adoption is True
    assert guest.slot not in wing.network.live
    assert wing.driver.launched[0].stopping
    assert list((wing.state_dir / "sandboxes").iterdir()) == []


class RecordingCommands:
    def __init__(self) -> None:
        self.ran: list[str] = []

    async def run(self, host: str, spec: CommandSpec, *, timeout_s: float) -> None:
        self.ran.append(host)


async def test_a_guest_is_warmed_by_an_init_of_nothing_before_it_stops(
    wing: Wing, tmp_path: Path
) -> None:
    commands = RecordingCommands()
    guests = TemplateGuests(cast(TemplateStore, wing.templates), wing.driver,
                            cast(EnvdClient, wing.envd), cast(GuestCommands, commands),
                            ready_timeout_s=5)
    slot = await wing.network.create_slot(EgressPolicy())
    directory = tmp_path / "pool" / ".pool-1"
    directory.mkdir(parents=True)
    vm = await guests.launcher(wing.template)(directory, slot)
    waker = guests.waker(wing.template)
    assert waker is not None
    try:
        init = wing.envd.hold("init")
        waking = asyncio.ensure_future(waker(PooledVm(directory, slot, vm)))
        await asyncio.wait_for(wing.envd.held("init"), 10)
        # After its warm-up command, before it stops: /init's path runs in this very guest.
        assert commands.ran == [slot.ns_ip] and "pause" not in cast(FakeVm, vm).methods_called
        init.set()
        await asyncio.wait_for(waking, 10)
        assert cast(FakeVm, vm).methods_called[-1] == "pause"
        # An /init of nothing: no token, no variable for a sandbox to find.
        assert [c.access_token for c in wing.envd.calls if c.method == "init"] == [""]
        assert wing.envd.env_vars[slot.ns_ip] == {}
    finally:
        await vm.shutdown()
        await wing.network.destroy_slot(slot)
