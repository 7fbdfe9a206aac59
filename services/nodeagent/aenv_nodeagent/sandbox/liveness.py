"""Noticing a guest that hangs: its VM runs, but nothing in it answers.

The exit watch (sandbox/watch.py) sees a VM that ends; a guest whose kernel locked up, whose
envd is stopped or starved, runs on as a process and would hold its slot, its memory and its
trainer's episode until its timeout. So every `interval_s` each running sandbox's envd is asked
`GET /health` (through the envd client, bounded by `timeout_s`, generous for TCG: a loaded guest
under emulation is slow, not dead); after `failures` answers missed in a row the sandbox is
ended with GUEST_HANG. A sandbox is probed only while it is its own: never while paused (no VM),
held by an operation (a pause, snapshot, fork stops its guest on purpose), being killed, or
younger than one interval on its current VM (a create or resume just proved it answers); a
probe whose sandbox was taken by an operation meanwhile does not count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import AenvError, Conflict, NotFound
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.watch import EndSandbox
from aenv_nodeagent.vmm.driver import Vm

log = logging.getLogger(__name__)

# Probes in flight at once (each is one small HTTP request into a netns).
MAX_CONCURRENT_PROBES = 32


@dataclass(frozen=True)
class LivenessSettings:
    """`interval_s` or `failures` 0: no probe."""

    interval_s: float = 30.0
    failures: int = 4
    timeout_s: float = 10.0

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0 and self.failures > 0


@dataclass
class _Seen:
    vm: Vm
    since: float  # when this VM of the sandbox was first seen running
    answered: float  # its envd's last answer (or `since`)
    missed: int = 0


class Liveness:
    """Probes the envd of every running sandbox; ends the ones that stopped answering.

    :param answers: whether envd at a host answers /health within a time limit (one probe).
    """

    def __init__(
        self, registry: SandboxRegistry, answers: Callable[[str, float], Awaitable[bool]],
        end: EndSandbox, settings: LivenessSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self._answers = answers
        self._end = end
        self._settings = settings
        self._clock = clock
        self._seen: dict[str, _Seen] = {}
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_PROBES)

    async def run(self) -> None:
        """Until cancelled: a pass every interval (none at all when switched off)."""
        if not self._settings.enabled:
            return
        while True:
            await asyncio.sleep(self._settings.interval_s)
            try:
                await self.probe_all()
            except Exception:
                log.exception("liveness pass failed")

    async def probe_all(self) -> list[str]:
        """One pass: probe every sandbox due, end those past the allowed misses; their ids."""
        now = self._clock()
        running = {sandbox.sandbox_id: sandbox for sandbox in self._registry.all()}
        for sandbox_id in [sid for sid in self._seen if sid not in running]:
            del self._seen[sandbox_id]
        due = []
        for sandbox_id, sandbox in running.items():
            seen = self._seen.get(sandbox_id)
            if seen is None or seen.vm is not sandbox.vm:  # new, or on a new VM (resumed, reset)
                self._seen[sandbox_id] = _Seen(sandbox.vm, now, now)
            elif self._probeable(sandbox) and now - seen.since >= self._settings.interval_s:
                due.append(sandbox)
        results = await asyncio.gather(*(self._probe(sandbox) for sandbox in due))
        return [sandbox_id for sandbox_id in results if sandbox_id]

    def _probeable(self, sandbox: Sandbox) -> bool:
        sandbox_id = sandbox.sandbox_id
        return (not self._registry.is_busy(sandbox_id) and not sandbox.vm.stopping
                and self._registry.serving(sandbox_id) is sandbox)

    async def _probe(self, sandbox: Sandbox) -> str:
        """Probe one sandbox; its id when it was ended."""
        async with self._slots:
            answered = await self._answers(sandbox.host, self._settings.timeout_s)
        seen = self._seen.get(sandbox.sandbox_id)
        if seen is None or seen.vm is not sandbox.vm or not self._probeable(sandbox):
            return ""  # an operation took it meanwhile: this probe says nothing
        now = self._clock()
        if answered:
            seen.answered, seen.missed = now, 0
            return ""
        seen.missed += 1
        log.info("envd did not answer a liveness probe", extra={
            "sandbox_id": sandbox.sandbox_id, "missed": seen.missed,
            "allowed": self._settings.failures})
        if seen.missed < self._settings.failures:
            return ""
        detail = f"envd did not answer /health for {now - seen.answered:.0f} s"
        try:
            await self._end(sandbox.sandbox_id, cause=c.DEATH_CAUSE_GUEST_HANG, detail=detail)
        except (NotFound, Conflict):
            return ""  # killed meanwhile, or an operation holds it: the next pass sees
        except AenvError as err:
            log.warning("ending a hung sandbox failed, the next pass tries again",
                        extra={"sandbox_id": sandbox.sandbox_id, "error": err.message})
            return ""
        with contextlib.suppress(KeyError):
            del self._seen[sandbox.sandbox_id]
        return sandbox.sandbox_id
