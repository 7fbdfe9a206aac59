"""A snapshot's memory image made after its call returned, from a frozen copy of the guest
(memory/capture.py), and finished by the agent's next run if this one dies first.

Before the call returns, the snapshot's directory holds all the image needs besides the copy: the
image it builds on (`REFERENCE`, linked), its device state (`device.state.part`) and which process
the copy is (`RECORD`). The copy outlives the agent (vmm/frozen.py). So the next run reads from
it every page the copy holds privately: a superset of those written since the reference, each as
it was at the fork. (A page the guest gave back to the host since its base reads as the base's,
or as the reference's; the guest holds it free and does not read it.)
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from aenv_common.errors import Internal
from aenv_nodeagent.memory.frozen_file import FROZEN_FILE
from aenv_nodeagent.memory.images import (
    MemoryImage,
    complete_image,
    discard_image,
    partial_image,
    publish_image,
)
from aenv_nodeagent.vmm.delta import (
    ImageParts,
    PageRun,
    RamMapping,
    copy_pages,
    copy_sparse,
    private_runs_in,
    write_state,
)
from aenv_nodeagent.vmm.frozen import FrozenCopy

# What the image is made on, linked into the snapshot's directory: whatever becomes of the
# sandbox, the copy has it.
REFERENCE = "reference.memory"
RECORD = "frozen.json"  # the copy: pid, start time and where it maps the RAM file


@dataclass(frozen=True)
class FrozenRecord:
    pid: int
    start_time: int
    mappings: list[RamMapping]

    def write(self, directory: Path) -> None:
        FROZEN_FILE.write(directory / RECORD, {
            "pid": self.pid, "start_time": self.start_time,
            "mappings": [[m.address, m.length, m.file_offset] for m in self.mappings]})

    @classmethod
    def read(cls, directory: Path) -> FrozenRecord | None:
        """None when there is none, or it is unreadable.

        :raise StateFileError: written by a newer agent (memory/frozen_file.py).
        """
        try:
            data = FROZEN_FILE.read(directory / RECORD)
            return cls(int(data["pid"]), int(data["start_time"]),
                       [RamMapping(*(int(n) for n in m)) for m in data["mappings"]])
        except (OSError, ValueError, KeyError, TypeError):
            return None


def recorded(copy: FrozenCopy, mappings: list[RamMapping], parts: ImageParts,
             directory: Path) -> None:
    """Put on disk what the agent's next run needs to finish the image from `copy`. Blocking."""
    write_state(parts, partial_image(directory).device_state)
    FrozenRecord(copy.pid, copy.start_time, mappings).write(directory)


def fill(pid: int, runs: list[PageRun], directory: Path) -> dict[str, float]:
    """Fill the image's memory file: the reference's data, then `runs` from the copy `pid`
    over it. Blocking; the phases' milliseconds."""
    memory = partial_image(directory).memory
    started = time.perf_counter()
    copy_sparse(directory / REFERENCE, memory)
    copied = time.perf_counter()
    copy_pages(pid, runs, memory)
    return {"copy_base": (copied - started) * 1000,
            "pages": (time.perf_counter() - copied) * 1000}


def forget(directory: Path) -> None:
    """What only the making of the image needed."""
    record = directory / RECORD
    cut_writes = (record.with_suffix(".tmp"), record.with_name(f".{RECORD}.tmp"))
    for path in (directory / REFERENCE, record, *cut_writes):
        path.unlink(missing_ok=True)


def recorded_copy(directory: Path) -> FrozenCopy | None:
    """The copy an earlier run left for the image in `directory`, if it still lives."""
    record = FrozenRecord.read(directory)
    return None if record is None else FrozenCopy.find(record.pid, record.start_time)


async def finish_interrupted(directory: Path, copy: FrozenCopy | None) -> MemoryImage:
    """The image an earlier run of the agent left unfinished in `directory`, made from its
    `copy` (`recorded_copy`); the copy is released after. Leaves no image on failure."""
    try:
        if (image := complete_image(directory)) is not None:
            return image  # published before the agent stopped, but not recorded as done
        record = FrozenRecord.read(directory)
        state = partial_image(directory).device_state
        if copy is None or record is None or not state.is_file():
            raise Internal("its frozen copy is gone")
        await asyncio.to_thread(_refill, copy.pid, record.mappings, directory)
        return publish_image(directory)
    except BaseException:
        discard_image(directory)
        raise
    finally:
        forget(directory)
        if copy is not None:
            await asyncio.to_thread(copy.release)


def _refill(pid: int, mappings: list[RamMapping], directory: Path) -> None:
    """Over whatever the interrupted making wrote: it wrote the same values, or, for pages the
    guest holds free, values it does not read."""
    try:
        fill(pid, list(private_runs_in(pid, mappings)), directory)
    except OSError as err:
        raise Internal(f"cannot finish the memory image from its frozen copy: {err}") from err
