"""What the node's VMs really use and whether the host is under memory pressure, sampled in
the background: reading a QEMU's smaps_rollup walks its page tables (milliseconds each on a
loaded host), so it is done off the event loop every interval, never on a create's path.

A VM not measured yet (a sandbox made since the last sample) counts its whole guest RAM, as
the scheduler counts a placement it reserved. The record is written again as soon as a sample
measures a VM for the first time (the scheduler sees what the new sandbox really uses) or
pressure begins or ends (placements stop before the OOM killer picks a guest)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aenv_common.errors import AenvError
from aenv_nodeagent.capacity.host import MIB, memory_available_mib, psi_memory_some_avg10, pss_bytes
from aenv_nodeagent.capacity.rules import CapacityPolicy, pressure
from aenv_nodeagent.sandbox.registry import SandboxRegistry

log = logging.getLogger(__name__)


class MemoryMeter:
    def __init__(self, policy: CapacityPolicy, registry: SandboxRegistry) -> None:
        self._policy = policy
        self._registry = registry
        self._pss: dict[int, int] = {}  # VMM pid -> bytes, at the last sample
        self.available_mib = 0
        self.pressure = ""  # why the host is under memory pressure; "": it is not

    def used_mib(self) -> int:
        """The running sandboxes' VMs: PSS where measured, else their guest RAM."""
        total = 0
        for sandbox in self._registry.all():
            measured = self._pss.get(sandbox.vm.pid)
            total += sandbox.record.resources.memory_mib * MIB if measured is None else measured
        return total // MIB

    def measured_bytes(self) -> int:
        """PSS of the VMs measured at the last sample, summed."""
        return sum(self._pss.values())

    async def sample(self) -> bool:
        """Measures now; True when the node's record should be written at once."""
        pids = [sandbox.vm.pid for sandbox in self._registry.all()]
        pss, available, psi = await asyncio.to_thread(_read, pids)
        first_seen = not pss.keys() <= self._pss.keys()
        self._pss, self.available_mib = pss, available
        before, self.pressure = self.pressure, pressure(available, psi, self._policy)
        changed = bool(before) != bool(self.pressure)
        if changed:
            log.warning(
                "memory pressure began" if self.pressure else "memory pressure ended",
                extra={"reason": self.pressure or before, "available_mib": available},
            )
        return first_seen or changed

    async def run(self, publish: Callable[[], Awaitable[None]], interval_s: float) -> None:
        while True:
            if await self.sample():
                with contextlib.suppress(AenvError):  # the next heartbeat writes it anyway
                    await publish()
            await asyncio.sleep(interval_s)


def _read(pids: list[int]) -> tuple[dict[int, int], int, float | None]:
    return {pid: pss_bytes(pid) for pid in pids}, memory_available_mib(), psi_memory_some_avg10()
