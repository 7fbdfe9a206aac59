"""Frozen copies on a real process under the preload library: the fork keeps the memory as it was
while the process writes on, holds nothing of the process's but its memory, and ends when
released, not when the process it copies quits nor when the agent that asked for it dies."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts.preload import ensure_preload_library
from aenv_nodeagent.vmm.delta import copy_pages, ram_mappings
from aenv_nodeagent.vmm.errors import CaptureError
from aenv_nodeagent.vmm.frozen import COPY_NAME, FreezeChannel, FrozenCopy, stray_copies
from aenv_nodeagent.vmm.preload import preload_env
from aenv_nodeagent.vmm.stream import PAGE_SIZE

from .preloaded import PAGES, Writer, fill, start_writer


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asyncio.run(ensure_preload_library(tmp_path_factory.mktemp("cache"))).path


@pytest.fixture
def memory(tmp_path: Path) -> Path:
    return fill(tmp_path / "memory")


@pytest.fixture
def channel(memory: Path, library: Path) -> Iterator[tuple[FreezeChannel, Writer]]:
    ours, theirs = FreezeChannel.pair()
    try:
        for writer in start_writer(
                memory, preload_env(library, memory, theirs), [theirs.fileno()]):
            theirs.close()  # the writer holds it now
            yield ours, writer
    finally:
        ours.close()
        theirs.close()


def _read_all(pid: int, writer: Writer, memory: Path, out: Path) -> bytes:
    mapping = writer.mapping(memory)
    out.write_bytes(bytes(PAGES * PAGE_SIZE))
    copy_pages(pid, [mapping.run(0, PAGES * PAGE_SIZE)], out)
    return out.read_bytes()


def _image(written: dict[int, int]) -> bytes:
    return b"".join(bytes([written.get(n, n)]) * PAGE_SIZE for n in range(PAGES))


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_frozen_copy_keeps_the_memory_of_the_instant_it_was_taken(
    channel: tuple[FreezeChannel, Writer], memory: Path, tmp_path: Path
) -> None:
    freezer, writer = channel
    writer.write(1, 2)
    copy = await freezer.freeze()
    try:
        writer.write(2, 3)
        # The guest RAM was advised MADV_DONTFORK, which the library ignores.
        assert _read_all(copy.pid, writer, memory, tmp_path / "frozen") == _image(
            {1: 0x81, 2: 0x82})
        assert _read_all(writer.proc.pid, writer, memory, tmp_path / "live") == _image(
            {1: 0x81, 2: 0x82, 3: 0x83})
        await _settled(copy)
        assert os.listdir(f"/proc/{copy.pid}/fd") == []
        assert Path(f"/proc/{copy.pid}/stat").read_text().split()[3] == str(os.getpid())
    finally:
        copy.release()
    assert not _alive(copy.pid)


async def _settled(copy: FrozenCopy) -> None:
    """The copy closes its descriptors and names itself right after the fork, which answers
    first."""
    for _ in range(200):
        if Path(f"/proc/{copy.pid}/comm").read_text() == f"{COPY_NAME}\n":
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the copy is still {Path(f'/proc/{copy.pid}/comm').read_text()!r}")


async def test_a_copy_outlives_the_process_it_copies_until_released(
    channel: tuple[FreezeChannel, Writer], memory: Path, tmp_path: Path
) -> None:
    freezer, writer = channel
    writer.write(5)
    mapping = writer.mapping(memory)
    first, second = await freezer.freeze(), await freezer.freeze()
    try:
        writer.proc.kill()
        writer.proc.wait()
        out = tmp_path / "frozen"
        out.write_bytes(bytes(PAGES * PAGE_SIZE))
        copy_pages(second.pid, [mapping.run(0, PAGES * PAGE_SIZE)], out)
        assert out.read_bytes() == _image({5: 0x85})
        assert _alive(first.pid)
        with pytest.raises(CaptureError, match=r"closed its freeze socket|cannot ask QEMU"):
            await freezer.freeze()
    finally:
        first.release()
        second.release()
    assert not _alive(first.pid) and not _alive(second.pid)


# An agent that starts a writer under the library, has it write page 7, takes a frozen copy,
# prints the copy's pid and start time, and dies without releasing it.
_DYING_AGENT = """
import asyncio, json, os, sys
from pathlib import Path
from aenv_nodeagent.vmm.frozen import FreezeChannel
from aenv_nodeagent.vmm.preload import preload_env
sys.path.insert(0, sys.argv[3])
from preloaded import start_writer
memory, library = Path(sys.argv[1]), Path(sys.argv[2])
ours, theirs = FreezeChannel.pair()
for writer in start_writer(memory, preload_env(library, memory, theirs), [theirs.fileno()]):
    writer.write(7)
    copy = asyncio.run(ours.freeze())
    print(json.dumps([copy.pid, copy.start_time]), flush=True)
    os._exit(0)
"""


async def test_a_copy_outlives_the_agent_and_its_next_run_finds_it(
    memory: Path, library: Path, tmp_path: Path
) -> None:
    agent = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _DYING_AGENT, str(memory), str(library), str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=60, check=True)
    pid, start_time = json.loads(agent.stdout)
    try:
        assert FrozenCopy.find(pid, start_time + 1) is None  # another process with that pid
        copy = FrozenCopy.find(pid, start_time)
        assert copy is not None
        await _settled(copy)
        assert [stray.pid for stray in stray_copies(str(memory))] == [pid]
        assert stray_copies(str(memory), keep=frozenset({pid})) == []
        assert stray_copies(str(tmp_path / "elsewhere")) == []
        out = tmp_path / "frozen"
        out.write_bytes(bytes(PAGES * PAGE_SIZE))
        (mapping,) = ram_mappings(pid, memory)
        copy_pages(pid, [mapping.run(0, PAGES * PAGE_SIZE)], out)
        assert out.read_bytes() == _image({7: 0x87})
        await asyncio.to_thread(copy.release)  # not our child: waits on its pidfd
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_process_without_the_socket_keeps_guest_ram_out_of_its_forks(
    memory: Path, library: Path
) -> None:
    """Without a freeze socket the library leaves QEMU's advice alone."""
    for writer in start_writer(memory, preload_env(library, memory)):
        smaps = Path(f"/proc/{writer.proc.pid}/smaps").read_text()
        block = smaps[smaps.index(str(memory)):]
        flags = next(line for line in block.splitlines() if line.startswith("VmFlags:"))
        assert " dc" in flags  # "do not copy on fork"
