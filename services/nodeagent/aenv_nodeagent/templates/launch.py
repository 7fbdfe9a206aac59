"""Starting a VM of a template in a netns: as the target of a restore (its RAM mapped
copy-on-write from a memory image, waiting for the incoming state) or as a cold boot of its
kernel on a disk — a sandbox's (filesystem-only pauses and snapshots) or a template capture's
own. Sandbox restores and template captures start their VMs only here.
"""

from __future__ import annotations

from pathlib import Path

from aenv_nodeagent.network import NetSlot, netns_exec_prefix
from aenv_nodeagent.templates.model import TemplateInputs, vm_spec
from aenv_nodeagent.vmm.driver import Vm, VmmDriver


async def launch_restore_target(
    driver: VmmDriver, inputs: TemplateInputs, directory: Path, memory: Path, slot: NetSlot,
    disk: str, *, disk_by_fd: bool = False,
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
    driver: VmmDriver, inputs: TemplateInputs, directory: Path, slot: NetSlot, disk: str,
    ram: Path, *, keep_ram: bool = False,
) -> Vm:
    """A fresh boot of the template's kernel on `directory/disk`. Its RAM is `ram`: a private
    mapping of a sparse file (it starts zeroed and nothing the guest writes reaches the host's
    disk), or with `keep_ram` a shared one, so the file is the RAM a capture keeps.

    :raise AenvError: QEMU did not start.
    """
    if not keep_ram:
        with ram.open("wb") as fh:
            fh.truncate(inputs.memory_mib << 20)
    return await driver.launch(vm_spec(inputs, directory / disk, ram, mem_shared=keep_ram),
                               directory / "vm", incoming=False,
                               argv_prefix=netns_exec_prefix(slot),
                               console_log=directory / "console.log")
