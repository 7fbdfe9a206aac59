"""Which guest RAM pages a running QEMU wrote since we last asked.

QEMU 7.2 tracks dirty pages only inside a migration, and sends every page of a copy-on-write RAM
block anyway. So a VM mapping its RAM file copy-on-write starts with `dirtylog.c` preloaded: it
registers that mapping with an asynchronous write-protect userfaultfd (Linux 6.7+) and
write-protects it. The kernel then notes each page's first write, and `DirtyLog.take` reads and
re-arms those notes atomically with the PAGEMAP_SCAN ioctl on the process's pagemap.

A capture can then copy what the guest wrote while it keeps running, stop it, and copy only what
it wrote meanwhile; and a later capture starts from the earlier image instead of the base.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from pathlib import Path

from aenv_nodeagent.vmm.delta import PageRun, RamMapping, ram_mappings

MEMORY_ENV = "AENV_DIRTY_LOG_MEMORY"  # the RAM file whose copy-on-write mapping is logged

_PAGEMAP_SCAN = 0xC0606610  # _IOWR('f', 16, struct pm_scan_arg)
_PM_SCAN_WP_MATCHING = 1 << 0  # write-protect (re-arm) the pages reported
_PM_SCAN_CHECK_WPASYNC = 1 << 1  # fail with EPERM on memory not registered for it
_PAGE_IS_WRITTEN = 1 << 1
_SCAN_ARG = struct.Struct("12Q")
_REGIONS = 4096  # page_region entries per ioctl (start, end, categories)


class DirtyLog:
    """The write log of QEMU `pid`'s RAM mappings. `take` is blocking; run it in a thread."""

    def __init__(self, pid: int, mappings: list[RamMapping], pagemap: int) -> None:
        self.pid = pid
        self._mappings = mappings
        self._pagemap = pagemap
        self._regions = (ctypes.c_uint64 * (3 * _REGIONS))()

    @classmethod
    def open(cls, pid: int, memory: Path) -> DirtyLog | None:
        """The log of QEMU `pid`'s mapping of `memory`, or None when it keeps none."""
        mappings = ram_mappings(pid, memory)
        pagemap = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        log = cls(pid, mappings, pagemap)
        try:
            log._scan(mappings[0], protect=False, limit=1)
        except OSError as err:
            log.close()
            if err.errno in (errno.EPERM, errno.EINVAL, errno.ENOTTY):  # not registered
                return None
            raise
        return log

    @property
    def mappings(self) -> list[RamMapping]:
        """Where the process maps its RAM file."""
        return self._mappings

    def take(self) -> list[PageRun]:
        """The runs of pages written since the last `take` (or since QEMU mapped the file),
        write-protected again in the same step so later writes are logged anew."""
        return [run for mapping in self._mappings
                for run in self._scan(mapping, protect=True)]

    def written(self) -> list[PageRun]:
        """The runs of pages written since the last `take`, leaving the log as it is."""
        return [run for mapping in self._mappings
                for run in self._scan(mapping, protect=False)]

    def close(self) -> None:
        os.close(self._pagemap)

    def _scan(self, mapping: RamMapping, *, protect: bool, limit: int = 0) -> list[PageRun]:
        flags = _PM_SCAN_CHECK_WPASYNC | (_PM_SCAN_WP_MATCHING if protect else 0)
        end = mapping.address + mapping.length
        start, runs = mapping.address, []
        while start < end:
            arg = bytearray(_SCAN_ARG.pack(
                _SCAN_ARG.size, flags, start, end, 0, ctypes.addressof(self._regions),
                _REGIONS, limit, 0, _PAGE_IS_WRITTEN, 0, _PAGE_IS_WRITTEN))
            count = fcntl.ioctl(self._pagemap, _PAGEMAP_SCAN, arg)
            regions = self._regions
            for i in range(0, 3 * count, 3):
                first = regions[i] - mapping.address
                runs.append(mapping.run(first, regions[i + 1] - regions[i]))
            walk_end = _SCAN_ARG.unpack(arg)[4]
            if limit or walk_end <= start:
                break
            start = walk_end
        return runs
