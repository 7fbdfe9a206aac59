"""Background pushes yield to creates: each runs in a child process whose every thread is at the
lowest CPU priority, while the node agent's own threads (the create path, and pulls, which
restores wait for) keep theirs. A real snapstore; priorities read from /proc as the kernel has
them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from aenv_nodeagent.snapshots.persistence import PushState, SnapshotPersistence
from aenv_nodeagent.snapshots.push_worker import LOWEST_NICE

MIB = 1 << 20
SIZE = 96 * MIB  # incompressible: a few seconds of hashing and compression


def _nice_of(task_stat: Path) -> int:
    fields = task_stat.read_text().rpartition(")")[2].split()
    return int(fields[16])  # stat(5): nice is field 19, the 17th after the command's name


def _threads_nice(pid: int) -> dict[int, int]:
    """Each thread of the process and its nice, as the kernel schedules it."""
    niced = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            niced[int(task.name)] = _nice_of(task / "stat")
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
    return niced


def _push_workers() -> list[int]:
    """This process's push worker children."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if ppid == os.getpid() and b"aenv_nodeagent.snapshots.push_worker" in cmdline:
            found.append(int(proc.name))
    return found


def _pending() -> float:
    return REGISTRY.get_sample_value("aenv_node_snapshot_pushes_pending") or 0.0


async def _worker_started(within_s: float = 60) -> int:
    async with asyncio.timeout(within_s):
        while not (workers := _push_workers()):  # noqa: ASYNC110 - a child has no event
            await asyncio.sleep(0.01)
    return workers[0]


def _push(persistence: SnapshotPersistence, manifest_id: str, path: Path) -> None:
    async def files() -> Mapping[str, Path]:
        return {"memory": path}

    async def pushed() -> None:
        return None

    persistence.push_soon(manifest_id, files, pushed, labels={})


async def test_a_background_push_runs_at_the_lowest_priority_beside_an_untouched_agent(
    snapstore: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    memory, small = tmp_path / "memory", tmp_path / "small"
    memory.write_bytes(os.urandom(SIZE))
    small.write_bytes(os.urandom(MIB))
    agent_nice = set(_threads_nice(os.getpid()).values())
    assert agent_nice == {0}
    persistence = SnapshotPersistence(snapstore, retry_delays_s=())
    try:
        _push(persistence, "small", small)
        await asyncio.wait_for(persistence.persisted("small"), 60)
        pending_before = _pending()
        _push(persistence, "big", memory)
        assert _pending() == pending_before + 1
        worker = await _worker_started()
        autogroup = Path(f"/proc/{worker}/autogroup")  # where the kernel has autogroups
        # The agent renices the group just after the spawn: seen a moment before, it is 0.
        for _ in range(100):
            if not autogroup.exists() or autogroup.read_text().split()[-1] == str(LOWEST_NICE):
                break
            await asyncio.sleep(0.01)
        assert not autogroup.exists() or autogroup.read_text().split()[-1] == str(LOWEST_NICE)
        seen: dict[int, int] = {}
        pulled: dict[str, Path] = {}
        while persistence.status["big"].state is PushState.PUSHING:
            seen |= _threads_nice(worker) if worker in _push_workers() else {}
            # A pull (a restore waits for it) meanwhile: in the agent, at the agent's priority.
            pulled = pulled or await persistence.pull("small", tmp_path / "pulled")
            assert set(_threads_nice(os.getpid()).values()) == agent_nice
            await asyncio.sleep(0.02)
        assert persistence.status["big"].state is PushState.PUSHED
        assert pulled["memory"].read_bytes() == small.read_bytes()
    finally:
        await persistence.close()
    # The child's threads (its main thread, gRPC's, the hashing and compressing pool's) all at
    # the lowest priority; every thread of the agent as it was.
    assert len(seen) >= 3, seen
    assert set(seen.values()) == {LOWEST_NICE}, seen
    assert set(_threads_nice(os.getpid()).values()) == agent_nice
    assert persistence.stats["big"].sent_bytes == SIZE
    assert _pending() == pending_before
    assert _push_workers() == []
    workers_said = capfd.readouterr().err  # the workers' stderr: each ended cleanly
    assert "Traceback" not in workers_said and "Fatal Python error" not in workers_said


async def test_a_push_cut_short_ends_its_worker_and_leaves_no_manifest(
    snapstore: str, tmp_path: Path
) -> None:
    memory = tmp_path / "memory"
    memory.write_bytes(os.urandom(SIZE))
    stored = tmp_path / "store"  # the snapstore fixture's
    persistence = SnapshotPersistence(snapstore, retry_delays_s=())
    try:
        _push(persistence, "cut", memory)
        worker = await _worker_started()
        async with asyncio.timeout(60):
            while not any(p.is_file() for p in stored.rglob("*")):  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # chunks are landing: mid-upload
    finally:
        await persistence.close()  # a node agent's stop
    assert _push_workers() == []
    assert not Path(f"/proc/{worker}").exists()
    reader = SnapshotPersistence(snapstore)
    try:
        assert "cut" not in await reader.manifests()
    finally:
        await reader.close()
