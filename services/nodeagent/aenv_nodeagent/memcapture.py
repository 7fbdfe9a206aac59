"""The memory half of capturing a running sandbox (a snapshot, a fork): a new memory image.

With a dirty log (vmm/dirtylog.py), the log is re-armed first and the image is made while the
guest keeps running: the pages written since the previous capture are read from the process,
everything else is copied (in the kernel) from that capture's image. Passes then copy what was
written meanwhile, and the guest is stopped only for the last of them and its device state. When
the log's start is unknown (a VM adopted from an earlier run, a capture that failed after
re-arming it), every page the process holds privately is read instead, onto the base.
Without a log (a kernel before 6.7) the image is the copy of its base with every private page
written over it, all while the guest is stopped.

`CaptureLedger` remembers, per VM, which file its RAM equalled when its log was last re-armed,
as a hard link in the sandbox's directory (`CAPTURED`), so that deleting the snapshot does not
take it away.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from aenv_nodeagent.memimage import CAPTURED, DEVICES, MemoryImage, link_into
from aenv_nodeagent.sandboxes import timed
from aenv_nodeagent.vmm import QemuVm
from aenv_nodeagent.vmm.delta import (
    PageRun,
    copy_pages,
    copy_sparse,
    private_runs,
    write_image,
)
from aenv_nodeagent.vmm.dirtylog import DirtyLog

_PASSES = 3  # copies while the guest runs, at most
_SETTLED_PAGES = 256  # a pass that copied fewer leaves too little to be worth another


class CaptureLedger:
    """Per VM: the memory file its RAM equals outside the pages its dirty log holds."""

    def __init__(self) -> None:
        # None: the log was re-armed by a capture that failed; what it misses is unknown.
        self._files: weakref.WeakKeyDictionary[QemuVm, Path | None] = (
            weakref.WeakKeyDictionary())

    def reference(self, vm: QemuVm, base: MemoryImage) -> Path | None:
        if vm in self._files:
            found = self._files[vm]
            return found if found is not None and found.is_file() else None
        # Logged since QEMU mapped its base: what differs from the base is in the log.
        return base.memory if vm.logs_writes else None

    def since_mapped(self, vm: QemuVm, memory: Path) -> DirtyLog | None:
        """The VM's log, if it holds every page written since QEMU mapped `memory` (no capture
        re-armed it): those are the pages that differ from it. Blocking."""
        if vm in self._files or not vm.logs_writes:
            return None
        return DirtyLog.open(vm.pid, memory)

    def unknown(self, vm: QemuVm) -> None:
        self._files[vm] = None

    def captured(self, vm: QemuVm, image: Path, sandbox_dir: Path) -> None:
        self._files[vm] = link_into(image, sandbox_dir / CAPTURED)


@dataclass
class MemoryCapture:
    """One capture of `vm`'s memory (RAM mapped from `base`) into `out`."""

    vm: QemuVm
    base: MemoryImage
    out: MemoryImage
    ledger: CaptureLedger
    timings: dict[str, float]
    dirty: DirtyLog | None = None
    copied: dict[str, int] = field(default_factory=dict)  # pages, by phase

    async def while_running(self) -> None:
        """The image made while the guest runs: the pages written since the reference (or,
        with the log's start unknown, every private page) from the process, the rest from the
        reference (or the base); then passes over what was written meanwhile."""
        pid, base = self.vm.pid, self.base.memory
        self.dirty = await asyncio.to_thread(DirtyLog.open, pid, base)
        if self.dirty is None:  # the changed pages are copied once the guest is stopped
            await timed(self.timings, "copy_base", asyncio.to_thread(
                copy_sparse, base, self.out.memory))
            return
        reference = self.ledger.reference(self.vm, self.base)
        self.ledger.unknown(self.vm)  # until this capture is done
        runs = await asyncio.to_thread(self._changed, reference)
        await timed(self.timings, "copy_base", asyncio.to_thread(
            copy_sparse, reference or base, self.out.memory, runs))
        self.copied["precopy0"] = await timed(self.timings, "precopy0", asyncio.to_thread(
            copy_pages, pid, runs, self.out.memory))
        for n in range(1, _PASSES):
            if self.copied[f"precopy{n - 1}"] < _SETTLED_PAGES:
                break
            self.copied[f"precopy{n}"] = await timed(
                self.timings, f"precopy{n}", asyncio.to_thread(self._pass))

    async def while_stopped(self, directory: Path) -> None:
        """The device state and the pages written since the last pass (all the private ones,
        without a log)."""
        devices = directory / DEVICES
        try:
            await self.vm.save_device_state(devices)
            result = await asyncio.to_thread(
                write_image, self.vm.pid, self.base.memory, self.base.device_state, devices,
                self.out.memory, self.out.device_state,
                None if self.dirty is None else self.dirty.take)
        finally:
            devices.unlink(missing_ok=True)
        self.copied["stopped"] = result.pages

    def done(self, image: Path, sandbox_dir: Path) -> None:
        """`image` (published) is what the VM's RAM equalled when it was stopped."""
        if self.dirty is not None:
            self.ledger.captured(self.vm, image, sandbox_dir)

    def close(self) -> None:
        if self.dirty is not None:
            self.dirty.close()

    def _changed(self, reference: Path | None) -> list[PageRun]:
        """Re-arms the log: the pages that differ from `reference`, or from the base."""
        assert self.dirty is not None
        written = self.dirty.take()
        if reference is not None:
            return written
        return list(private_runs(self.vm.pid, self.base.memory))

    def _pass(self) -> int:
        assert self.dirty is not None
        return copy_pages(self.vm.pid, self.dirty.take(), self.out.memory)


def pages_fields(capture: MemoryCapture) -> dict[str, int]:
    return {f"{phase}_pages": count for phase, count in capture.copied.items()}
