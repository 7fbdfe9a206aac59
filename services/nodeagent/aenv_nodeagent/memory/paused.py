"""The memory of a paused sandbox, written after its pause returns.

A pause stops the guest and saves its device state (`DEVICES`); the pages the guest changed are
then written, by the VM's background quit, into the delta (`DELTA`) onto the image it ran on
(pinned as `BASE_MEMORY` and `BASE_STATE`), from the stopped QEMU, which quits after. Everything
that needs the delta waits for that quit. A device state without a delta marks the write as not
done: if the node agent dies first, the next one's recovery writes it from the QEMU, still
stopped, before killing it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.memory.images import (
    BASE_MEMORY,
    BASE_STATE,
    DELTA,
    DEVICES,
    HOT_PAGES,
    partial_delta,
)
from aenv_nodeagent.vmm.delta import write_delta
from aenv_nodeagent.vmm.dirtylog import DirtyLog
from aenv_nodeagent.vmm.errors import CaptureFailed
from aenv_nodeagent.vmm.hot_pages import touched_runs, write_runs
from aenv_nodeagent.vmm.process import qemu_owning

log = logging.getLogger(__name__)


@dataclass
class PendingDelta:
    """The delta of stopped QEMU `pid`, running on the base pinned in `directory`; `dirty`, its
    dirty log if it holds every page written since QEMU mapped the base."""

    pid: int
    directory: Path
    dirty: DirtyLog | None = None

    def write(self) -> int:
        """Write and publish the delta; the pages it holds. Blocking; run it in a thread."""
        devices, partial = self.directory / DEVICES, partial_delta(self.directory)
        self._keep_hot_pages()
        try:
            result = write_delta(
                self.pid, self.directory / BASE_MEMORY, self.directory / BASE_STATE, devices,
                partial, None if self.dirty is None else self.dirty.written)
            partial.replace(self.directory / DELTA)
        finally:
            partial.unlink(missing_ok=True)
            self.close()
        devices.unlink()
        return result.pages

    def _keep_hot_pages(self) -> None:
        """The pages of the base the guest read, for its resume to read ahead; a pause without
        them is only slower to resume from a cold page cache."""
        try:
            write_runs(self.directory / HOT_PAGES,
                       touched_runs(self.pid, self.directory / BASE_MEMORY))
        except (OSError, CaptureFailed) as err:
            log.warning("hot pages not kept", extra={"sandbox_id": self.directory.name,
                                                     "error": str(err)})

    def close(self) -> None:
        if self.dirty is not None:
            self.dirty.close()
            self.dirty = None


def is_pending(directory: Path) -> bool:
    return (directory / DEVICES).is_file() and not (directory / DELTA).exists()


def finish_pending(directory: Path, pidfile: Path) -> None:
    """Write the delta a pause in `directory` left pending when its node agent died, from its
    QEMU (`pidfile`), if it still runs. Blocking."""
    if not is_pending(directory):
        return
    pid = qemu_owning(pidfile)
    if pid is None:
        log.error("paused sandbox lost its memory: its VM died before the memory was written",
                  extra={"sandbox_id": directory.name})
        return
    try:
        pages = PendingDelta(pid, directory).write()
    except Exception as err:
        log.error("paused sandbox lost its memory: it could not be written",
                  extra={"sandbox_id": directory.name, "error": str(err)})
        return
    log.info("paused memory written by recovery",
             extra={"sandbox_id": directory.name, "delta_pages": pages})
