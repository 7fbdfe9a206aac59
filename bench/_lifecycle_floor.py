"""The floor of the lifecycle benchmark: bare QEMU + QMP over the template's files, no services."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
from _lifecycle_workload import (
    DIRTY,
    FORK_ROUNDS,
    FORKS,
    ROUNDS,
    fork_summary,
    guest_sh,
    settle_host_writeback,
    template_store,
)
from _qemu_memory import child_memory
from _stats import summary_ms

from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.network import (
    EgressPolicy,
    NetSlot,
    NetworkConfig,
    NetworkManager,
    netns_exec_prefix,
)
from aenv_nodeagent.server import base_template_inputs
from aenv_nodeagent.templates import TemplateInputs, TemplateSnapshot, vm_spec
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.vmm import QemuVm, detect_accelerator


class RawFloor:
    """Bare QEMU + QMP over the template's files, one netns per VM, no services."""

    def __init__(
        self,
        inputs: TemplateInputs,
        snap: TemplateSnapshot,
        network: NetworkManager,
        session: aiohttp.ClientSession,
        work: Path,
    ) -> None:
        self.inputs, self.snap, self.network, self.session, self.work = (
            inputs,
            snap,
            network,
            session,
            work,
        )
        self.envd = EnvdClient(session)
        self._n = 0

    async def restore(self, slot: NetSlot, state: Path, disk: Path) -> tuple[QemuVm, float, float]:
        """Launch + load `state` + cont; then wait for envd. Returns (vm, host s, wake-up s)."""
        self._n += 1
        t0 = time.perf_counter()
        vm = await QemuVm.launch(
            vm_spec(self.inputs, disk, self.snap.memory, mem_shared=False),
            self.work / f"vm{self._n}",
            incoming=True,
            argv_prefix=netns_exec_prefix(slot),
        )
        try:
            await vm.restore(state)
            t1 = time.perf_counter()
            await self.envd.wait_healthy(slot.ns_ip, 300)
        except BaseException:
            await vm.shutdown()
            raise
        return vm, t1 - t0, time.perf_counter() - t1

    async def overlay(self, name: str, backing: Path) -> Path:
        disk = self.work / f"{name}.qcow2"
        await create_overlay(backing, disk)
        return disk

    async def pause_resume_snapshot(self, slot: NetSlot) -> dict[str, object]:
        """Pause/resume rounds on a fresh VM, then snapshot rounds after the same dirtying as
        the node agent's (the order of the node agent's runs)."""
        disk = await self.overlay("pr", self.snap.disk)
        vm, _, _ = await self.restore(slot, self.snap.state, disk)
        pauses, resumes, host, wake, snaps = [], [], [], [], []
        try:
            for _ in range(ROUNDS):
                state = self.work / "paused"
                t0 = time.perf_counter()
                await vm.capture(state)
                await vm.shutdown()
                pauses.append(time.perf_counter() - t0)
                vm, h, w = await self.restore(slot, state, disk)
                resumes.append(h + w)
                host.append(h)
                wake.append(w)
            for i in range(ROUNDS):
                await guest_sh(self.session, slot.ns_ip, "", DIRTY)
                await settle_host_writeback()
                t0 = time.perf_counter()
                await vm.pause()
                await vm.capture(self.work / f"snap{i}")
                await vm.resume()
                snaps.append(time.perf_counter() - t0)
                (self.work / f"snap{i}").unlink()
        finally:
            await vm.shutdown()
        return {
            "pause": summary_ms(pauses),
            "resume_to_ready": summary_ms(resumes),
            "resume_host_side": summary_ms(host),
            "resume_guest_wakeup": summary_ms(wake),
            # The floor's guest is stopped for the whole of its snapshot.
            "snapshot_call": summary_ms(snaps),
            "snapshot_guest_stopped": summary_ms(snaps),
        }

    async def fork(self, count: int) -> dict[str, object]:
        took_s, memories = [], []
        for round_ in range(FORK_ROUNDS):
            took, memory = await self._fork_once(count, round_)
            took_s.append(took)
            memories.append(memory)
        summary: dict[str, object] = fork_summary(count, took_s, memories)
        return summary

    async def _fork_once(self, count: int, round_: int) -> tuple[float, dict[str, float | None]]:
        slots = await asyncio.gather(
            *(self.network.create_slot(EgressPolicy()) for _ in range(count))
        )
        vms: list[QemuVm] = []
        disks: list[Path] = []
        try:
            disks = await asyncio.gather(
                *(self.overlay(f"f{count}-{round_}-{i}", self.snap.disk) for i in range(count))
            )
            t0 = time.perf_counter()
            done = await asyncio.gather(
                *(self.restore(s, self.snap.state, d) for s, d in zip(slots, disks, strict=True))
            )
            took = time.perf_counter() - t0
            vms = [vm for vm, _, _ in done]
            memory = child_memory([vm.pid for vm in vms])
        finally:
            await asyncio.gather(*(vm.shutdown() for vm in vms))
            await asyncio.gather(*(self.network.destroy_slot(s) for s in slots))
            for disk in disks:
                disk.unlink(missing_ok=True)
        return took, memory


async def floor_runs(session: aiohttp.ClientSession, work: Path) -> dict[str, object]:
    settings = NodeAgentSettings()
    inputs = await base_template_inputs(settings, detect_accelerator(None))
    network = NetworkManager(NetworkConfig(prefix="alcf", pool_cidr="10.218.0.0/24"))
    templates = template_store(settings, network, session)
    templates.register(inputs)
    work.mkdir(parents=True, exist_ok=True)
    floor = RawFloor(inputs, await templates.get(BASE_TEMPLATE), network, session, work)
    slot = await network.create_slot(EgressPolicy())
    try:
        out = await floor.pause_resume_snapshot(slot)
    finally:
        await network.destroy_slot(slot)
    out["fork"] = [await floor.fork(n) for n in FORKS]
    return out
