"""The memory half of capturing a running sandbox (a snapshot, a fork): a new memory image.

With a dirty log (vmm/dirtylog.py) and a QEMU that can be frozen (vmm/frozen.py), the guest is
stopped only to re-arm the log, save its device state and fork QEMU; the image is made in the
background from the frozen copy (`finishing`): the pages written since the previous capture from
the copy, everything else (in the kernel) from that capture's image, into a memory file at its
final size from the start. Restores of the snapshot may map that file at once; they wait for the
image to load its device state.

With a dirty log but no frozen copy, the log is re-armed first and the image is made while the
guest keeps running: the pages written since the previous capture are read from the process,
everything else is copied (in the kernel) from that capture's image. Passes then copy what was
written meanwhile, and the guest is stopped only for the last of them and its device state. When
the log's start is unknown (a VM adopted from an earlier run, a capture that failed after
re-arming it), every page the process holds privately is read instead, onto the base.
Without a log (a kernel before 6.7) the image is the copy of its base with every private page
written over it, all while the guest is stopped.

`CaptureLedger` remembers, per VM, which file its RAM equalled when its log was last re-armed,
as a hard link in the sandbox's directory (`CAPTURED`), so that deleting the snapshot does not
take it away; and which capture is still making that file.
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path

from aenv_nodeagent.memory.deferred import REFERENCE, fill, forget, recorded
from aenv_nodeagent.memory.fork_delta import worth_writing, write_fork_delta
from aenv_nodeagent.memory.images import (
    CAPTURED,
    CAPTURED_STATE,
    DEVICE_STATE,
    DEVICES,
    MemoryImage,
    discard_image,
    link_into,
    publish_image,
)
from aenv_nodeagent.phases import PhaseTimer
from aenv_nodeagent.vmm.delta import (
    DeltaResult,
    ImageParts,
    PageRun,
    copy_pages,
    copy_sparse,
    private_runs,
    write_image,
)
from aenv_nodeagent.vmm.dirtylog import DirtyLog
from aenv_nodeagent.vmm.driver import Vm
from aenv_nodeagent.vmm.errors import CaptureFailed
from aenv_nodeagent.vmm.frozen import FrozenCopy
from aenv_nodeagent.vmm.stream import PAGE_SIZE

log = logging.getLogger(__name__)

_PASSES = 3  # copies while the guest runs, at most
_SETTLED_PAGES = 256  # a pass that copied fewer leaves too little to be worth another


class CaptureLedger:
    """Per VM: the memory file its RAM equals outside the pages its dirty log holds."""

    def __init__(self) -> None:
        # None: the log was re-armed by a capture that failed (or is still making its image).
        self._files: weakref.WeakKeyDictionary[Vm, MemoryImage | None] = (
            weakref.WeakKeyDictionary())
        # The capture making the VM's next reference from a frozen copy, done when it is made.
        self._making: weakref.WeakKeyDictionary[Vm, asyncio.Future[None]] = (
            weakref.WeakKeyDictionary())

    async def settled(self, vm: Vm) -> None:
        """Wait for the capture making the VM's reference, if one is."""
        if (making := self._making.get(vm)) is not None:
            await asyncio.shield(making)

    def retire(self, vm: Vm) -> None:
        """The VM is going away (paused, reset): a capture still making an image for it records
        nothing of it."""
        self._making.pop(vm, None)
        self._files.pop(vm, None)

    def reference(self, vm: Vm, base: MemoryImage) -> MemoryImage | None:
        """The image the VM's RAM equals outside its log: its last capture's, or its base."""
        if vm in self._files:
            found = self._files[vm]
            return found if found is not None and found.memory.is_file() else None
        # Logged since QEMU mapped its base: what differs from the base is in the log.
        return base if vm.logs_writes else None

    def since_mapped(self, vm: Vm, memory: Path) -> DirtyLog | None:
        """The VM's log, if it holds every page written since QEMU mapped `memory` (no capture
        re-armed it): those are the pages that differ from it. Blocking."""
        if vm in self._files or not vm.logs_writes:
            return None
        return DirtyLog.open(vm.pid, memory)

    def unknown(self, vm: Vm) -> None:
        self._files[vm] = None

    def captured(self, vm: Vm, image: Path, sandbox_dir: Path) -> None:
        """`image` (a published image's memory) is what the VM's RAM equalled at its capture."""
        state, kept_state = image.with_name(DEVICE_STATE), sandbox_dir / CAPTURED_STATE
        if state.is_file():
            link_into(state, kept_state)
        else:
            kept_state.unlink(missing_ok=True)
        self._files[vm] = MemoryImage(link_into(image, sandbox_dir / CAPTURED), kept_state)

    def making(self, vm: Vm) -> asyncio.Future[None]:
        """A capture starts making the VM's next reference (set the future's result when it
        is done, whatever the outcome)."""
        self.unknown(vm)
        self._making[vm] = made = asyncio.get_running_loop().create_future()
        return made

    def made(self, vm: Vm, made: asyncio.Future[None], image: Path | None,
             sandbox_dir: Path) -> None:
        """The capture behind `made` is over; `image` is its image, None if it failed."""
        if self._making.get(vm) is made:
            del self._making[vm]
            if image is not None and not vm.stopping:
                self.captured(vm, image, sandbox_dir)
        made.set_result(None)


@dataclass
class MemoryCapture:
    """One capture of `vm`'s memory (RAM mapped from `base`) into `out`."""

    vm: Vm
    base: MemoryImage
    out: MemoryImage
    ledger: CaptureLedger
    timer: PhaseTimer  # the capture's operation
    dirty: DirtyLog | None = None
    copied: dict[str, int] = field(default_factory=dict)  # pages, by phase
    image_timings: dict[str, float] = field(default_factory=dict)  # of a deferred image
    # Whether the image is made from a frozen copy after the guest continues (`finishing`).
    deferred: bool = False
    _reference: Path | None = None  # what a deferred image is made on, linked beside it
    _later: _Later | None = None  # the frozen copy, until `finishing` takes it
    _forking: asyncio.Future[None] | None = None  # the fork started while stopped
    # `_reference` as the ledger found it, memory and device state (a fork's delta is onto it).
    _reference_image: MemoryImage | None = None

    async def while_running(self) -> None:
        """Before the guest is stopped: with a frozen copy to come, only what the copy needs;
        else the image made while the guest runs: the pages written since the reference (or,
        with the log's start unknown, every private page) from the process, the rest from the
        reference (or the base); then passes over what was written meanwhile."""
        await self.ledger.settled(self.vm)
        pid, base = self.vm.pid, self.base.memory
        self.dirty = await asyncio.to_thread(DirtyLog.open, pid, base)
        if self.dirty is None:  # the changed pages are copied once the guest is stopped
            await self.timer.timed("copy_base", asyncio.to_thread(
                copy_sparse, base, self.out.memory))
            return
        reference = self.ledger.reference(self.vm, self.base)
        if reference is not None and self.vm.freezes:
            self._reference = link_into(reference.memory,
                                        self.out.memory.with_name(REFERENCE))
            self._reference_image = reference
            self.deferred = True
            return
        self.ledger.unknown(self.vm)  # until this capture is done
        runs = await asyncio.to_thread(self._changed, reference)
        await self.timer.timed("copy_base", asyncio.to_thread(
            copy_sparse, base if reference is None else reference.memory, self.out.memory))
        self.copied["precopy0"] = await self.timer.timed("precopy0", asyncio.to_thread(
            copy_pages, pid, runs, self.out.memory))
        for n in range(1, _PASSES):
            if self.copied[f"precopy{n - 1}"] < _SETTLED_PAGES:
                break
            self.copied[f"precopy{n}"] = await self.timer.timed(
                f"precopy{n}", asyncio.to_thread(self._pass))

    async def while_stopped(self, directory: Path) -> None:
        """The device state and the pages written since the last pass (all the private ones,
        without a log); or, deferred, the pages written since the reference and a frozen copy
        to read them from."""
        devices = directory / DEVICES
        try:
            if self.deferred:
                await self._freeze(devices)
                return
            await self.vm.save_device_state(devices)
            parts = ImageParts.read(self.base.device_state, devices)
            result = await asyncio.to_thread(self._write_stopped, parts)
        finally:
            devices.unlink(missing_ok=True)
        self.copied["stopped"] = result.pages

    def done(self, image: Path, sandbox_dir: Path) -> None:
        """`image` (published) is what the VM's RAM equalled when it was stopped."""
        if self.dirty is not None:
            self.ledger.captured(self.vm, image, sandbox_dir)

    async def fork_delta(self, directory: Path) -> None:
        """For a fork's first children, after the guest continued: the pages written since the
        deferred image's reference as a delta onto it (memory/fork_delta.py), when they are few.
        Without it (or when it fails) the children wait for the image."""
        later, onto = self._later, self._reference_image
        if later is None or onto is None:
            return
        try:
            if await asyncio.to_thread(worth_writing, onto, later.runs):
                self.copied["fork_delta"] = await self.timer.timed(
                    "fork_delta", asyncio.to_thread(
                        write_fork_delta, later.copy.pid, onto, later.parts, later.runs,
                        directory))
        except (OSError, CaptureFailed) as err:  # the children wait for the image
            log.warning("fork delta not written", extra={"error": str(err)})

    def finishing(self, sandbox_dir: Path) -> Coroutine[None, None, MemoryImage]:
        """The deferred image's making, from the frozen copy (which goes after). It leaves
        nothing behind on failure; `close` no longer concerns the copy."""
        later, self._later = self._later, None
        self._reference = None
        assert later is not None
        return self._finish(later, sandbox_dir)

    async def close(self) -> None:
        """Let go of the log, and of a frozen copy no `finishing` took."""
        if self._forking is not None:
            await asyncio.gather(self._forking, return_exceptions=True)
        if self.dirty is not None:
            self.dirty.close()
        if self._later is not None:
            later, self._later = self._later, None
            await asyncio.to_thread(later.copy.release)
            self.ledger.made(self.vm, later.made, None, self.out.memory.parent)
        if self._reference is not None:
            forget(self.out.memory.parent)

    async def _finish(self, later: _Later, sandbox_dir: Path) -> MemoryImage:
        directory = self.out.memory.parent
        made: Path | None = None
        try:
            self.image_timings.update(await asyncio.to_thread(
                fill, later.copy.pid, later.runs, directory))
            image = publish_image(directory)
            made = image.memory
            return image
        except BaseException:
            discard_image(directory)
            raise
        finally:
            forget(directory)
            await asyncio.to_thread(later.copy.release)
            self.ledger.made(self.vm, later.made, made, sandbox_dir)

    async def _freeze(self, devices: Path) -> None:
        """Re-arm the log and save the device state, then start forking QEMU: the fork (a copy
        of its page tables) may overlap the rest of the stopped work (`frozen` waits for it)."""
        assert self.dirty is not None
        made = self.ledger.making(self.vm)
        try:
            runs = await asyncio.to_thread(self.dirty.take)
            await self.vm.save_device_state(devices)
            parts = ImageParts.read(self.base.device_state, devices)
            self._presize()
        except BaseException:
            self.ledger.made(self.vm, made, None, self.out.memory.parent)
            raise
        self._forking = asyncio.ensure_future(self._fork(runs, parts, made))

    async def frozen(self) -> None:
        """Wait for the fork a deferred capture started (the guest must stay stopped until)."""
        if self._forking is not None:
            await self._forking

    async def _fork(self, runs: list[PageRun], parts: ImageParts,
                    made: asyncio.Future[None]) -> None:
        """Fork QEMU, and put on disk what the agent's next run would need to make the image
        from the copy (memory/deferred.py): a snapshot outlives a crash of the agent."""
        assert self.dirty is not None
        directory = self.out.memory.parent
        try:
            copy = await self.timer.timed("freeze", self.vm.freeze())
            try:
                await asyncio.to_thread(recorded, copy, self.dirty.mappings, parts, directory)
            except BaseException:
                await asyncio.to_thread(copy.release)
                raise
        except BaseException:
            self.ledger.made(self.vm, made, None, directory)
            raise
        self._later = _Later(copy, runs, made, parts)
        self.copied["frozen"] = sum(run.length for run in runs) // PAGE_SIZE

    def _presize(self) -> None:
        """The image's memory file, empty at its final size: restores may map it while it is
        filled in."""
        assert self._reference is not None
        fd = os.open(self.out.memory, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, self._reference.stat().st_size)
        finally:
            os.close(fd)

    def _write_stopped(self, parts: ImageParts) -> DeltaResult:
        runs = (self.dirty.take() if self.dirty is not None
                else private_runs(self.vm.pid, self.base.memory))
        return write_image(self.vm.pid, parts, runs, self.out.memory, self.out.device_state)

    def _changed(self, reference: MemoryImage | None) -> list[PageRun]:
        """Re-arms the log: the pages that differ from `reference`, or from the base."""
        assert self.dirty is not None
        written = self.dirty.take()
        if reference is not None:
            return written
        return list(private_runs(self.vm.pid, self.base.memory))

    def _pass(self) -> int:
        assert self.dirty is not None
        return copy_pages(self.vm.pid, self.dirty.take(), self.out.memory)


@dataclass(frozen=True)
class _Later:
    """What a deferred image is made of: a frozen copy and the pages to read from it (its
    device state is written already)."""

    copy: FrozenCopy
    runs: list[PageRun]
    made: asyncio.Future[None]
    parts: ImageParts


def pages_fields(capture: MemoryCapture) -> dict[str, int]:
    return {f"{phase}_pages": count for phase, count in capture.copied.items()}
