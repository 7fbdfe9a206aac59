"""Fast tests of what `make`'s artifacts step and a node's background rootfs build rely on: the
build's one-line summary, whether a rootfs is cached, and build commands run at low priority and
killed when their build is cancelled."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from aenv_common.errors import Internal
from aenv_nodeagent.artifacts import rootfs
from aenv_nodeagent.artifacts.__main__ import summary_line
from aenv_nodeagent.artifacts.cache import CacheEntry
from aenv_nodeagent.artifacts.proc import run
from aenv_nodeagent.artifacts.rootfs import (
    BASE_ROOTFS,
    CODE_INTERPRETER_ROOTFS,
    ensure_rootfs_build,
    is_rootfs_cached,
)

DEADLINE_S = 30.0


def _entry(built: bool, seconds: float = 0.0) -> CacheEntry:
    return CacheEntry(Path("/cache/x"), built=built, seconds=seconds)


def test_summary_names_what_was_built_and_reused() -> None:
    line = summary_line({"kernel": _entry(True, 12.4), "initramfs": _entry(False),
                         "rootfs-base": _entry(True, 98.6), "qemu preload": _entry(False)})
    assert line == "built kernel (12 s), rootfs-base (99 s); reused initramfs, qemu preload"


def test_summary_when_everything_was_cached() -> None:
    assert summary_line({"kernel": _entry(False), "toolsdisk": _entry(False)}) == (
        "all 2 reused from the cache")


def test_summary_when_everything_was_built() -> None:
    assert summary_line({"kernel": _entry(True, 1.0)}) == "built kernel (1 s)"


async def test_a_cached_rootfs_is_known_without_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not is_rootfs_cached(tmp_path, CODE_INTERPRETER_ROOTFS)
    builds: list[Path] = []

    async def fake_build(tmp: Path) -> None:  # no mmdebstrap: the cache's bookkeeping only
        builds.append(tmp)

    monkeypatch.setattr(rootfs, "_builder", lambda spec, nice: fake_build)
    built = await ensure_rootfs_build(tmp_path, CODE_INTERPRETER_ROOTFS)
    assert built.entry.built and len(builds) == 1
    assert is_rootfs_cached(tmp_path, CODE_INTERPRETER_ROOTFS)
    assert not is_rootfs_cached(tmp_path, BASE_ROOTFS)  # another spec, another entry
    again = await ensure_rootfs_build(tmp_path, CODE_INTERPRETER_ROOTFS)
    assert not again.entry.built and again.image.digest == built.image.digest


async def test_a_command_runs_at_the_priority_asked() -> None:
    out = await run(["sh", "-c", "cut -d' ' -f19 /proc/$$/stat"], nice=19)
    assert int(out) == min(os.nice(0) + 19, 19)


async def test_a_failing_command_is_named_without_nice() -> None:
    with pytest.raises(Internal, match=r"^sh failed \(exit 3\): oops"):
        await run(["sh", "-c", "echo oops >&2; exit 3"], nice=19)


def _started(pid: int) -> str | None:
    """When the process started (its identity, as PIDs are reused), or None once it is gone or
    a zombie waiting for its parent."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return None if fields[0] == "Z" else fields[19]


async def test_a_cancelled_command_is_killed_with_what_it_started(tmp_path: Path) -> None:
    fifo = tmp_path / "pids"
    os.mkfifo(fifo)  # the command says its PID and its child's through it once both run
    task = asyncio.create_task(
        run(["sh", "-c", f"sleep 300 & echo $$ $! > {fifo}; wait"]))
    try:
        said = await asyncio.wait_for(asyncio.to_thread(fifo.read_text), DEADLINE_S)
        shell, child = (int(pid) for pid in said.split())
        child_started = _started(child)
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The shell is reaped by run() before the cancellation goes on; its child, killed with it,
    # is reaped by whoever inherits it.
    assert not Path(f"/proc/{shell}").exists()
    # SIGKILL reaches another process asynchronously; its PID may then be reused at once on a
    # busy host: the child is known by its start time.
    assert child_started is not None
    deadline = time.monotonic() + DEADLINE_S
    while _started(child) == child_started:
        assert time.monotonic() < deadline, f"child {child} still runs"
        await asyncio.sleep(0.01)
