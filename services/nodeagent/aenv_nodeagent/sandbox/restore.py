"""The one restore pipeline: every sandbox that gets a VM gets it here.

A create from a template (a restore of the template's snapshot), a create from a snapshot, a
fork's children, a resume and a reset all run the same steps, with one undo stack:

    slot ∥ overlay → volume relay → QEMU (pre-started from the warm pool, re-pointed at a
    snapshot's memory image and layers for a restore of one, or launched now) → device state
    → envd /init, its first request (clock, entropy, this sandbox's token, its volume mounts)
    → record → publish (with its event: READY, RESUMED, UPDATED for a reset, in the record's
    own etcd transaction, sandbox/events.py)

What differs between them is the plan, one kind per case (sandbox/plans.py; sandbox/sources.py
makes them): where the sandbox's directory is and whether the restore makes it, what its disk
overlay stands on, the image its RAM comes back from (none: a cold boot), and whether it keeps a
network slot it has.
Whatever fails is undone in reverse, so a failed restore leaves nothing but what it was given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, Internal
from aenv_nodeagent.disks import create_overlay, rename_backing
from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.network import EgressPolicy, NetSlot
from aenv_nodeagent.phases import PhaseTimer, Undo
from aenv_nodeagent.pool import PooledVm, WarmPool
from aenv_nodeagent.sandbox.context import AllocationChanged, WingContext
from aenv_nodeagent.sandbox.model import BOOT_RAM, DISK, RestoreImage, Sandbox
from aenv_nodeagent.sandbox.plans import (
    FromSnapshot,
    FromTemplate,
    Reset,
    RestorePlan,
    backing_of,
    makes_directory,
)
from aenv_nodeagent.sandbox.pooled_guests import TemplateGuests, continue_woken
from aenv_nodeagent.sandbox.records import egress_policy
from aenv_nodeagent.templates.launch import boot_from_disk, launch_restore_target
from aenv_nodeagent.vmm.driver import Vm, VmmDriver
from aenv_nodeagent.volumes import VolumeRelays, envd_mounts
from aenv_nodeagent.volumes.endpoint import NO_SNAPSTORE

log = logging.getLogger(__name__)


class Restorer:
    """Runs restore plans on this node."""

    def __init__(
        self, wing: WingContext, driver: VmmDriver, *, pool: WarmPool | None = None,
        relays: VolumeRelays | None = None, commands: GuestCommands | None = None,
    ) -> None:
        self._registry = wing.registry
        self._events = wing.events
        self._relays = relays  # None: no snapstore, no volumes
        self._templates = wing.templates
        self._network = wing.network
        self._envd = wing.envd
        self._driver = driver
        self._allocation_changed = AllocationSoon(wing.allocation_changed)
        self._settings = wing.settings
        self._pool = pool
        self._guests = TemplateGuests(wing.templates, driver, wing.envd, commands,
                                      ready_timeout_s=wing.settings.ready_timeout_s)

    async def restore(
        self, plan: RestorePlan, timer: PhaseTimer, *,
        event: cluster_pb2.SandboxEventType = cluster_pb2.SANDBOX_EVENT_TYPE_READY,
        detail: str = "", related: Sequence[str] = (),
    ) -> Sandbox:
        """The sandbox of `plan`, running, registered and published with its `event`.

        :raise AenvError: a step failed; everything the restore made is undone.
        """
        with self._pool.restoring() if self._pool is not None else contextlib.nullcontext():
            return await self._restore(plan, timer, event, detail, related)

    async def _restore(
        self, plan: RestorePlan, timer: PhaseTimer, event: cluster_pb2.SandboxEventType,
        detail: str, related: Sequence[str],
    ) -> Sandbox:
        relays = self._relays_for(plan)
        undo = Undo()
        self._registry.restoring(plan.sandbox_id, plan.chain)  # before any await: its layers stay
        undo.push(lambda: self._registry.restore_ended(plan.sandbox_id))
        try:
            pooled = self._pooled(plan)
            adopting: asyncio.Future[None] | None = None
            if pooled is not None:
                slot, vm = self._take_pooled(plan, pooled, undo)
                adopting = self._adopt_policy(plan, slot, timer, undo)
                await self._start_relay(relays, plan, slot, timer, undo)
                image = await plan.image(plan.directory)
                if isinstance(plan, FromSnapshot):
                    vm = await self._repointed(plan, image, vm, slot, timer, undo)
            else:
                slot = await self._prepare(plan, timer, undo)
                image = await plan.image(plan.directory)
                await self._start_relay(relays, plan, slot, timer, undo)
                vm = await self._launch(plan, image, slot, timer)
                undo.push(vm.shutdown)
            await self._wake(vm, slot, image, plan.record, timer,
                             woken=pooled is not None and pooled.woken)
            if adopting is not None:
                await adopting
            sandbox = Sandbox(plan.record, slot, vm, plan.directory, timer.phases_ms)
            self._registry.add_running(sandbox, plan.chain)
            undo.push(lambda: self._registry.remove_running(plan.sandbox_id))
            await timer.timed("publish", self._events.publish(
                plan.record, event, detail=detail, related=related))
        except BaseException:
            await undo.run()
            raise
        self._allocation_changed()
        return sandbox

    def _relays_for(self, plan: RestorePlan) -> VolumeRelays | None:
        """The relays when the sandbox mounts volumes, checked before anything is made.

        :raise Conflict: it mounts volumes and this node has no snapstore.
        """
        if not plan.record.volume_mounts:
            return None
        if self._relays is None or not self._relays.endpoint.configured:
            raise Conflict(NO_SNAPSTORE)
        return self._relays

    async def _start_relay(
        self, relays: VolumeRelays | None, plan: RestorePlan, slot: NetSlot, timer: PhaseTimer,
        undo: Undo,
    ) -> None:
        """The sandbox's volume relay in its slot, before its guest runs (its kernel's NFS
        client re-dials at once when it comes back from memory)."""
        if relays is None:
            return
        await timer.timed("volume_relay", relays.start(slot.netns, plan.record.volume_mounts))
        undo.push(lambda: relays.stop(slot.netns))

    def _pooled(self, plan: RestorePlan) -> PooledVm | None:
        if self._pool is None:
            return None
        if isinstance(plan, FromSnapshot) and plan.has_memory:
            return self._pool.take_prestarted(plan.chain.template_id)
        if not isinstance(plan, FromTemplate):
            return None
        template = plan.template
        self._pool.want_vms(template.template_id, self._guests.launcher(template),
                            self._guests.waker(template))
        return self._pool.take_vm(template.template_id)

    async def _repointed(
        self, plan: FromSnapshot, image: RestoreImage, vm: Vm, slot: NetSlot, timer: PhaseTimer,
        undo: Undo,
    ) -> Vm:
        """The pre-started VM made the snapshot's restore target: its overlay renamed onto the
        snapshot's top layer, the snapshot's memory image mapped over its RAM and its layers put
        under the overlay. One that cannot be is ended and a VM launched as without the pool."""
        assert image.memory is not None
        try:
            await timer.timed("repoint", self._repoint(plan, image.memory, vm))
            return vm
        except Internal as err:  # RemapFailed, or an overlay that could not be renamed
            log.warning("a pre-started VM could not be re-pointed at a snapshot; launching one",
                        extra={"sandbox_id": plan.sandbox_id, "error": str(err)})
        await vm.shutdown()
        await timer.timed("overlay", create_overlay(plan.backing, plan.directory / DISK))
        launched = await self._launch(plan, image, slot, timer)
        undo.push(launched.shutdown)
        return launched

    async def _repoint(self, plan: FromSnapshot, memory: Path, vm: Vm) -> None:
        await rename_backing(plan.directory / DISK, plan.backing)
        await vm.repoint(memory, plan.chain.top_node, plan.backing)

    def _take_pooled(
        self, plan: RestorePlan, pooled: PooledVm, undo: Undo
    ) -> tuple[NetSlot, Vm]:
        undo.push(lambda: shutil.rmtree(pooled.directory, ignore_errors=True))
        undo.push(lambda: shutil.rmtree(plan.directory, ignore_errors=True))
        undo.push(lambda: self._network.destroy_slot(pooled.slot))
        undo.push(pooled.vm.shutdown)
        pooled.directory.rename(plan.directory)
        return pooled.slot, pooled.vm

    def _adopt_policy(
        self, plan: RestorePlan, slot: NetSlot, timer: PhaseTimer, undo: Undo
    ) -> asyncio.Future[None]:
        """The sandbox's egress rules in place of the pool's (one nft transaction: 20-50 ms on a
        loaded host), made while its guest wakes rather than before: the guest runs nothing of
        the sandbox's until the create is answered, and the host's and the volume relay's
        traffic to it pass whichever rules hold (network/firewall.py). A failed restore waits
        for it before the slot goes."""
        assert self._pool is not None
        adopting = asyncio.ensure_future(timer.timed("pooled_vm", self._pool.adopt_policy(
            slot, egress_policy(plan.record.network, plan.record.owner_key_id))))

        async def settled() -> None:
            await asyncio.wait([adopting])
            if not adopting.cancelled():
                adopting.exception()  # (retrieved: the restore's own error is the one raised)

        undo.push(settled)
        return adopting

    async def _prepare(self, plan: RestorePlan, timer: PhaseTimer, undo: Undo) -> NetSlot:
        """The directory, and the slot built while the overlay is made."""
        if makes_directory(plan):
            plan.directory.mkdir(parents=True, exist_ok=False)
            undo.push(lambda: shutil.rmtree(plan.directory, ignore_errors=True))
        kept, slot_task = plan.slot if isinstance(plan, Reset) else None, None
        if kept is None:
            policy = egress_policy(plan.record.network, plan.record.owner_key_id)
            slot_task = asyncio.ensure_future(timer.timed("network", self._new_slot(policy)))
        try:
            if (backing := backing_of(plan)) is not None:
                await timer.timed("overlay", self._overlay(plan, backing))
        finally:
            if slot_task is not None:
                # Built meanwhile: whatever happened to the overlay, it is undone with the rest.
                kept = new = await slot_task
                undo.push(lambda: self._network.destroy_slot(new))
        assert kept is not None
        return kept

    async def _new_slot(self, policy: EgressPolicy) -> NetSlot:
        if self._pool is not None:
            return await self._pool.take_slot(policy)
        return await self._network.create_slot(policy)

    async def _overlay(self, plan: RestorePlan, backing: Path) -> None:
        target = plan.directory / DISK
        if self._pool is not None and isinstance(plan, FromTemplate):
            await self._pool.take_overlay(backing, target)  # templates' overlays are pooled
        else:
            await create_overlay(backing, target)

    async def _launch(
        self, plan: RestorePlan, image: RestoreImage, slot: NetSlot, timer: PhaseTimer
    ) -> Vm:
        if image.boots:
            return await timer.timed("boot", boot_from_disk(
                self._driver, image.inputs, plan.directory, slot, plan.chain.active,
                plan.directory / BOOT_RAM))
        assert image.memory is not None
        return await timer.timed("launch", launch_restore_target(
            self._driver, image.inputs, plan.directory, image.memory, slot, plan.chain.active))

    async def _wake(
        self, vm: Vm, slot: NetSlot, image: RestoreImage, record: cluster_pb2.SandboxRecord,
        timer: PhaseTimer, *, woken: bool,
    ) -> None:
        """Load the device state (unless it boots, or the pool woke it), wait for envd and give
        it the sandbox's identity; the record gets the envd version that answered."""
        if woken:
            await timer.timed("cont", continue_woken(vm))
        else:
            await self._load(vm, image, timer)
        # Its first request (no /health before it): it waits for envd as long as a probe would.
        # Many guests woken at once (a fork) share the host's CPUs.
        record.envd_version = await timer.timed("envd_init", self._envd.init(
            slot.ns_ip, env_vars=identity_env(record) | dict(record.env_vars),
            access_token=record.envd_access_token,
            current_token=image.guest_token or None,
            volume_mounts=envd_mounts(record.volume_mounts),
            timeout_s=(self._settings.boot_timeout_s if image.boots
                       else self._settings.ready_timeout_s),
        ))

    async def _load(self, vm: Vm, image: RestoreImage, timer: PhaseTimer) -> None:
        """The guest's memory and device state into the waiting VM (a boot has none)."""
        if image.boots:
            return
        state = image.state
        if state is None and image.later_state is not None:
            state = await timer.timed("memory_image", image.later_state())
        if state is not None:
            await timer.timed("restore", vm.restore(state))


class AllocationSoon:
    """The node's allocation (its record in etcd) published after the restore is answered, not
    before: it only ends early the scheduler's reservation for the sandbox, which holds its
    room meanwhile (aenv_scheduler/reservations.py). One write at a time, and one more when
    restores ended during it (that one carries them all): a burst writes twice, not once each."""

    def __init__(self, publish: AllocationChanged) -> None:
        self._publish = publish  # never raises (context.py: the heartbeat writes it again)
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def __call__(self) -> None:
        self._again = True
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._again:
            self._again = False
            await self._publish()


def identity_env(record: cluster_pb2.SandboxRecord) -> dict[str, str]:
    """E2B's default variables: every process of the sandbox knows it is one, and which (a
    fork's child or a create from a snapshot gets its own, not its source's). The sandbox's own
    variables come after them. The template is E2B's: a built one's catalog id, not the build
    this node restores."""
    return {"E2B_SANDBOX": "true", "E2B_SANDBOX_ID": record.sandbox_id,
            "E2B_TEMPLATE_ID": record.catalog_template_id or record.template_id}
