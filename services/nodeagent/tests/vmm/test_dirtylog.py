"""The dirty log on a real process: the preloaded library (compiled here with the node's gcc)
registers the process's copy-on-write mapping of a file, and the node agent reads and re-arms the
log from outside with PAGEMAP_SCAN, as it does for QEMU."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts.preload import ensure_preload_library
from aenv_nodeagent.vmm.delta import PageRun, copy_pages, private_runs
from aenv_nodeagent.vmm.dirtylog import DirtyLog
from aenv_nodeagent.vmm.preload import preload_env
from aenv_nodeagent.vmm.stream import PAGE_SIZE

from .preloaded import PAGES, Writer, fill, page_numbers, start_writer


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    return asyncio.run(ensure_preload_library(cache)).path


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    return fill(tmp_path / "memory")


@pytest.fixture
def logged(memory: Path, library: Path) -> Iterator[Writer]:
    yield from start_writer(memory, preload_env(library, memory))


@pytest.fixture
def unlogged(memory: Path) -> Iterator[Writer]:
    yield from start_writer(memory, {})


def pages(runs: list[PageRun]) -> int:
    return sum(run.length for run in runs) // PAGE_SIZE


def test_the_log_holds_the_pages_written_since_the_last_take(
    logged: Writer, memory: Path
) -> None:
    log = DirtyLog.open(logged.proc.pid, memory)
    assert log is not None
    try:
        assert log.take() == []  # armed when the file was mapped
        logged.write(3, 4, 9)
        assert page_numbers(log.take()) == [3, 4, 9]
        assert log.take() == []  # re-armed by the take
        logged.write(9, 60)
        taken = log.take()
        assert page_numbers(taken) == [9, 60] and pages(taken) == 2
    finally:
        log.close()


def test_written_pages_copy_into_an_earlier_image(
    logged: Writer, memory: Path, tmp_path: Path
) -> None:
    log = DirtyLog.open(logged.proc.pid, memory)
    assert log is not None
    image = tmp_path / "image"
    image.write_bytes(memory.read_bytes())
    try:
        logged.write(1, 2)
        assert copy_pages(logged.proc.pid, log.take(), image) == 2
        logged.write(2, 7)
        assert copy_pages(logged.proc.pid, log.take(), image) == 2
    finally:
        log.close()
    fills = [0x80 + n if n in (1, 2, 7) else n for n in range(PAGES)]
    assert image.read_bytes() == b"".join(bytes([fill]) * PAGE_SIZE for fill in fills)


def test_write_protected_unfaulted_pages_are_not_taken_for_private_ones(
    logged: Writer, memory: Path
) -> None:
    """The log leaves pte markers, which the page map shows as swap entries."""
    logged.write(5)
    runs = list(private_runs(logged.proc.pid, memory))
    assert page_numbers(runs) == [5]


def test_a_process_started_without_the_library_keeps_no_log(
    unlogged: Writer, memory: Path
) -> None:
    assert DirtyLog.open(unlogged.proc.pid, memory) is None


def test_until_first_taken_the_log_names_exactly_the_private_pages(
    logged: Writer, memory: Path
) -> None:
    """What a delta pause relies on: every page that differs from the file was written since
    the process mapped it. Reading the log leaves it armed as it was."""
    log = DirtyLog.open(logged.proc.pid, memory)
    assert log is not None
    try:
        logged.write(2, 3, 40)
        private = list(private_runs(logged.proc.pid, memory))
        assert log.written() == log.written() == private
        assert page_numbers(log.take()) == [2, 3, 40]
    finally:
        log.close()
