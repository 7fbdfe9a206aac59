"""A guest's disk writes that the host has no room for.

QEMU's virtio-blk devices keep the default write-error policy, `werror=enospc`: a write that
fails with ENOSPC on the host stops the VM (run state `io-error`) and emits BLOCK_IO_ERROR with
`nospace: true`, instead of failing the write inside the guest, whose filesystem would then go
read-only or corrupt with no word to the node. A stopped guest answers nothing, so the node must
hear of it from QEMU: the exit watch (sandbox/watch.py) waits here for every running VM, and
ends the sandbox with DISK_FULL. Read errors keep `rerror=report` (the guest sees EIO).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Protocol

from qemu.qmp import EventListener

from aenv_nodeagent.vmm.errors import QmpConnectionLost

EVENT = "BLOCK_IO_ERROR"
STOPPED_BY_IO_ERROR = "io-error"  # query-status's run state


class QmpEvents(Protocol):
    """A QEMU's QMP commands, run state and events (QemuVm has them; a migration needs more)."""

    @property
    def pid(self) -> int: ...

    async def execute(
        self, command: str, arguments: Mapping[str, object] | None = None
    ) -> object: ...

    async def status(self) -> str: ...

    def listener(self, events: str) -> contextlib.AbstractContextManager[EventListener]: ...


async def wait_disk_full(vm: QmpEvents) -> str:
    """Returns (the disk's name) once QEMU stopped the guest for a write with no room on the
    host, also when it did so before the call (the event is gone then, but the run state and
    the device's io-status say it).

    :raise QmpError: QMP failed (QEMU exited: the exit watch sees that by itself).
    """
    with vm.listener(EVENT) as listener:
        if await vm.status() == STOPPED_BY_IO_ERROR:
            found = nospace_disk(await vm.execute("query-block"))
            if found is not None:
                return found
        async for event in listener:
            found = nospace_event(event)
            if found is not None:
                return found
    raise QmpConnectionLost(f"QEMU {vm.pid}'s event stream ended")


def nospace_event(event: Mapping[str, object]) -> str | None:
    """The disk a BLOCK_IO_ERROR event names when its cause is a full host disk, else None."""
    data = event.get("data")
    if not isinstance(data, Mapping) or not data.get("nospace"):
        return None
    return str(data.get("device") or data.get("node-name") or "")


def nospace_disk(query_block: object) -> str | None:
    """The first disk of a query-block reply whose io-status is `nospace`, else None."""
    for disk in query_block if isinstance(query_block, list) else []:
        if isinstance(disk, Mapping) and disk.get("io-status") == "nospace":
            return str(disk.get("qdev") or disk.get("device") or "")
    return None
