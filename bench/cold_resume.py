"""Resume to the first command's result when the page cache has let a paused sandbox's memory
go, with and without reading ahead the pages its guest had read (vmm/hot_pages.py).

Through the node agent's sandbox wing (real QEMU, netns, envd; no services). The sandbox runs on
a snapshot's memory image of its own, not the template's (which every sandbox of the template
maps, so the kernel cannot drop it from the cache). Each round pauses it and resumes it three
ways, in turn:
- `warm`: its files as the pause left them, in the page cache;
- `cold`: its base memory and delta dropped from the page cache (POSIX_FADV_DONTNEED), and no
  hot pages kept: every page the guest reads comes from the disk as it faults (the floor);
- `cold_read_ahead`: dropped the same way, the hot pages kept: what a resume does.
Reported: resume call, first `true` and first `python3 -c pass` results after it, p50 and the
cold arms' ratio. JSON on stdout and bench/results/cold_resume.json.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import aiohttp
from _lifecycle_workload import ROUNDS, bench_node, guest_sh, spec
from _stats import emit, summary_ms

from aenv_nodeagent.envd_client import guest_session
from aenv_nodeagent.memory.images import BASE_MEMORY, DELTA, HOT_PAGES
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.vmm.hot_pages import read_runs

ARMS = ("warm", "cold", "cold_read_ahead")
# What the guest reads before its pause (its working set) and after its resume (the first
# commands of an agent's next step).
WORKLOAD = "python3 -c 'import json, sqlite3, email' && ls -R /usr/lib/python3* > /dev/null"


def drop_from_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # only clean pages can be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


async def paused_again(wing: SandboxWing, sandbox: Sandbox) -> Path:
    """Pause `sandbox` and wait until its delta is written; its directory."""
    await wing.pauses.pause(sandbox.sandbox_id)
    await wing.context.quits.done(sandbox.sandbox_id)
    directory = wing.context.sandboxes_dir / sandbox.sandbox_id
    assert (directory / DELTA).is_file() and (directory / HOT_PAGES).is_file()
    return directory


async def one_resume(
    wing: SandboxWing, session: aiohttp.ClientSession, sandbox: Sandbox, arm: str
) -> tuple[Sandbox, list[float], int]:
    """Resume as `arm` says: (the sandbox, [resume, first true, first python] seconds, hot
    bytes kept)."""
    directory = await paused_again(wing, sandbox)
    hot = sum(length for _, length in read_runs(directory / HOT_PAGES))
    if arm != "warm":
        for name in (BASE_MEMORY, DELTA):
            await asyncio.to_thread(drop_from_cache, directory / name)
    if arm == "cold":
        (directory / HOT_PAGES).unlink()
    token = sandbox.record.envd_access_token
    started = time.perf_counter()
    resumed = await wing.pauses.resume(sandbox.sandbox_id, timeout_s=3600)
    marks = [time.perf_counter()]
    await guest_sh(session, resumed.host, token, "true")
    marks.append(time.perf_counter())
    await guest_sh(session, resumed.host, token, WORKLOAD)
    marks.append(time.perf_counter())
    return resumed, [mark - started for mark in marks], hot


async def runs(wing: SandboxWing, session: aiohttp.ClientSession) -> dict[str, object]:
    source = await wing.creates.create(spec())
    snapshot = await wing.snapshots.create(source.sandbox_id)
    await wing.kills.kill(source.sandbox_id)
    await wing.snapshots.memory_image(snapshot.snapshot_id)
    sandbox = await wing.creates.from_snapshot(snapshot, spec(snapshot.template_id))
    samples: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
    hot_bytes: list[int] = []
    try:
        await guest_sh(session, sandbox.host, sandbox.record.envd_access_token, WORKLOAD)
        for _ in range(ROUNDS):
            for arm in ARMS:
                sandbox, took, hot = await one_resume(wing, session, sandbox, arm)
                samples[arm].append(took)
                hot_bytes.append(hot)
    finally:
        await wing.kills.kill(sandbox.sandbox_id)
        await wing.snapshots.delete(snapshot.snapshot_id)
    out: dict[str, object] = {"rounds": ROUNDS,
                              "hot_pages_mib_median": round(sorted(hot_bytes)[len(hot_bytes) // 2]
                                                            / 2**20, 1)}
    for arm in ARMS:
        out[arm] = {what: summary_ms([took[i] for took in samples[arm]])
                    for i, what in enumerate(("resume", "first_true", "first_python"))}
    for what in ("resume", "first_true", "first_python"):
        cold = out["cold"][what]["p50_ms"]  # type: ignore[index]
        ahead = out["cold_read_ahead"][what]["p50_ms"]  # type: ignore[index]
        out[f"{what}_read_ahead_over_cold"] = round(ahead / cold, 3)
    return out


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="acrb", dir="/tmp") as tmp:
        async with guest_session() as session:
            async with bench_node(Path(tmp) / "node", session, "acrb",
                                  "10.217.0.0/24") as node:
                emit("cold_resume", await runs(node.wing, session))


if __name__ == "__main__":
    asyncio.run(main())
