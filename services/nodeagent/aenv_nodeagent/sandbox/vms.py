"""Letting a sandbox's VM run again after a capture. (Its VM starts in templates/launch.py,
shared with template captures.)"""

from __future__ import annotations

from aenv_nodeagent.vmm.driver import Vm


async def keep_running(vm: Vm) -> None:
    """Let a VM run again after a capture (or a failed one), whatever state it was left in."""
    if await vm.status() != "running":
        await vm.resume()
