"""Noticing a sandbox's VM that exits on its own: QEMU crashed, or something killed it.

Nothing else would: a guest that is gone sends no RST, so the streams into it would hang, and the
sandbox would be listed running. The VMM process of every running sandbox is watched through a
pidfd, readable once the process exits (new sandboxes are picked up on the loop's next pass). An
exit no operation of this node caused (a kill, a pause, a reset end their VMs themselves, holding
or leaving the sandbox) loses the sandbox at once: its traffic is refused and cut, it is removed
as a kill removes it, and its record is then marked lost, as recovery marks what did not survive
a restart (docs/architecture.md, "Restart of a node agent").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, NotFound
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.records import SandboxRecords
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.vmm.driver import Vm

log = logging.getLogger(__name__)

_LOST = cluster_pb2.SANDBOX_STATE_LOST


class VmExits:
    """Watches the VMs of this node's running sandboxes while `run` runs."""

    def __init__(
        self, registry: SandboxRegistry, records: SandboxRecords,
        kill: Callable[[str], Awaitable[None]], cut_traffic: Callable[[str], Awaitable[None]],
    ) -> None:
        self._registry = registry
        self._records = records
        self._kill = kill
        self._cut_traffic = cut_traffic
        self._watched: dict[Vm, int] = {}  # each watched VM's pidfd
        self._exited: dict[Vm, str] = {}  # VMs seen exiting, with their sandbox's id
        self._woken = asyncio.Event()

    async def run(self, interval_s: float = 0.25) -> None:
        """Until cancelled: watch the running sandboxes' VMs, lose those whose VM exited."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._watch(loop)
                for vm, sandbox_id in list(self._exited.items()):
                    await self._settle(sandbox_id, vm)
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
            if vm in self._watched or vm in self._exited or vm.stopping:
                continue
            try:
                pidfd = os.pidfd_open(vm.pid)
            except ProcessLookupError:
                self._on_exit(loop, sandbox_id, vm)  # exited before it was watched
                continue
            except OSError as err:  # not a process of this host (a test's fake VM)
                log.debug("VM not watched", extra={"sandbox_id": sandbox_id, "error": str(err)})
                continue
            self._watched[vm] = pidfd
            loop.add_reader(pidfd, self._on_exit, loop, sandbox_id, vm)

    def _unwatch(self, loop: asyncio.AbstractEventLoop, vm: Vm) -> None:
        pidfd = self._watched.pop(vm, None)
        if pidfd is not None:
            loop.remove_reader(pidfd)
            os.close(pidfd)

    def _on_exit(self, loop: asyncio.AbstractEventLoop, sandbox_id: str, vm: Vm) -> None:
        self._unwatch(loop, vm)
        self._exited[vm] = sandbox_id
        self._woken.set()

    async def _settle(self, sandbox_id: str, vm: Vm) -> None:
        sandbox = self._registry.find(sandbox_id)
        if sandbox is None or sandbox.vm is not vm:
            del self._exited[vm]  # an operation ended it (a kill, a pause, a reset)
            return
        if self._registry.is_busy(sandbox_id):
            return  # the operation holding it ends it, or gives it back: seen on a later pass
        try:
            await self._lose(sandbox)
        except AenvError as err:  # etcd refused: the next pass tries again
            log.warning("removing a lost sandbox failed",
                        extra={"sandbox_id": sandbox_id, "error": err.message})
            return
        del self._exited[vm]

    async def _lose(self, sandbox: Sandbox) -> None:
        sandbox_id = sandbox.sandbox_id
        log.warning("sandbox lost: its VM exited",
                    extra={"sandbox_id": sandbox_id, "pid": sandbox.vm.pid})
        # Before any etcd write: requests get "not found" and the streams end at once.
        self._registry.leaving(sandbox_id)
        await self._cut_traffic(sandbox_id)
        lost = cluster_pb2.SandboxRecord()
        lost.CopyFrom(sandbox.record)
        lost.state = _LOST
        try:
            await self._kill(sandbox_id)
        except NotFound:
            return  # killed meanwhile
        try:
            await self._records.put_sandbox(lost)
        except AenvError as err:  # gone all the same: its record is deleted, not marked lost
            log.warning("marking a sandbox lost failed",
                        extra={"sandbox_id": sandbox_id, "error": err.message})
