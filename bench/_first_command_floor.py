"""The floor of the time-to-first-command benchmark: the base template's snapshot restored by bare
QEMU + QMP in a prepared netns (no gateway, scheduler, etcd or node agent), then one process run
by that guest's envd directly (Connect `process.Process/Start` over HTTP, as the SDK calls it),
until its result. Floor = restore + first command in a bare guest."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from _lifecycle_floor import RawFloor
from _lifecycle_workload import guest_sh, template_store

from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkConfig, NetworkManager
from aenv_nodeagent.server import base_template_inputs
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.vmm import detect_accelerator

# What each side's first command runs: the native client's `run` is `sh -c CMD`; the E2B SDK's
# `commands.run` is `bash -l -c CMD` (the floor execs it from sh, a few ms more).
SH_TRUE = "true"
BASH_LOGIN_TRUE = "exec /bin/bash -l -c true"


class FirstCommandFloor:
    """Restores of the template in bare QEMU, each timed to its first command's result."""

    def __init__(self, raw: RawFloor, network: NetworkManager) -> None:
        self.raw, self.network = raw, network

    async def _first(self, slot: NetSlot, state: Path, disk: Path, script: str) -> float:
        t0 = time.perf_counter()
        vm, _, _ = await self.raw.restore(slot, state, disk)
        try:
            await guest_sh(self.raw.session, slot.ns_ip, "", script)
            return time.perf_counter() - t0
        finally:
            await vm.shutdown()

    async def concurrent(self, count: int, script: str) -> tuple[list[float], float]:
        """`count` restores of the template at once (their netns and overlays made first, as the
        node agent's pool has them ready): each one's seconds to its command's result, and the
        wall time until the last."""
        slots: list[NetSlot] = []
        try:
            for _ in range(count):
                slots.append(await self.network.create_slot(EgressPolicy()))
            disks = await asyncio.gather(
                *(self.raw.overlay(f"c{count}-{i}-{time.monotonic_ns()}", self.raw.snap.disk)
                  for i in range(count))
            )
            t0 = time.perf_counter()
            each = await asyncio.gather(
                *(self._first(s, self.raw.snap.state, d, script)
                  for s, d in zip(slots, disks, strict=True))
            )
            return list(each), time.perf_counter() - t0
        finally:
            await asyncio.gather(*(self.network.destroy_slot(s) for s in slots))

    async def resume(self, script: str) -> float:
        """A guest restored, captured and quit (a pause), then restored from that capture: the
        seconds from the second restore's start to its first command's result."""
        slot = await self.network.create_slot(EgressPolicy())
        try:
            disk = await self.raw.overlay(f"r-{time.monotonic_ns()}", self.raw.snap.disk)
            vm, _, _ = await self.raw.restore(slot, self.raw.snap.state, disk)
            state = disk.with_suffix(".paused")
            try:
                await vm.capture(state)
            finally:
                await vm.shutdown()
            try:
                return await self._first(slot, state, disk, script)
            finally:
                state.unlink(missing_ok=True)
        finally:
            await self.network.destroy_slot(slot)


@asynccontextmanager
async def first_command_floor(
    cache_dir: Path, work: Path, pool_cidr: str
) -> AsyncIterator[FirstCommandFloor]:
    """The floor over the shared cache's base template snapshot (captured there first if it is
    missing, as a node agent would); every netns of its prefix is removed at the end, also
    after a failure."""
    settings = NodeAgentSettings(cache_dir=cache_dir)
    network = NetworkManager(NetworkConfig(prefix="attfc", pool_cidr=pool_cidr))
    async with aiohttp.ClientSession() as session:
        try:
            inputs = await base_template_inputs(settings, detect_accelerator(None))
            templates = template_store(settings, network, session)
            templates.register(inputs)
            work.mkdir(parents=True, exist_ok=True)
            snap = await templates.get(BASE_TEMPLATE)
            yield FirstCommandFloor(RawFloor(inputs, snap, network, session, work), network)
        finally:
            await network.destroy_orphans(keep=set())
