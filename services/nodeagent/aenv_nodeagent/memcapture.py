"""The memory half of capturing a running sandbox (a snapshot, a fork): a new memory image.

With a dirty log (vmm/dirtylog.py) the image starts as a copy of the one the VM's RAM equalled at
its previous capture (or of the image it was restored from), and the pages written since are
copied while the guest keeps running, in passes that each take what the previous one let slip.
The guest is then stopped only for what it wrote during the last pass and for its device state.
Without one (a VM adopted from an earlier run, or a kernel before 6.7) the image is the copy of
its base with every page the process holds privately written over it, all while stopped.

`CaptureLedger` remembers, per VM, which file its RAM equalled when its log was last re-armed,
as a hard link in the sandbox's directory (`CAPTURED`), so that deleting the snapshot does not
take it away. A capture that re-armed the log and then failed leaves that unknown: the next one
falls back to the private pages, which re-arms the log from a known state.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from aenv_nodeagent.memimage import CAPTURED, MemoryImage, link_into
from aenv_nodeagent.sandboxes import timed
from aenv_nodeagent.vmm import QemuVm
from aenv_nodeagent.vmm.delta import copy_pages, copy_sparse, write_image
from aenv_nodeagent.vmm.dirtylog import DirtyLog, pages

log = logging.getLogger(__name__)

_DEVICES = "devices.state"  # the VM's device state, until the image's state holds it
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
    reference: Path | None = None
    copied: dict[str, int] = field(default_factory=dict)  # pages, by phase

    async def while_running(self) -> None:
        """The copy of the reference (or base), then of the pages written since, as passes."""
        self.dirty = await asyncio.to_thread(DirtyLog.open, self.vm.pid, self.base.memory)
        self.reference = self.ledger.reference(self.vm, self.base) if self.dirty else None
        source = self.reference or self.base.memory
        await timed(self.timings, "copy_base", asyncio.to_thread(
            copy_sparse, source, self.out.memory))
        if self.reference is None:
            return
        self.ledger.unknown(self.vm)  # until this capture is done
        for n in range(_PASSES):
            copied = await timed(self.timings, f"precopy{n}", asyncio.to_thread(self._pass))
            self.copied[f"precopy{n}"] = copied
            if copied < _SETTLED_PAGES:
                break

    async def while_stopped(self, directory: Path) -> None:
        """The device state and the pages the VM changed that are not in the copy yet."""
        devices = directory / _DEVICES
        written = self.dirty.take if self.dirty and self.reference else None
        try:
            await self.vm.save_device_state(devices)
            result = await asyncio.to_thread(
                write_image, self.vm.pid, self.base.memory, self.base.device_state, devices,
                self.out.memory, self.out.device_state, written)
            if self.dirty is not None and self.reference is None:
                self.ledger.unknown(self.vm)
                await asyncio.to_thread(self.dirty.take)  # re-armed: the image is the reference
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

    def _pass(self) -> int:
        assert self.dirty is not None
        runs = self.dirty.take()
        copy_pages(self.vm.pid, runs, self.out.memory)
        return pages(runs)


def pages_fields(capture: MemoryCapture) -> dict[str, int]:
    return {f"{phase}_pages": count for phase, count in capture.copied.items()}
