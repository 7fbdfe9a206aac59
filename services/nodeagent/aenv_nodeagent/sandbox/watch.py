"""Noticing a sandbox's VM that ends on its own — QEMU crashed or was killed, the guest panicked
or powered off, or QEMU stopped the guest for a disk write the host had no room for — and ending
the sandbox with its death certificate.

Nothing else would: a guest that is gone sends no RST, so the streams into it would hang, and the
sandbox would be listed running. The VMM process of every running sandbox is watched through a
pidfd, readable once the process exits, and its QMP events for a full disk (vmm/disk_errors.py);
new sandboxes are picked up on the loop's next pass. An end no operation of this node caused (a
kill, a pause, a reset end their VMs themselves, holding or leaving the sandbox) ends the sandbox
at once: it is killed with the cause (sandbox/death_causes.py names it from QEMU's exit status,
the VM cgroup's OOM kills, the guest console's tail and whether the filesystem under its memory
is full), which writes its DIED event and death certificate before its traffic is cut and it is
removed, so that a client woken by the cut finds the certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from opentelemetry import trace

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import AenvError, NotFound
from aenv_common.rollout import sandbox_span
from aenv_nodeagent.confinement import VmCgroup
from aenv_nodeagent.sandbox.death_causes import Death, VmExit, classify_exit, parse_oom_kills
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.vmm.driver import Vm

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# The files a VM cgroup counts its OOM kills in (v2, v1).
_OOM_FILES = ("memory.events", "memory.oom_control")
_DISK_FULL = "the host has no room for its disk's writes"


class EndSandbox(Protocol):
    """The wing's kill with a cause: the sandbox goes with a DIED event and certificate."""

    async def __call__(self, sandbox_id: str, *, cause: c.DeathCause, detail: str) -> None: ...


@dataclass
class _Watch:
    pidfd: int
    oom_kills: int  # the VM cgroup's count when the watch began
    disk: asyncio.Task[str] | None = None


@dataclass
class _Ended:
    sandbox_id: str
    oom_kills: int
    death: Death | None = None  # known already (a full disk), or once classified
    facts: list[str] = field(default_factory=list)


class VmExits:
    """Watches the VMs of this node's running sandboxes while `run` runs.

    :param console_tail: the last lines of a sandbox's guest console, oldest first.
    """

    def __init__(
        self, registry: SandboxRegistry, end: EndSandbox,
        cut_traffic: Callable[[str], Awaitable[None]],
        console_tail: Callable[[Sandbox], Sequence[str]] = lambda _: (),
    ) -> None:
        self._registry = registry
        self._end = end
        self._cut_traffic = cut_traffic
        self._console_tail = console_tail
        self._watched: dict[Vm, _Watch] = {}
        self._ended: dict[Vm, _Ended] = {}  # VMs seen ending
        self._woken = asyncio.Event()

    async def run(self, interval_s: float = 0.25) -> None:
        """Until cancelled: watch the running sandboxes' VMs, end those whose VM ended."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._watch(loop)
                for vm, ended in list(self._ended.items()):
                    await self._settle(vm, ended)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), interval_s)
                self._woken.clear()
        finally:
            for vm in list(self._watched):
                self._unwatch(loop, vm)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch the VMs that run sandboxes now, and only those."""
        running = {sandbox.vm: sandbox.sandbox_id for sandbox in self._registry.all()}
        for vm in [vm for vm in self._watched if vm not in running]:
            self._unwatch(loop, vm)
        for vm, sandbox_id in running.items():
            if vm in self._watched or vm in self._ended:
                continue
            try:
                # Exited (and reaped) before it was watched, or being stopped: settled as an
                # exit, which leaves it to an operation that holds the sandbox or removed it.
                if vm.stopping:
                    raise ProcessLookupError(vm.pid)
                pidfd = os.pidfd_open(vm.pid)
            except ProcessLookupError:  # its cgroup is its own: every OOM kill counts
                self._ended[vm] = _Ended(sandbox_id, 0)
                self._woken.set()
                continue
            except OSError as err:  # not a process of this host (a test's fake VM)
                log.debug("VM not watched", extra={"sandbox_id": sandbox_id, "error": str(err)})
                continue
            watch = self._watched[vm] = _Watch(pidfd, _oom_kills(vm.cgroup))
            loop.add_reader(pidfd, self._on_exit, loop, sandbox_id, vm)
            watch.disk = asyncio.ensure_future(vm.disk_full())
            watch.disk.add_done_callback(functools.partial(self._on_disk, sandbox_id, vm))

    def _unwatch(self, loop: asyncio.AbstractEventLoop, vm: Vm) -> _Watch | None:
        watch = self._watched.pop(vm, None)
        if watch is not None:
            loop.remove_reader(watch.pidfd)
            os.close(watch.pidfd)
            if watch.disk is not None:
                watch.disk.cancel()
        return watch

    def _on_exit(self, loop: asyncio.AbstractEventLoop, sandbox_id: str, vm: Vm) -> None:
        watch = self._unwatch(loop, vm)
        if vm not in self._ended:
            self._ended[vm] = _Ended(sandbox_id, watch.oom_kills if watch else 0)
        self._woken.set()

    def _on_disk(self, sandbox_id: str, vm: Vm, task: asyncio.Task[str]) -> None:
        if task.cancelled():
            return
        if (err := task.exception()) is not None:  # QMP gone: QEMU exited, the pidfd says so
            log.debug("disk error watch ended", extra={"sandbox_id": sandbox_id,
                                                       "error": str(err)})
            return
        watch = self._watched.get(vm)
        if vm not in self._ended:
            self._ended[vm] = _Ended(sandbox_id, watch.oom_kills if watch else 0,
                                     Death(c.DEATH_CAUSE_DISK_FULL, _DISK_FULL),
                                     [f"disk {task.result()!r} stopped on ENOSPC"])
        self._woken.set()

    async def _settle(self, vm: Vm, ended: _Ended) -> None:
        sandbox_id = ended.sandbox_id
        sandbox = self._registry.find(sandbox_id)
        if sandbox is None or sandbox.vm is not vm:
            del self._ended[vm]  # an operation ended it (a kill, a pause, a reset)
            return
        if self._registry.is_busy(sandbox_id):
            return  # the operation holding it ends it, or gives it back: seen on a later pass
        if ended.death is None:
            ended.death = await self._classify(sandbox, ended)
        try:
            # In the trainer's trace (no call started it): its creator's span is the parent.
            with sandbox_span(tracer, "sandbox.died", sandbox.record, attributes={
                    "death.cause": c.DeathCause.Name(ended.death.cause)}):
                await self._die(sandbox, ended.death, ended.facts)
        except NotFound:
            pass  # killed meanwhile
        except AenvError as err:  # etcd refused: the next pass tries again
            log.warning("removing a dead sandbox failed",
                        extra={"sandbox_id": sandbox_id, "error": err.message})
            return
        del self._ended[vm]

    async def _classify(self, sandbox: Sandbox, ended: _Ended) -> Death:
        """What ended the VM, read before the kill removes its cgroup and console."""
        vm = sandbox.vm
        status = await vm.exit_status()
        oom_kills = max(0, _oom_kills(vm.cgroup) - ended.oom_kills)
        disk_full = filesystem_full(sandbox.directory)
        death = classify_exit(VmExit(status, oom_kills, self._console_tail(sandbox), disk_full))
        ended.facts.append(f"exit status {status}, {oom_kills} host OOM kills, "
                           f"state disk {'full' if disk_full else 'not full'}")
        return death

    async def _die(self, sandbox: Sandbox, death: Death, facts: Sequence[str]) -> None:
        sandbox_id = sandbox.sandbox_id
        log.warning("sandbox's VM ended on its own", extra={
            "sandbox_id": sandbox_id, "pid": sandbox.vm.pid, "detail": death.detail,
            "cause": c.DeathCause.Name(death.cause), "facts": list(facts)})
        try:
            # The kill writes the certificate first, then cuts the traffic and removes it.
            await self._end(sandbox_id, cause=death.cause, detail=death.detail)
        except AenvError:
            # etcd refused the removal: the VM is gone all the same, so its requests get "not
            # found" and its streams end now; the next pass removes it.
            self._registry.leaving(sandbox_id)
            await self._cut_traffic(sandbox_id)
            raise


def filesystem_full(directory: Path, room_bytes: int = 1 << 20) -> bool:
    """Whether the filesystem holding `directory` has less than `room_bytes` left for writes
    (False when it cannot be read: a full disk is not assumed)."""
    try:
        stat = os.statvfs(directory)
    except OSError:
        return False
    return stat.f_bavail * stat.f_frsize < room_bytes


def _oom_kills(cgroup: VmCgroup | None) -> int:
    """How many processes of the VM's cgroup an OOM killer took (0 without one)."""
    for directory in cgroup.dirs if cgroup is not None else ():
        for name in _OOM_FILES:
            with contextlib.suppress(OSError):
                return parse_oom_kills((directory / name).read_text())
    return 0
