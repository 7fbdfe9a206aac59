"""The VMs the warm pool (pool/warm.py) keeps for a template, made here where templates are
known: a QEMU launched waiting for the template's state, and a woken guest.

A woken guest is that QEMU with the template's state loaded, one command run through envd as an
SDK's first `commands.run` runs it and an /init of nothing (so under TCG both paths are
translated, and on KVM faulted in, before anyone waits for them), then stopped: all of it at
the least CPU share, so warming never slows a running sandbox. A take gives it its share back
and continues it (`continue_woken`); envd's /init then hands it the sandbox's identity,
variables, token, clock and fresh entropy, so the sandbox gets nothing of the warm-up: its
command has ended, set no variable, wrote no file (its /init wrote none the create's does not
write again), was run before any token existed, and its log lines are emptied from the guest's
console file before the guest is handed out.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from aenv_nodeagent.confinement.cgroups import set_cpu_idle
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.guest_commands import CommandSpec, GuestCommands
from aenv_nodeagent.network import NetSlot
from aenv_nodeagent.pool import PooledVm, VmLauncher, VmWaker
from aenv_nodeagent.sandbox.logs import CONSOLE_LOG
from aenv_nodeagent.sandbox.model import DISK
from aenv_nodeagent.templates import TemplateSnapshot, TemplateStore
from aenv_nodeagent.templates.launch import launch_restore_target
from aenv_nodeagent.vmm.driver import Vm, VmmDriver

# What the SDKs run (`bash -l -c <cmd>`), where the image has bash.
WARM_UP = CommandSpec("command -v bash >/dev/null && exec bash -l -c true; true")


class TemplateGuests:
    """Makes a template's pooled VMs. Without `commands` none is woken (pre-started only)."""

    def __init__(
        self, templates: TemplateStore, driver: VmmDriver, envd: EnvdClient,
        commands: GuestCommands | None, *, ready_timeout_s: float,
    ) -> None:
        self._templates = templates
        self._driver = driver
        self._envd = envd
        self._commands = commands
        self._ready_timeout_s = ready_timeout_s

    def launcher(self, template: TemplateSnapshot) -> VmLauncher:
        return functools.partial(self._launch, template)

    def waker(self, template: TemplateSnapshot) -> VmWaker | None:
        return None if self._commands is None else functools.partial(self._wake, template)

    async def _launch(self, template: TemplateSnapshot, directory: Path, slot: NetSlot) -> Vm:
        await create_overlay(template.disk, directory / DISK)
        inputs = self._templates.inputs(template.template_id)
        return await launch_restore_target(self._driver, inputs, directory, template.memory,
                                           slot, DISK, disk_by_fd=True)

    async def _wake(self, template: TemplateSnapshot, pooled: PooledVm) -> None:
        """:raise AenvError: the guest did not come back, or envd did not run the command."""
        assert self._commands is not None
        set_cpu_idle(pooled.vm.cgroup, True)
        await pooled.vm.restore(template.state)
        host = pooled.slot.ns_ip
        await self._envd.wait_healthy(host, self._ready_timeout_s)
        await self._commands.run(host, WARM_UP, timeout_s=self._ready_timeout_s)
        await self.warm_init(host)
        await pooled.vm.pause()
        # Its console (envd's log of the warm-up) is not the sandbox's: QEMU appends, so the
        # stopped guest's file can be emptied under it.
        os.truncate(pooled.directory / CONSOLE_LOG, 0)

    async def warm_init(self, host: str) -> None:
        """An /init as a create's, of nothing: its path (the JSON body, the entropy, the clock,
        the egress CA) runs once in this QEMU, so the create's own /init finds it translated
        (TCG) or faulted in (KVM); under TCG a first /init took ~100-200 ms more than a second.
        It leaves nothing a sandbox could see: no variable, no token (a template's guest has
        none); what it writes (the clock, entropy, envd's init marker, the egress CA) the
        create's own /init writes again."""
        await self._envd.init(host, env_vars={}, access_token="",
                              timeout_s=self._ready_timeout_s)


async def continue_woken(vm: Vm) -> None:
    """A woken guest taken for a sandbox runs again, at the default CPU share.

    :raise QmpError:"""
    set_cpu_idle(vm.cgroup, False)
    await vm.resume()
