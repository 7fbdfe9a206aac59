"""Starting a sandbox's VM in its netns (waiting for a restore's incoming state, or cold-booting
its disk), and letting it run again after a capture."""

from __future__ import annotations

from pathlib import Path

from aenv_nodeagent.network import NetSlot, netns_exec_prefix
from aenv_nodeagent.sandbox.model import BOOT_RAM, DISK
from aenv_nodeagent.templates import TemplateInputs, vm_spec
from aenv_nodeagent.vmm.driver import Vm, VmmDriver


async def launch_restore_target(
    driver: VmmDriver, inputs: TemplateInputs, directory: Path, memory: Path, slot: NetSlot,
    disk: str = DISK, *, disk_by_fd: bool = False,
) -> Vm:
    """A VM waiting for an incoming state in the sandbox's netns, its RAM mapped copy-on-write
    from `memory`, its root disk `directory/disk` (handed over open with `disk_by_fd`, so the
    directory may be renamed before the restore).

    :raise AenvError: QEMU did not start.
    """
    spec = vm_spec(inputs, directory / disk, memory, mem_shared=False, root_by_fd=disk_by_fd)
    return await driver.launch(spec, directory / "vm", incoming=True,
                               argv_prefix=netns_exec_prefix(slot),
                               console_log=directory / "console.log")


async def boot_from_disk(
    driver: VmmDriver, inputs: TemplateInputs, directory: Path, slot: NetSlot, disk: str = DISK,
) -> Vm:
    """A fresh boot of the template's kernel on the sandbox's own disk (filesystem-only pauses
    and snapshots). Its RAM is a private mapping of a sparse file: it starts zeroed and nothing
    the guest writes reaches the host's disk.

    :raise AenvError: QEMU did not start.
    """
    ram = directory / BOOT_RAM
    with ram.open("wb") as fh:
        fh.truncate(inputs.memory_mib << 20)
    return await driver.launch(vm_spec(inputs, directory / disk, ram, mem_shared=False),
                               directory / "vm", incoming=False,
                               argv_prefix=netns_exec_prefix(slot),
                               console_log=directory / "console.log")


async def keep_running(vm: Vm) -> None:
    """Let a VM run again after a capture (or a failed one), whatever state it was left in."""
    if await vm.status() != "running":
        await vm.resume()
