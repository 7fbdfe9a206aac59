"""Warm pool: network slots, disk overlays and pre-started QEMUs built ahead, so a restore does
not wait for them.

Slots are built with the default egress policy; a sandbox asking for another one gets the pooled
slot's rules replaced (an nftables update, cheaper than a new netns). Overlays are qcow2 files over
a template's disk, pre-created under `pool/` (on the sandboxes' filesystem) and renamed into the
sandbox's directory; a backing file is pooled once something was created on it. A background task
refills both up to their bounds. `close` (and any refill failure) drains everything: pooled slots
are destroyed and overlay files removed, so the pool never outlives the node agent.

A pre-started VM is a whole sandbox directory made ahead for a template (`.pool-*` beside the
sandboxes, so a restarted agent's recovery kills and removes it): its overlay, a slot, and a QEMU
waiting in `-incoming defer` with the template's memory mapped and its disk passed as an open
descriptor. A create renames the directory to the sandbox's (QEMU keeps its descriptors, so the
rename does not reach it) and only loads the template's device state.

A pre-started VM also becomes a fork's child (or a create from a snapshot) of its template: the
restore maps the snapshot's memory image over its RAM and puts the snapshot's disk layers under
its overlay before loading the device state (`QemuVm.repoint`), so no child waits for a QEMU to
start. The pool keeps as many per template as such restores recently asked for
(`snapshot_vms_per_template` caps it), beside the `vms_per_template` it always keeps.

A woken guest goes further: a pre-started VM whose guest was restored, ran one command through
envd (so the exec path is translated and faulted in, `VmWaker`) and was stopped, at a low CPU
weight the whole time. A create only continues it and gives envd the sandbox's identity. The
pool keeps as many per template as creates recently asked for (`Demand`, within
`guests_per_template`), while the host has `room()` for them, and lets them go otherwise. Each
pooled VM is popped by one take, so none is handed out twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkManager
from aenv_nodeagent.pool.demand import Demand
from aenv_nodeagent.vmm.driver import Vm

log = logging.getLogger(__name__)

VM_DIR_PREFIX = ".pool-"


@dataclass(frozen=True)
class PooledVm:
    directory: Path
    slot: NetSlot
    vm: Vm
    woken: bool = False  # restored, warmed and stopped: a take only continues it


# Prepares `directory` (its disk) and starts the QEMU waiting for the template's state.
VmLauncher = Callable[[Path, NetSlot], Awaitable[Vm]]
# Restores a pre-started VM's guest, warms it and stops it. :raise AenvError:
VmWaker = Callable[[PooledVm], Awaitable[None]]
# How often a pool holding woken guests checks whether it still should (demand, memory).
RECHECK_S = 5.0
# A template whose guest could not be woken is tried again after this long.
WAKE_RETRY_S = 60.0
# A VM is started between restores, not beside them, unless they go on longer than this; and
# not until SETTLE_S after the last one, when its sandbox's first commands run.
QUIET_WAIT_S = 5.0
SETTLE_S = 1.0


class WarmPool:
    def __init__(
        self, network: NetworkManager, root: Path, *, slots: int, overlays_per_backing: int,
        vms_per_template: int = 0, guests_per_template: int = 0,
        snapshot_vms_per_template: int = 0, vm_root: Path | None = None,
        room: Callable[[], bool] = lambda: True, demand: Demand | None = None,
        snapshot_demand: Demand | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._network = network
        self._root = root
        self._slot_target = slots
        self._overlay_target = overlays_per_backing
        self._vm_target = vms_per_template
        self._vm_root = vm_root or root
        self._room = room
        self._demand = demand or Demand(guests_per_template)
        # Restores from snapshots (fork children): they take pre-started VMs, never woken ones;
        # none beyond a base share of 0 (`vms_per_template` 0 turns pre-started VMs off).
        self._snapshot_demand = snapshot_demand or Demand(
            snapshot_vms_per_template if vms_per_template > 0 else 0)
        self._slots: list[NetSlot] = []
        self._overlays: dict[Path, list[Path]] = {}
        self._vms: dict[str, list[PooledVm]] = {}
        self._woken: dict[str, list[PooledVm]] = {}
        self._launchers: dict[str, VmLauncher] = {}
        self._wakers: dict[str, VmWaker] = {}
        self._clock = clock
        self._wake_again_at: dict[str, float] = {}
        self._discards: set[asyncio.Task[None]] = set()
        self.takes = {"woken": 0, "prestarted": 0, "missed": 0}
        self._wake = asyncio.Event()
        self._restoring = 0
        self._quiet_since = float("-inf")  # when the last restore ended (the loop's clock)
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._refiller: asyncio.Task[None] | None = None
        self._closed = False
        shutil.rmtree(root, ignore_errors=True)  # an earlier run's leftovers
        root.mkdir(parents=True, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return (self._slot_target > 0 or self._overlay_target > 0 or self._vm_target > 0
                or self._demand.cap > 0 or self._snapshot_demand.cap > 0)

    def start(self) -> None:
        if self.enabled and self._refiller is None:
            self._refiller = asyncio.ensure_future(self._refill_forever())

    def sizes(self) -> dict[str, int]:
        return {"slots": len(self._slots),
                "overlays": sum(len(files) for files in self._overlays.values()),
                "vms": sum(len(vms) for vms in self._vms.values()),
                "guests": sum(len(guests) for guests in self._woken.values())}

    @contextlib.contextmanager
    def restoring(self) -> Iterator[None]:
        """Around a restore: the pool starts no VM meanwhile nor for SETTLE_S after, for up to
        QUIET_WAIT_S (a QEMU's start takes the CPU the restore's guest wakes on and its first
        commands run on; a fork of 4 took ~35% longer beside the refill of the VMs its
        children took)."""
        self._restoring += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._restoring -= 1
            if not self._restoring:
                self._quiet_since = asyncio.get_running_loop().time()
                self._quiet.set()

    async def take_slot(self, policy: EgressPolicy) -> NetSlot:
        """A network slot enforcing `policy`: a pooled one when available."""
        if not self._slots:
            self._wake.set()
            return await self._network.create_slot(policy)
        slot = self._slots.pop()
        self._wake.set()
        try:
            await self.adopt_policy(slot, policy)
        except BaseException:
            await self._network.destroy_slot(slot)
            raise
        return slot

    async def adopt_policy(self, slot: NetSlot, policy: EgressPolicy) -> None:
        """Pooled slots (also those of pre-started VMs) enforce the default policy: another
        one replaces their rules."""
        if policy != EgressPolicy():
            await self._network.update_policy(slot, policy)

    async def take_overlay(self, backing: Path, destination: Path) -> None:
        """Put a fresh qcow2 overlay over `backing` at `destination`."""
        pooled = self._overlays.setdefault(backing, [])
        self._wake.set()
        if pooled:
            pooled.pop().rename(destination)
        else:
            await create_overlay(backing, destination)

    def want_vms(self, key: str, launcher: VmLauncher, waker: VmWaker | None = None) -> None:
        """Keep VMs pre-started for `key` (a template), made by `launcher`, and guests woken by
        `waker` as demand asks."""
        if key in self._launchers:
            return
        if (self._vm_target > 0 or self._snapshot_demand.cap > 0
                or (waker is not None and self._demand.cap > 0)):
            self._launchers[key] = launcher
            self._vms.setdefault(key, [])
            self._woken.setdefault(key, [])
            if waker is not None:
                self._wakers[key] = waker
            self._wake.set()

    def take_vm(self, key: str) -> PooledVm | None:
        """A woken guest of `key`, else a pre-started VM, now the caller's (None when none is
        ready)."""
        self._demand.took(key)
        self._wake.set()
        if woken := self._woken.get(key):
            self.takes["woken"] += 1
            return woken.pop()
        if pooled := self._vms.get(key):
            self.takes["prestarted"] += 1
            return pooled.pop()
        self.takes["missed"] += 1
        return None

    def take_prestarted(self, key: str) -> PooledVm | None:
        """A pre-started VM of `key` for a restore from one of its snapshots, now the caller's
        (None when none is ready). Demand for them grows the pool's share of `key`."""
        self._snapshot_demand.took(key)
        self._wake.set()
        if pooled := self._vms.get(key):
            self.takes["prestarted"] += 1
            return pooled.pop()
        self.takes["missed"] += 1
        return None

    def full(self) -> bool:
        """Whether every kind the pool keeps is at its target now (nothing left to refill)."""
        return (len(self._slots) >= self._slot_target
                and all(len(files) >= self._overlay_target
                        for backing, files in self._overlays.items() if backing.is_file())
                and all(len(self._vms[key]) >= self._vms_wanted(key) for key in self._launchers)
                and all(len(self._woken[key]) >= (self._demand.target(key) if self._room() else 0)
                        for key in self._wakers))

    async def forget_template(self, key: str, backing: Path) -> None:
        """The template is going away: its warm VMs are discarded and not made again, and the
        overlays over its disk dropped."""
        self._launchers.pop(key, None)
        self._wakers.pop(key, None)
        self._wake_again_at.pop(key, None)
        self._demand.forget(key)
        self._snapshot_demand.forget(key)
        vms = self._vms.pop(key, []) + self._woken.pop(key, [])
        await asyncio.gather(*(self._discard_vm(vm) for vm in vms), return_exceptions=True)
        self.forget_backing(backing)

    def forget_backing(self, backing: Path) -> None:
        """`backing` is going away: drop the overlays made over it."""
        for overlay in self._overlays.pop(backing, []):
            overlay.unlink(missing_ok=True)

    async def close(self) -> None:
        self._closed = True
        if self._refiller is not None:
            self._refiller.cancel()
            await asyncio.gather(self._refiller, return_exceptions=True)
            self._refiller = None
        await asyncio.gather(*self._discards, return_exceptions=True)
        await self._drain()

    async def _drain(self) -> None:
        slots, self._slots = self._slots, []
        kept = [*self._vms.values(), *self._woken.values()]
        vms = [vm for pooled in kept for vm in pooled]
        for pooled in kept:
            pooled.clear()
        await asyncio.gather(*(self._network.destroy_slot(s) for s in slots),
                             *(self._discard_vm(vm) for vm in vms), return_exceptions=True)
        for backing in list(self._overlays):
            self.forget_backing(backing)

    async def _discard_vm(self, pooled: PooledVm) -> None:
        """Ends the VM, its slot and directory, to the end even if the caller is cancelled (a
        close waits for it): a shutdown cut short would leave its QEMU running."""
        discard = asyncio.ensure_future(self._discard(pooled))
        self._discards.add(discard)
        discard.add_done_callback(self._discards.discard)
        await asyncio.shield(discard)

    async def _discard(self, pooled: PooledVm) -> None:
        try:
            await pooled.vm.shutdown()
        finally:
            await self._network.destroy_slot(pooled.slot)
            shutil.rmtree(pooled.directory, ignore_errors=True)

    async def _refill_forever(self) -> None:
        while not self._closed:
            # Cleared before the pass, not after: a take during the pass must trigger another.
            self._wake.clear()
            try:
                await self._refill()
            except asyncio.CancelledError:
                raise
            except Exception:
                # Never keep half-built resources around a failure: drain, retry on next use.
                log.exception("warm pool refill failed; drained")
                await self._drain()
                self._wake.clear()
            await self._idle()

    async def _idle(self) -> None:
        """Until a take (or a forget) asks for a refill; at most RECHECK_S while demand and the
        host's memory may change what the pool holds without one."""
        if not self._changes_untaken():
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), RECHECK_S)

    async def _refill(self) -> None:
        """One item at a time: the pool runs beside the work it speeds up."""
        while len(self._slots) < self._slot_target:
            self._slots.append(await self._network.create_slot(EgressPolicy()))
        for backing, pooled in list(self._overlays.items()):
            while len(pooled) < self._overlay_target and backing.is_file():
                overlay = self._root / f"{secrets.token_hex(8)}.qcow2"
                try:
                    await create_overlay(backing, overlay)
                except BaseException:
                    overlay.unlink(missing_ok=True)
                    raise
                if backing not in self._overlays:  # forgotten meanwhile
                    overlay.unlink(missing_ok=True)
                    break
                pooled.append(overlay)
        # Pre-started VMs first: cheap, and what a create takes while guests are being woken.
        for key, launcher in list(self._launchers.items()):
            vms = self._vms[key]
            while key in self._launchers and len(vms) > self._vms_wanted(key):
                await self._discard_vm(vms.pop(0))  # demand decayed: the oldest first
            while (key in self._launchers and len(self._vms[key]) < self._vms_wanted(key)
                   and not self._closed):
                started = await self._start_vm(launcher)
                if key in self._launchers:
                    self._vms[key].append(started)
                else:  # its template was evicted meanwhile
                    await self._discard_vm(started)
        for key in list(self._wakers):
            await self._refill_woken(key)

    def _changes_untaken(self) -> bool:
        """Whether what the pool should hold may change without a take: woken guests are kept,
        or pre-started VMs asked for beyond the base share (demand lapses, room comes and
        goes)."""
        return any(self._woken.values()) or any(
            len(self._vms[key]) > self._vm_target
            or self._snapshot_demand.target(key) > self._vm_target for key in self._launchers)

    def _vms_wanted(self, key: str) -> int:
        """Pre-started VMs to keep for `key`: always `vms_per_template`, more as restores from
        its snapshots asked for lately while the host has room."""
        asked = self._snapshot_demand.target(key) if self._room() else 0
        return max(self._vm_target, asked)

    async def _refill_woken(self, key: str) -> None:
        """Lets go of woken guests of `key` beyond its demand (all of them when the host lacks
        room), or wakes one more: one per pass, so that slots, overlays and other templates
        are refilled between two slow wakes."""
        woken = self._woken[key]
        while len(woken) > (self._demand.target(key) if self._room() else 0):
            await self._discard_vm(woken.pop(0))  # the oldest first
        if (key not in self._wakers or self._closed or not self._room()
                or len(woken) >= self._demand.target(key)
                or self._clock() < self._wake_again_at.get(key, 0.0)):
            return
        started = await self._start_vm(self._launchers[key])
        try:
            await self._wakers[key](started)
        except asyncio.CancelledError:  # the pool closes
            await self._discard_vm(started)
            raise
        except Exception:
            # Perhaps a host too busy for a guest at the least CPU share: later, not at once.
            log.warning("waking a pooled guest of %s failed; next try in %s s", key,
                        WAKE_RETRY_S, exc_info=True)
            self._wake_again_at[key] = self._clock() + WAKE_RETRY_S
            await self._discard_vm(started)
            return
        if key in self._wakers:
            woken.append(dataclasses.replace(started, woken=True))
            self._wake.set()  # another pass: perhaps more to wake
        else:  # its template was evicted meanwhile
            await self._discard_vm(started)

    async def _between_restores(self) -> None:
        """Until no restore has run for SETTLE_S, or for QUIET_WAIT_S at most."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + QUIET_WAIT_S
        while (left := deadline - loop.time()) > 0:
            try:
                await asyncio.wait_for(self._quiet.wait(), left)
            except TimeoutError:
                return
            settle = self._quiet_since + SETTLE_S - loop.time()
            if settle <= 0:
                return
            await asyncio.sleep(min(settle, left))

    async def _start_vm(self, launcher: VmLauncher) -> PooledVm:
        await self._between_restores()
        directory = self._vm_root / f"{VM_DIR_PREFIX}{secrets.token_hex(8)}"
        directory.mkdir(parents=True)
        try:
            slot = await self._network.create_slot(EgressPolicy())
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        try:
            return PooledVm(directory, slot, await launcher(directory, slot))
        except BaseException:
            await self._network.destroy_slot(slot)
            shutil.rmtree(directory, ignore_errors=True)
            raise
