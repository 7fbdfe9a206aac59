"""Memory images: guest RAM that restores map copy-on-write, and its device state.

A sandbox maps its base RAM (template or memory image) with share=off: each sandbox owns only the
pages it dirties, the rest come from one page cache. An image is `memory`, a sparse file, and
`device.state`, the stream a restore loads into a QEMU mapping it; `device.state` is put in place
last: its presence means the image is complete. It is made in one of two ways:

- From a capture of a VM running on a memory image (memory/capture.py), directly: a sparse copy of
  the image its RAM equalled at its previous capture (or of its base) with the pages the guest
  wrote since copied over it, mostly from a frozen copy of the guest after the snapshot call
  returned (`MemoryImages.build`; a restore may launch its VM meanwhile, and waits for it to
  load the device state).
- From a full capture stream, of a VM that runs on no image (after a cold boot): QEMU 7.2
  migrates share=off RAM in full, and the stream is split (vmm/stream.py) into the RAM block's
  pages and the rest, in the background (a restore waits for it).

A pause takes a delta capture where it can (written after the pause returns, memory/paused.py):
`delta.state` holds the pages the guest changed and its device state, to be loaded onto
`base.memory`: hard links to the image the sandbox ran on and its device state (`base.state`),
so that neither a deleted snapshot nor a rebuilt template can take them away.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path

from aenv_common.errors import Internal
from aenv_nodeagent.vmm.argv import MEMORY_BACKEND_ID
from aenv_nodeagent.vmm.stream import split_ram_block

log = logging.getLogger(__name__)

MEMORY = "memory"
DEVICE_STATE = "device.state"
BASE_MEMORY = "base.memory"
BASE_STATE = "base.state"
DELTA = "delta.state"
# Beside a delta: the runs of the base the guest read before its pause (vmm/hot_pages.py).
HOT_PAGES = "hot.pages"
# A capture's device state as QEMU saved it, until the image's or delta's state holds it.
DEVICES = "devices.state"
# In a running sandbox's directory: the image its RAM equalled at its last capture
# (memory/capture.py).
CAPTURED = "captured.memory"
CAPTURED_STATE = "captured.state"  # its device state: a delta onto it can be loaded (fork_delta.py)


@dataclass(frozen=True)
class MemoryImage:
    memory: Path
    device_state: Path

    def __iter__(self) -> Iterator[Path]:
        return iter((self.memory, self.device_state))


def image_in(directory: Path) -> MemoryImage:
    return MemoryImage(directory / MEMORY, directory / DEVICE_STATE)


def complete_image(directory: Path) -> MemoryImage | None:
    image = image_in(directory)
    return image if image.device_state.is_file() and image.memory.is_file() else None


def partial_image(directory: Path) -> MemoryImage:
    return MemoryImage(directory / f"{MEMORY}.part", directory / f"{DEVICE_STATE}.part")


def publish_image(directory: Path) -> MemoryImage:
    """Put a made image in place: the memory first, as a restore trusts an image once its
    device state is there."""
    partial, final = partial_image(directory), image_in(directory)
    partial.memory.replace(final.memory)
    partial.device_state.replace(final.device_state)
    return final


def discard_image(directory: Path) -> None:
    """The image (complete or not) in `directory`: before a new capture replaces it."""
    for path in (*image_in(directory), *partial_image(directory), directory / CAPTURED,
                 directory / CAPTURED_STATE):
        path.unlink(missing_ok=True)


def discard_interrupted(directory: Path) -> None:
    """What a materialization or delta capture cut short by a crash left behind. The capture
    stream is only removed after success, so the image is simply made again on first use."""
    pinned = (BASE_MEMORY, BASE_STATE, CAPTURED, CAPTURED_STATE)
    pin_links = (_pin_link(directory / name) for name in pinned)
    for leftover in (*partial_image(directory), partial_delta(directory), *pin_links,
                     directory / DEVICES):
        leftover.unlink(missing_ok=True)


def delta_image(directory: Path) -> MemoryImage | None:
    """A delta capture in `directory`: the memory to map and the stream to load onto it."""
    image = MemoryImage(directory / BASE_MEMORY, directory / DELTA)
    complete = image.memory.is_file() and image.device_state.is_file()
    return image if complete and (directory / BASE_STATE).is_file() else None


def partial_delta(directory: Path) -> Path:
    return directory / f"{DELTA}.part"


def pin_base(base: MemoryImage, directory: Path) -> MemoryImage:
    """`base` (memory and device state) hard-linked into `directory` as the base of its delta
    captures: it stays, whatever becomes of where it came from."""
    pinned = MemoryImage(directory / BASE_MEMORY, directory / BASE_STATE)
    for source, target in zip(base, pinned, strict=True):
        link_into(source, target)
    return pinned


def link_into(source: Path, target: Path) -> Path:
    """`target` made a hard link to `source`, replacing whatever it was in one step."""
    if target.exists() and os.path.samefile(source, target):
        return target
    staged = _pin_link(target)
    staged.unlink(missing_ok=True)
    os.link(source, staged)
    staged.replace(target)
    return target


def _pin_link(target: Path) -> Path:
    return target.with_name(f"{target.name}.link")


def discard_delta(directory: Path) -> None:
    """The delta capture in `directory` and its base (their memory is of no use any more)."""
    for name in (DELTA, BASE_MEMORY, BASE_STATE, DEVICES):
        (directory / name).unlink(missing_ok=True)
    partial_delta(directory).unlink(missing_ok=True)


async def materialize(stream: Path, directory: Path) -> MemoryImage:
    """Turn the capture `stream` into `directory/memory` and `directory/device.state`, then drop
    the stream. Leaves nothing behind on failure or cancellation."""
    partial = partial_image(directory)
    started = time.perf_counter()
    stop = threading.Event()
    split = asyncio.ensure_future(asyncio.to_thread(
        split_ram_block, stream, MEMORY_BACKEND_ID, partial.memory, partial.device_state, stop))
    try:
        try:
            result = await asyncio.shield(split)
        except asyncio.CancelledError:
            stop.set()  # the thread cannot be interrupted: it stops at its next check
            await asyncio.gather(split, return_exceptions=True)
            raise
        except OSError as err:
            raise Internal(f"cannot make a memory image from {stream.name}: {err}") from err
        final = publish_image(directory)
    except BaseException:
        discard_interrupted(directory)
        raise
    stream.unlink(missing_ok=True)
    log.info("memory image materialized", extra={
        "directory": str(directory), "pages": result.pages_written,
        "device_state_bytes": result.rest_bytes,
        "ms": round((time.perf_counter() - started) * 1000, 1)})
    return final


class MemoryImages:
    """One making of an image per directory: a materialization, started eagerly in the
    background or on first use, or a capture finishing from a frozen copy (`build`). Concurrent
    restores of the same image wait for the same one."""

    def __init__(self) -> None:
        self._tasks: dict[Path, asyncio.Task[MemoryImage]] = {}
        self._cancelled: set[asyncio.Task[MemoryImage]] = set()
        self._builds: set[asyncio.Task[MemoryImage]] = set()

    def build(self, directory: Path, making: Coroutine[None, None, MemoryImage]) -> None:
        """Make `directory`'s image by `making`, now, in the background. Unlike a
        materialization, what it needs goes with it: `close` waits for it."""
        task = asyncio.ensure_future(making)
        task.add_done_callback(lambda t: self._finished(directory, t))
        task.add_done_callback(self._builds.discard)
        self._tasks[directory] = task
        self._builds.add(task)

    def ensure(self, stream: Path, directory: Path) -> asyncio.Future[MemoryImage]:
        if (image := complete_image(directory)) is not None:
            done: asyncio.Future[MemoryImage] = asyncio.get_running_loop().create_future()
            done.set_result(image)
            return done
        task = self._tasks.get(directory)
        if task is None:
            task = asyncio.ensure_future(materialize(stream, directory))
            task.add_done_callback(lambda t: self._finished(directory, t))
            self._tasks[directory] = task
        return task

    def building_memory(self, directory: Path) -> Path | None:
        """The memory file a build is filling in (at its final size) while `directory`'s image
        is not published yet; None otherwise (the build may still be letting go of its copy)."""
        task = self._tasks.get(directory)
        memory = partial_image(directory).memory
        building = task is not None and task in self._builds and not task.done()
        return memory if building and memory.is_file() else None

    def cancel_soon(self, directory: Path) -> None:
        """Stop a materialization (its owner is going away); `close` waits for its cleanup. A
        build is not stopped: it holds a frozen copy of a guest, which only it lets go of."""
        task = self._tasks.get(directory)
        if task in self._builds:
            return
        self._tasks.pop(directory, None)
        if task is not None and not task.done():
            task.cancel()
            self._cancelled.add(task)
            task.add_done_callback(self._cancelled.discard)

    async def cancelled(self, directory: Path) -> None:
        """Stop a materialization (or let a build end) and wait until it has let go of its
        files."""
        task = self._tasks.get(directory)
        self.cancel_soon(directory)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def close(self) -> None:
        """Let every build finish; cancel every materialization and wait until their threads
        have stopped."""
        await asyncio.gather(*self._builds, return_exceptions=True)
        for directory in list(self._tasks):
            self.cancel_soon(directory)
        await asyncio.gather(*self._cancelled, return_exceptions=True)

    def _finished(self, directory: Path, task: asyncio.Task[MemoryImage]) -> None:
        if self._tasks.get(directory) is task:
            del self._tasks[directory]
        if not task.cancelled() and (err := task.exception()) is not None:
            log.warning("memory image materialization failed",
                        extra={"directory": str(directory), "error": str(err)})
