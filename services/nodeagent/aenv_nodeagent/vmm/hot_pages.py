"""The pages of its RAM file a guest read, kept at its pause and read ahead at its resume.

A paused sandbox resumes by mapping its base memory file copy-on-write and loading the pages it
wrote (the delta) over it. Every other page it touches is a fault served by the page cache, or,
once the cache has let the file go (a host full of paused sandboxes, a node agent restart), by
the disk, one page at a time while the guest waits. At the pause, the pages of the file the
process still maps as the file's (present, not private: read since the resume, never written)
are the guest's working set in the file; they are kept as runs of bytes beside the delta, and a
resume asks the kernel to read them ahead (`POSIX_FADV_WILLNEED`) as the VM is launched, so the
guest's first faults find them cached. Pages the guest wrote need none of this: the delta holds
them and the restore loads them whole.
"""

from __future__ import annotations

import array
import logging
import os
import re
import threading
from pathlib import Path

from aenv_nodeagent.vmm.delta import page_map, ram_mappings
from aenv_nodeagent.vmm.stream import PAGE_SIZE

log = logging.getLogger(__name__)

# /proc/<pid>/pagemap's top byte: present (0x80) and a file page (0x20), i.e. mapped as the file's.
_FILE_PAGE = bytes(1 if top & 0xA0 == 0xA0 else 0 for top in range(256))
_RUN = re.compile(b"\x01+")

Run = tuple[int, int]  # (offset in the file, length), bytes


def touched_runs(pid: int, memory: Path) -> list[Run]:
    """The runs of `memory` (its RAM file) that QEMU `pid` maps as the file's pages, in file
    order. Blocking.

    :raise CaptureFailed: the process does not map the file, or its page map reads short.
    :raise OSError: its page map cannot be read.
    """
    runs: list[Run] = []
    for mapping in ram_mappings(pid, memory):
        for run in _RUN.finditer(page_map(pid, mapping)[7::8].translate(_FILE_PAGE)):
            runs.append((mapping.file_offset + run.start() * PAGE_SIZE,
                         (run.end() - run.start()) * PAGE_SIZE))
    return sorted(runs)


def write_runs(path: Path, runs: list[Run]) -> None:
    """Keep `runs` at `path` (pairs of little-endian u64), replaced whole."""
    flat = array.array("Q", (value for run in runs for value in run))
    if flat.itemsize != 8:
        raise OSError("no 64-bit array type")
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(flat.tobytes())
    partial.replace(path)


def read_runs(path: Path) -> list[Run]:
    """The runs kept at `path`; none if there is no such file or it is torn."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    if len(raw) % 16:
        return []
    flat = array.array("Q")
    flat.frombytes(raw)
    return list(zip(flat[0::2], flat[1::2], strict=True))


def read_ahead(memory: Path, runs: list[Run]) -> int:
    """Ask the kernel to read `runs` of `memory` into the page cache (cached pages cost only a
    lookup); the bytes asked for. Blocking while the reads are queued.

    :raise OSError: the file cannot be opened.
    """
    fd = os.open(memory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for offset, length in runs:
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)
    return sum(length for _, length in runs)


def read_ahead_soon(memory: Path, kept: Path) -> None:
    """`read_ahead` of the runs kept at `kept`, on a thread of its own (reading them too): the
    resume does not wait for it (its VM's faults are served either way, the sooner the more of
    them it read)."""
    threading.Thread(target=_read_ahead_logged, args=(memory, kept), daemon=True,
                     name="hot-pages").start()


def _read_ahead_logged(memory: Path, kept: Path) -> None:
    try:
        read_ahead(memory, read_runs(kept))
    except OSError as err:
        log.warning("hot pages not read ahead", extra={"memory": str(memory), "error": str(err)})
