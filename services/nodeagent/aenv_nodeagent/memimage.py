"""Frozen memory images: a snapshot's RAM as a file that every restore maps copy-on-write.

A sandbox maps its base RAM (template or snapshot image) with share=off, which QEMU 7.2 always
migrates in full: a capture `state` holds the guest's whole RAM plus device state. Restoring that
stream directly would give every restored sandbox a private copy of all of it. Instead the stream
is loaded once into a stopped helper QEMU whose RAM is a new file mapped share=on (so the load
writes the RAM into that file), and the helper's device state is captured with x-ignore-shared
(RAM skipped). Restores then map `memory` share=off and load only `device.state`: their pages come
from one page cache, and each sandbox owns only the pages it dirties.

The helper never runs the guest; it stands on a throwaway overlay over the snapshot's frozen disk
layer (loading device state activates the disk) and in its own network slot (the NIC backend must
exist). `device.state` is written last: its presence means the image is complete.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.network import EgressPolicy, NetworkManager
from aenv_nodeagent.sandboxes import launch_restore_target
from aenv_nodeagent.templates import TemplateInputs
from aenv_nodeagent.vmm import QemuVm

log = logging.getLogger(__name__)

MEMORY = "memory"
DEVICE_STATE = "device.state"
WORK_DIR = ".materialize"


@dataclass(frozen=True)
class MemoryImage:
    memory: Path
    device_state: Path

    def __iter__(self) -> Iterator[Path]:
        return iter((self.memory, self.device_state))


async def capture_stream(vm: QemuVm, stream: Path) -> None:
    """The capture `materialize` takes: every RAM page plus device state."""
    await vm.capture(stream, ignore_shared=False)


def complete_image(directory: Path) -> MemoryImage | None:
    image = MemoryImage(directory / MEMORY, directory / DEVICE_STATE)
    return image if image.device_state.is_file() and image.memory.is_file() else None


def _partial(directory: Path) -> MemoryImage:
    return MemoryImage(directory / f"{MEMORY}.part", directory / f"{DEVICE_STATE}.part")


def discard_interrupted(directory: Path) -> None:
    """What a materialization cut short by a crash left behind. The capture stream is only
    removed after success, so the image is simply made again on first use."""
    shutil.rmtree(directory / WORK_DIR, ignore_errors=True)
    for leftover in _partial(directory):
        leftover.unlink(missing_ok=True)


async def materialize(
    inputs: TemplateInputs, stream: Path, disk_layer: Path, directory: Path,
    network: NetworkManager,
) -> MemoryImage:
    """Turn the full capture `stream` (taken over `disk_layer`) into `directory/memory` and
    `directory/device.state`, then drop the stream. Leaves nothing behind on failure."""
    work = directory / WORK_DIR
    partial = _partial(directory)
    started = time.perf_counter()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        await create_overlay(disk_layer, work / "disk.qcow2")
        slot = await network.create_slot(EgressPolicy())
        try:
            vm = await launch_restore_target(inputs, work, partial.memory, slot, mem_shared=True)
            try:
                await vm.restore(stream, run=False, ignore_shared=False)
                await vm.capture(partial.device_state)
            finally:
                await vm.shutdown()
        finally:
            await network.destroy_slot(slot)
        # The memory file first: a restore trusts the image once device.state is in place.
        final = MemoryImage(directory / MEMORY, directory / DEVICE_STATE)
        partial.memory.replace(final.memory)
        partial.device_state.replace(final.device_state)
    except BaseException:
        for leftover in partial:
            leftover.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stream.unlink(missing_ok=True)
    log.info("memory image materialized", extra={
        "directory": str(directory), "ms": round((time.perf_counter() - started) * 1000, 1)})
    return final


class MemoryImages:
    """One materialization per snapshot, started eagerly in the background or on first use;
    concurrent restores of the same snapshot wait for the same one."""

    def __init__(self, network: NetworkManager) -> None:
        self._network = network
        self._tasks: dict[Path, asyncio.Task[MemoryImage]] = {}
        self._cancelled: set[asyncio.Task[MemoryImage]] = set()

    def ensure(
        self, inputs: TemplateInputs, stream: Path, disk_layer: Path, directory: Path
    ) -> asyncio.Future[MemoryImage]:
        if (image := complete_image(directory)) is not None:
            done: asyncio.Future[MemoryImage] = asyncio.get_running_loop().create_future()
            done.set_result(image)
            return done
        task = self._tasks.get(directory)
        if task is None:
            task = asyncio.ensure_future(
                materialize(inputs, stream, disk_layer, directory, self._network))
            task.add_done_callback(lambda t: self._finished(directory, t))
            self._tasks[directory] = task
        return task

    def cancel_soon(self, directory: Path) -> None:
        """Stop a materialization (its snapshot is going away); `close` waits for its cleanup."""
        task = self._tasks.pop(directory, None)
        if task is not None and not task.done():
            task.cancel()
            self._cancelled.add(task)
            task.add_done_callback(self._cancelled.discard)

    async def close(self) -> None:
        """Cancel every materialization and wait until their helper QEMUs and slots are gone."""
        for directory in list(self._tasks):
            self.cancel_soon(directory)
        await asyncio.gather(*self._cancelled, return_exceptions=True)

    def _finished(self, directory: Path, task: asyncio.Task[MemoryImage]) -> None:
        if self._tasks.get(directory) is task:
            del self._tasks[directory]
        if not task.cancelled() and (err := task.exception()) is not None:
            log.warning("memory image materialization failed",
                        extra={"directory": str(directory), "error": str(err)})
