"""What a fork's first children load while its memory image is still being made.

A fork's capture makes its image after the call returns (memory/capture.py): a copy of the
reference's data (on ext4, 128 MiB of a template's in 45-100 ms) with the pages written since
over it. The first children would wait for that copy. When few pages were written since the
reference (the parent's base, or its last capture's image with the device state kept beside it,
memory/capture.py), the capture also writes them as a delta stream (`DELTA`, vmm/delta.py) onto
the reference, pinned beside it in the snapshot's directory: a child restored while the image is
being made maps the reference and loads the delta, as a resume from a delta pause does; later
ones map the image. A child on the delta holds its pages
privately where children on the image share them, so only a delta small beside the base's data
is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.memory.images import MemoryImage, link_into
from aenv_nodeagent.vmm.delta import ImageParts, PageRun, write_delta_stream

DELTA = "fork.delta"
PINNED_MEMORY = "fork.base.memory"
PINNED_STATE = "fork.base.state"
# A delta larger than this share of the base's data is not written: the children wait.
_MOST_OF_BASE = 1 / 4


@dataclass(frozen=True)
class ForkDelta:
    """The base to map (pinned in the snapshot's directory) and the stream to load onto it."""

    base: MemoryImage
    stream: Path


def worth_writing(base: MemoryImage, runs: list[PageRun]) -> bool:
    """Whether `base` is whole (its device state kept) and the pages written since it are few
    beside its data. Blocking."""
    if not base.device_state.is_file():
        return False
    written = sum(run.length for run in runs)
    return written <= base.memory.stat().st_blocks * 512 * _MOST_OF_BASE


def write_fork_delta(
    pid: int, base: MemoryImage, parts: ImageParts, runs: list[PageRun], directory: Path
) -> int:
    """Pin `base` into `directory` and write the delta onto it of the `runs` of frozen copy
    `pid`, published last; the pages written. Blocking.

    :raise CaptureFailed: the copy's pages could not be read, or the stream written.
    """
    link_into(base.memory, directory / PINNED_MEMORY)
    link_into(base.device_state, directory / PINNED_STATE)
    partial = directory / f"{DELTA}.part"
    try:
        result = write_delta_stream(pid, parts, runs, partial)
        partial.replace(directory / DELTA)
    finally:
        partial.unlink(missing_ok=True)
    return result.pages


def fork_delta(directory: Path) -> ForkDelta | None:
    """The delta a fork's capture wrote in `directory`, if it did."""
    found = ForkDelta(MemoryImage(directory / PINNED_MEMORY, directory / PINNED_STATE),
                      directory / DELTA)
    return found if all(path.is_file() for path in (*found.base, found.stream)) else None
