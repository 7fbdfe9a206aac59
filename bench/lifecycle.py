"""Pause, resume, snapshot and fork through the node agent's sandbox wing, beside the QEMU floor.

- node agent: a SandboxWing over real QEMU, netns and envd (no gateway, scheduler or etcd),
  with a node agent's default warm pool (refilled before each fork) of network slots and
  pre-started VMs, as many as forks asked for lately (a child takes one and re-points it at the
  fork's capture; the first round of a size finds fewer than it has children), no woken guests
  (children restored while the fork's image is still made load the parent's pages written since
  the template as a delta onto it, memory/fork_delta.py: counted per round):
  pause; resume (until envd answers and took /init); snapshot after dirtying 1 GiB of disk and
  256 MiB of memory in the guest, the host's dirty page cache flushed (the call, the part of it
  the guest is stopped for, and when its memory image is ready); fork
  into 1, 4 and 16 children until all answer (each BENCH_FORK_ROUNDS times, a new parent each
  time); host memory per child (PSS from
  /proc/<pid>/smaps_rollup, and how much of it is guest RAM the child dirtied).
- floor, same run: bare QEMU + QMP doing the same operation with no services: stop + capture +
  quit (pause), exec `-incoming defer` + migrate-incoming + cont until envd /health (resume),
  stop + capture + cont after the same dirtying (snapshot), N such restores of the template side
  by side (fork).

Host-side phases are reported apart from guest wake-up (under TCG, re-translation dominates it).
Results: JSON on stdout and bench/results/lifecycle.json, a plot in bench/results/lifecycle.png.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp
from _lifecycle_floor import floor_runs
from _lifecycle_workload import (
    DIRTY,
    FORK_ROUNDS,
    FORKS,
    ROUNDS,
    BenchNode,
    bench_node,
    fork_summary,
    guest_sh,
    settle_host_writeback,
    spec,
)
from _qemu_memory import child_memory
from _stats import emit, summary_ms

from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.envd_client import guest_session
from aenv_nodeagent.memory.images import BASE_MEMORY
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.vmm import detect_accelerator


async def elapsed(awaitable: Awaitable[Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = await awaitable
    return time.perf_counter() - t0, result


# What the lifecycle logs with phases: the calls, and what they leave to the background.
_LOGGED = ("sandbox paused", "paused memory written", "snapshot taken", "snapshot image written")


class PhaseLog(logging.Handler):
    """The `*_ms` phases and `*_pages` counts the lifecycle logs with each pause and snapshot,
    by message."""

    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, list[dict[str, float]]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message in _LOGGED:
            self.records.setdefault(message, []).append(
                {
                    key: value
                    for key, value in vars(record).items()
                    if key.endswith(("_ms", "_pages")) and isinstance(value, (int, float))
                }
            )

    def medians(self, message: str) -> dict[str, float]:
        seen: dict[str, list[float]] = {}
        for fields in self.records.get(message, []):
            for key, value in fields.items():
                seen.setdefault(key, []).append(value)
        return {key: round(statistics.median(values), 1) for key, values in seen.items()}

    def sums_s(self, message: str, phases: tuple[str, ...] | None = None) -> list[float]:
        """Per record, the seconds its `phases` (all of them but sub-phases: one after the
        other) took."""
        return [
            sum(
                value
                for key, value in fields.items()
                if key.endswith("_ms")
                and (
                    key.removesuffix("_ms") in phases
                    if phases is not None
                    else key.removesuffix("_ms") not in SUB_PHASES
                )
            )
            / 1000
            for fields in self.records.get(message, [])
        ]


# The part of a snapshot during which the guest does not run.
STOPPED_PHASES = ("stop", "memory", "disk", "forked", "cont")
# Timed within another phase ("memory"): not added again to a sum of all phases.
SUB_PHASES = ("freeze",)


class NodeBench:
    def __init__(self, node: BenchNode, session: aiohttp.ClientSession) -> None:
        self.node = node
        self.lc = node.wing
        self.session = session

    async def pause_resume(self) -> dict[str, object]:
        sandbox = await self.lc.creates.create(spec())
        sid = sandbox.record.sandbox_id
        await self.node.pool_refilled()  # its refill would run beside what is measured
        pauses, resumes, host, wake, image = [], [], [], [], []
        try:
            for _ in range(ROUNDS):
                pauses.append((await elapsed(self.lc.pauses.pause(sid)))[0])
                took, resumed = await elapsed(self.lc.pauses.resume(sid, timeout_s=3600))
                guest = (
                    resumed.timings_ms.get("envd_ready", 0.0)
                    + resumed.timings_ms.get("envd_init", 0.0)
                ) / 1000
                resumes.append(took)
                wake.append(guest)
                host.append(took - guest)
                # Resumed at once: part of the host side waits for the pause's memory image.
                image.append(resumed.timings_ms.get("memory_image", 0.0) / 1000)
        finally:
            await self.lc.kills.kill(sid)
        return {
            "pause": summary_ms(pauses),
            "resume_to_ready": summary_ms(resumes),
            "resume_host_side": summary_ms(host),
            "resume_guest_wakeup": summary_ms(wake),
            "resume_waiting_for_memory_image": summary_ms(image),
        }

    async def snapshots(self) -> dict[str, object]:
        sandbox = await self.lc.creates.create(spec())
        sid = sandbox.record.sandbox_id
        await self.node.pool_refilled()
        calls, materialize = [], []
        try:
            for _ in range(ROUNDS):
                await guest_sh(self.session, sandbox.host, sandbox.record.envd_access_token, DIRTY)
                await settle_host_writeback()
                took, meta = await elapsed(self.lc.snapshots.create(sid))
                calls.append(took)
                image = self.lc.snapshots.memory_image(meta.snapshot_id)
                materialize.append((await elapsed(image))[0])
        finally:
            await self.lc.kills.kill(sid)
            for meta in self.lc.snapshots.store.listed():
                await self.lc.snapshots.delete(meta.snapshot_id)
        return {
            "snapshot_call": summary_ms(calls),
            "memory_image_ready_after_snapshot_returned": summary_ms(materialize),
        }

    async def fork(self, count: int) -> dict[str, object]:
        took_s, memories, ok, prestarted, on_delta = [], [], [], [], []
        template = (await self.lc.context.templates.get(BASE_TEMPLATE)).memory
        for _ in range(FORK_ROUNDS):
            parent = await self.lc.creates.create(spec())
            pid = parent.record.sandbox_id
            await self.node.pool_refilled()
            try:
                took, results = await elapsed(self.lc.forks.fork(pid, count, timeout_s=3600))
                children = [r for r in results if isinstance(r, Sandbox)]
                memories.append(child_memory([c.vm.pid for c in children]))
                prestarted.append(sum("repoint" in c.timings_ms for c in children))
                on_delta.append(sum((c.directory / BASE_MEMORY).samefile(template)
                                    for c in children))
                for child in children:
                    await self.lc.kills.kill(child.record.sandbox_id)
            finally:
                await self.lc.kills.kill(pid)
            took_s.append(took)
            ok.append(len(children))
        return {**fork_summary(count, took_s, memories), "ok": min(ok),
                "children_on_prestarted_vms_per_round": prestarted,
                "children_on_the_delta_per_round": on_delta}


async def node_agent_runs(state_dir: Path, session: aiohttp.ClientSession) -> dict[str, object]:
    defaults = NodeAgentSettings()
    async with bench_node(state_dir, session, "alcb", "10.216.0.0/24",
                          pooled_slots=defaults.warm_pool_slots,
                          pooled_vms=defaults.warm_pool_vms,
                          pooled_snapshot_vms=defaults.warm_pool_snapshot_vms) as node:
        return await _node_agent_runs(node, session)


async def _node_agent_runs(node: BenchNode, session: aiohttp.ClientSession) -> dict[str, object]:
    bench = NodeBench(node, session)
    phases = PhaseLog()
    logging.getLogger("aenv_nodeagent.sandbox").addHandler(phases)
    logging.getLogger("aenv_nodeagent.sandbox").setLevel(logging.INFO)
    try:
        out: dict[str, object] = await bench.pause_resume()
        out["pause_phases_median_ms"] = phases.medians("sandbox paused")
        # After the pause returned, as its VM quits.
        out["pause_memory_written_median"] = phases.medians("paused memory written")
        out.update(await bench.snapshots())
        out["snapshot_phases_median_ms"] = phases.medians("snapshot taken")
        # After the call returned, from the frozen copy.
        out["snapshot_image_phases_median_ms"] = phases.medians("snapshot image written")
        out["snapshot_guest_stopped"] = summary_ms(phases.sums_s("snapshot taken", STOPPED_PHASES))
        forks: list[dict[str, object]] = []
        for n in FORKS:
            taken = len(phases.records.get("snapshot taken", []))
            fork = await bench.fork(n)
            # The parent's captures, the first part of each fork (its floor takes none).
            captures = phases.sums_s("snapshot taken")[taken:]
            forks.append({**fork, "parent_capture_ms": summary_ms(captures)["p50_ms"]})
        out["fork"] = forks
        return out
    finally:
        logging.getLogger("aenv_nodeagent.sandbox").removeHandler(phases)


def plot(node: dict[str, Any], floor: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [
        "pause",
        "resume_host_side",
        "resume_guest_wakeup",
        "snapshot_call",
        "snapshot_guest_stopped",
    ]
    labels = ops + [f"fork {f['children']}" for f in node["fork"]]
    ours = [node[o]["p50_ms"] for o in ops] + [f["fork_to_all_ready_ms"] for f in node["fork"]]
    base = [floor[o]["p50_ms"] for o in ops] + [f["fork_to_all_ready_ms"] for f in floor["fork"]]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], ours, 0.4, label="node agent")
    ax.bar([x + 0.2 for x in xs], base, 0.4, label="raw QEMU floor")
    ax.set_xticks(list(xs), labels, rotation=20)
    ax.set_yscale("log")
    ax.set_ylabel(f"ms (p50; fork: of {FORK_ROUNDS} rounds)")
    ax.legend()
    ax.set_title(f"lifecycle under {detect_accelerator(None).accel}")
    counts = [str(f["children"]) for f in node["fork"]]
    parts = ("dirtied", "shared_ram_share", "tcg_cache", "qemu_own")
    for shift, runs, hatch in ((-0.2, node["fork"], ""), (0.2, floor["fork"], "//")):
        bottom = [0.0] * len(counts)
        for n, part in enumerate(parts):
            values = [f[f"{part}_per_child_mib_median"] or 0 for f in runs]
            ax2.bar(
                [i + shift for i in range(len(counts))],
                values,
                0.4,
                bottom=bottom,
                color=f"C{n}",
                hatch=hatch,
                label=part if shift < 0 else None,
            )
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax2.set_xticks(range(len(counts)), counts)
    ax2.set_xlabel("fork children (left: node agent, right: raw floor)")
    ax2.set_ylabel("PSS per child, MiB")
    ax2.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="alcb", dir="/tmp") as tmp:
        async with guest_session() as session:
            node = await node_agent_runs(Path(tmp) / "node", session)
            # Kept on stderr in case the floor run fails.
            print(json.dumps({"node_agent": node}), file=sys.stderr, flush=True)
            floor = await floor_runs(session, Path(tmp) / "floor")
    result = {
        "rounds": ROUNDS,
        "accelerator": str(detect_accelerator(None).accel),
        "node_agent": node,
        "floor_raw_qemu": floor,
    }
    emit("lifecycle", result)
    plot(node, floor, Path(__file__).parent / "results" / "lifecycle.png")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
