"""Hot pages from a real process mapping a file copy-on-write, kept and read back, and read ahead
into the page cache of a real file (the pause and resume that use them: lifecycle VM tests)."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import time
from pathlib import Path

from aenv_nodeagent.vmm.hot_pages import read_ahead, read_runs, touched_runs, write_runs
from aenv_nodeagent.vmm.stream import PAGE_SIZE


def pages_of(runs: list[tuple[int, int]]) -> set[int]:
    return {page for offset, length in runs
            for page in range(offset // PAGE_SIZE, (offset + length) // PAGE_SIZE)}


def test_the_pages_a_process_read_are_hot_and_those_it_wrote_are_not(
    memory: Path, dirtier: subprocess.Popen[str],
) -> None:
    runs = touched_runs(dirtier.pid, memory)

    hot = pages_of(runs)
    assert 2 in hot  # read: still the file's page
    assert not {1, 5} & hot  # written: private, the delta's
    assert hot <= set(range(8))
    assert runs == sorted(runs)


def test_runs_are_kept_and_read_back_and_a_torn_file_reads_as_none(tmp_path: Path) -> None:
    kept = tmp_path / "hot.pages"
    runs = [(0, PAGE_SIZE), (5 * PAGE_SIZE, 3 * PAGE_SIZE), (1 << 40, PAGE_SIZE)]

    write_runs(kept, runs)

    assert read_runs(kept) == runs
    assert read_runs(tmp_path / "none") == []
    kept.write_bytes(kept.read_bytes()[:-3])
    assert read_runs(kept) == []


def resident(path: Path) -> set[int]:
    """The pages of `path` in the page cache (mincore over a fresh read-only mapping)."""
    size = path.stat().st_size
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value)
        vector = (ctypes.c_ubyte * (size // PAGE_SIZE))()
        try:
            assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(size), vector) == 0
        finally:
            libc.munmap(ctypes.c_void_p(address), ctypes.c_size_t(size))
    finally:
        os.close(fd)
    return {page for page, flags in enumerate(vector) if flags & 1}


def test_read_ahead_brings_the_runs_into_the_page_cache(tmp_path: Path) -> None:
    path = tmp_path / "memory"
    with path.open("wb") as file:
        file.write(os.urandom(64 * PAGE_SIZE))
        file.flush()
        os.fsync(file.fileno())  # only clean pages can be dropped from the cache
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    assert not resident(path) & set(range(8, 12))

    asked = read_ahead(path, [(8 * PAGE_SIZE, 4 * PAGE_SIZE)])

    assert asked == 4 * PAGE_SIZE
    deadline = time.monotonic() + 10  # the reads are queued, not waited for
    while not set(range(8, 12)) <= resident(path):
        assert time.monotonic() < deadline, "the runs never reached the page cache"
        time.sleep(0.01)
    assert 40 not in resident(path)
