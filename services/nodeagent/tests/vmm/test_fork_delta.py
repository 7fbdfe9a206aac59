"""A fork's delta (memory/fork_delta.py) from a real process that maps a file copy-on-write.

That children load it onto the base and have their parent's memory is tested with real QEMU in
tests/lifecycle/test_fork_delta_vm.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from aenv_nodeagent.memory.fork_delta import (
    DELTA,
    PINNED_MEMORY,
    PINNED_STATE,
    fork_delta,
    worth_writing,
    write_fork_delta,
)
from aenv_nodeagent.memory.images import MemoryImage
from aenv_nodeagent.vmm.delta import ImageParts, PageRun, private_runs, write_delta
from aenv_nodeagent.vmm.stream import PAGE_SIZE

from .test_delta import base_state, device_state


def test_the_delta_is_the_stream_a_pause_would_write_onto_the_pinned_base(
    tmp_path: Path, memory: Path, dirtier: subprocess.Popen[str]
) -> None:
    (tmp_path / "base").write_bytes(base_state())
    (tmp_path / "devices").write_bytes(device_state())
    base = MemoryImage(memory, tmp_path / "base")
    parts = ImageParts.read(base.device_state, tmp_path / "devices")
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    assert fork_delta(snapshot) is None

    pages = write_fork_delta(dirtier.pid, base, parts, list(private_runs(dirtier.pid, memory)),
                             snapshot)

    assert pages == 2
    found = fork_delta(snapshot)
    assert found is not None and found.stream == snapshot / DELTA
    assert os.path.samefile(found.base.memory, memory)
    assert os.path.samefile(found.base.device_state, base.device_state)
    write_delta(dirtier.pid, memory, base.device_state, tmp_path / "devices",
                tmp_path / "paused")
    assert found.stream.read_bytes() == (tmp_path / "paused").read_bytes()
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(
        [PINNED_MEMORY, PINNED_STATE, DELTA])


def test_a_delta_is_found_only_whole(tmp_path: Path, memory: Path) -> None:
    (tmp_path / PINNED_MEMORY).write_bytes(memory.read_bytes())
    (tmp_path / PINNED_STATE).write_bytes(base_state())
    (tmp_path / f"{DELTA}.part").write_bytes(b"cut short")
    assert fork_delta(tmp_path) is None  # not published
    (tmp_path / f"{DELTA}.part").rename(tmp_path / DELTA)
    assert fork_delta(tmp_path) is not None
    (tmp_path / PINNED_STATE).unlink()
    assert fork_delta(tmp_path) is None  # its base is not whole


def test_only_a_delta_small_beside_the_base_data_is_worth_writing(tmp_path: Path) -> None:
    data = tmp_path / "memory"
    with open(data, "wb") as f:  # 64 pages of data in a file of 1024 (the rest a hole)
        f.write(b"\x01" * 64 * PAGE_SIZE)
        f.truncate(1024 * PAGE_SIZE)
    base = MemoryImage(data, tmp_path / "state")
    assert not worth_writing(base, [])  # its device state is not kept: nothing to load onto
    base.device_state.write_bytes(base_state())
    allocated = data.stat().st_blocks * 512
    assert worth_writing(base, [PageRun(0, 0, allocated // 4)])
    assert not worth_writing(base, [PageRun(0, 0, allocated // 4), PageRun(0, 0, PAGE_SIZE)])
    assert worth_writing(base, [])
