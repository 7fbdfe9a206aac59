"""Stands in for a node agent mid-capture, as templates/store.py captures: it holds the
template's capture lock and runs a QEMU in `.build-*/vm` (its own session, as the agent's VMs),
prints the QEMU's pid, then waits to be killed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from aenv_nodeagent.artifacts.cache import file_lock
from aenv_nodeagent.vmm.argv import VmFiles
from aenv_nodeagent.vmm.process import qemu_owning, spawn


async def capture(template: Path, build: Path) -> None:
    files = VmFiles.in_dir(build / "vm")
    files.pidfile.parent.mkdir(parents=True)
    async with file_lock(template / ".key.lock"):
        qemu = await spawn(
            [
                "qemu-system-x86_64",
                "-machine",
                "none",
                "-nodefaults",
                "-display",
                "none",
                "-S",
                "-pidfile",
                str(files.pidfile),
            ],
            build / "vm" / "stderr.log",
        )
        while qemu_owning(files.pidfile) is None:  # noqa: ASYNC110 - QEMU writes it when up
            await asyncio.sleep(0.02)
        print(qemu.pid, flush=True)
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(capture(Path(sys.argv[1]), Path(sys.argv[2])))
