"""The floor of the idle benchmark: bare QEMUs on the `base` template's kernel, machine and
devices (its VM shape, one netns each), booted into a guest running nothing of ours: the
initramfs's shell instead of its /init, so no driver, disk, envd or agent wakes it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.network import EgressPolicy, NetworkConfig, NetworkManager, netns_exec_prefix
from aenv_nodeagent.server import base_template_inputs
from aenv_nodeagent.templates import vm_spec
from aenv_nodeagent.vmm import QemuVm, detect_accelerator

# What busybox's shell prints once it reads its console: the guest has booted.
_BOOTED = b"job control turned off"
BOOT_TIMEOUT_S = 300.0  # TCG boots beside other guests on a shared 2-core host


async def _booted(console: Path, vm: QemuVm) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        if console.is_file() and _BOOTED in console.read_bytes():
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"bare guest (QEMU {vm.pid}) not booted after {BOOT_TIMEOUT_S:.0f} s")


@contextlib.asynccontextmanager
async def bare_guests(count: int, work: Path, net_prefix: str, pool_cidr: str,
                      ) -> AsyncIterator[list[QemuVm]]:
    """`count` bare guests booted one after another (a boot is CPU-bound), stopped on exit."""
    inputs = await base_template_inputs(NodeAgentSettings(), detect_accelerator(None))
    network = NetworkManager(NetworkConfig(prefix=net_prefix, pool_cidr=pool_cidr))
    vms: list[QemuVm] = []
    slots = []
    try:
        for index in range(count):
            slot = await network.create_slot(EgressPolicy())
            slots.append(slot)
            home = work / f"bare{index}"
            home.mkdir(parents=True)
            disk = home / "root.qcow2"
            await create_overlay(inputs.rootfs.path, disk)
            spec = vm_spec(inputs, disk, home / "memory", mem_shared=False)
            # No preload: its copy-on-write mapping is of a captured RAM file, and this guest
            # boots on a new one.
            spec = dataclasses.replace(spec, cmdline=f"{spec.cmdline} rdinit=/bin/sh",
                                       preload_library=None)
            console = home / "console.log"
            vm = await QemuVm.launch(spec, home / "vm", incoming=False, console_log=console,
                                     argv_prefix=netns_exec_prefix(slot))
            vms.append(vm)
            await _booted(console, vm)
        yield vms
    finally:
        await asyncio.gather(*(vm.shutdown() for vm in vms), return_exceptions=True)
        await asyncio.gather(*(network.destroy_slot(slot) for slot in slots),
                             return_exceptions=True)
