"""Ending sandboxes to relieve the host's memory, before the kernel's OOM killer picks a QEMU
(which would take a guest at random, and could take the node agent or etcd).

Pressure as the meter reads it stops placements (capacity/meter.py); eviction is the last step
after that, off unless `evict_below_available_mib` is set: while MemAvailable stays under it,
the node ends one running sandbox with EVICTED_MEMORY_PRESSURE, waits for the host to count what
that freed, reads MemAvailable again, and goes on only while it is still under.

Which one: the youngest (latest started). What a trainer loses with a sandbox is the work done
in it, which grows with its age: the youngest holds the least (often a rollout that has barely
begun, and is the cheapest to run again). Largest-PSS-first would free the most per eviction,
but the largest guests are mostly the oldest, longest-running ones; and PSS splits a template's
shared pages among its guests, so what one eviction frees is not known until it is done either
way. Sandboxes held by an operation (a pause, snapshot, fork: one that may free memory itself)
or being killed are skipped; paused ones hold no memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import AenvError, Conflict, NotFound
from aenv_nodeagent.capacity.host import memory_available_mib
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.watch import EndSandbox

log = logging.getLogger(__name__)

# After an eviction, how long the host gets to count what it freed before MemAvailable is read.
SETTLE_S = 1.0


def youngest(sandboxes: Sequence[Sandbox], skip: Callable[[str], bool]) -> Sandbox | None:
    """The sandbox started last, of those `skip` does not rule out (pure)."""
    candidates = [s for s in sandboxes if not skip(s.sandbox_id)]
    if not candidates:
        return None
    return max(candidates, key=lambda s: (s.record.started_at.ToNanoseconds(), s.sandbox_id))


class Evictions:
    """Evicts sandboxes while MemAvailable is under `below_mib` (0: never)."""

    def __init__(
        self, registry: SandboxRegistry, end: EndSandbox, below_mib: int,
        available_mib: Callable[[], int] = memory_available_mib, settle_s: float = SETTLE_S,
    ) -> None:
        self._registry = registry
        self._end = end
        self._below_mib = below_mib
        self._available_mib = available_mib
        self._settle_s = settle_s

    async def run(self, interval_s: float) -> None:
        """Until cancelled: a check every interval (none when switched off)."""
        if self._below_mib <= 0:
            return
        while True:
            try:
                await self.relieve()
            except Exception:
                log.exception("eviction pass failed")
            await asyncio.sleep(interval_s)

    async def relieve(self) -> list[str]:
        """Evict one sandbox at a time until MemAvailable is back over the threshold, or none
        is left to evict; the ids evicted."""
        evicted: list[str] = []
        while (available := await asyncio.to_thread(self._available_mib)) < self._below_mib:
            victim = youngest(self._registry.all(), self._skipped)
            if victim is None:
                log.warning("memory pressure, and no sandbox to evict",
                            extra={"available_mib": available, "below_mib": self._below_mib})
                break
            detail = (f"the host's MemAvailable was {available} MiB, under the node's eviction "
                      f"threshold of {self._below_mib} MiB")
            try:
                await self._end(victim.sandbox_id, cause=c.DEATH_CAUSE_EVICTED_MEMORY_PRESSURE,
                                detail=detail)
            except (NotFound, Conflict):
                pass  # gone meanwhile, or an operation took it: the next one is chosen
            except AenvError as err:
                log.warning("eviction failed, the next pass tries again",
                            extra={"sandbox_id": victim.sandbox_id, "error": err.message})
                break
            else:
                evicted.append(victim.sandbox_id)
                log.warning("sandbox evicted for memory pressure", extra={
                    "sandbox_id": victim.sandbox_id, "available_mib": available})
            await asyncio.sleep(self._settle_s)
        return evicted

    def _skipped(self, sandbox_id: str) -> bool:
        return (self._registry.is_busy(sandbox_id)
                or self._registry.serving(sandbox_id) is None)
