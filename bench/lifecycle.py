"""Pause, resume, snapshot and fork through the node agent's sandbox wing, beside the QEMU floor.

- node agent: a SandboxService over real QEMU, netns and envd (no gateway, scheduler or etcd):
  pause; resume (until envd answers and took /init); snapshot after dirtying 1 GiB of disk and
  256 MiB of memory in the guest, the host's dirty page cache flushed (the call, the part of it
  the guest is stopped for, and when its memory image is ready); fork
  into 1, 4 and 16 children until all answer; host memory per child (PSS from
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
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from _stats import emit, summary_ms

from aenv.cluster.v1 import cluster_pb2
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_common.testing.records import MemoryRecords
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.network import (
    EgressPolicy,
    NetSlot,
    NetworkConfig,
    NetworkManager,
    netns_exec_prefix,
)
from aenv_nodeagent.node import base_template_inputs
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.service import SandboxService, SandboxSettings
from aenv_nodeagent.templates import TemplateInputs, TemplateSnapshot, TemplateStore, vm_spec
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.vmm import QemuDriver, QemuVm, detect_accelerator
from aenv_nodeagent.vmm.delta import mapped_memory, private_runs

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
FORKS = [int(n) for n in os.environ.get("BENCH_FORKS", "1,4,16").split(",")]
ENVD_PORT = 49983
# Rewritten before every snapshot: non-zero data (zero pages cost nothing in a capture).
DIRTY = ("yes $RANDOM | head -c 1G > /root/dirty.disk && sync && mkdir -p /run/dirty && "
         "(mountpoint -q /run/dirty || mount -t tmpfs -o size=300m tmpfs /run/dirty) && "
         "yes $RANDOM | head -c 256M > /run/dirty/mem")


def pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _mapping_pss_mib(pid: int, wanted: Callable[[list[str]], bool]) -> float:
    """The PSS of the process's mappings whose /proc/<pid>/smaps header line `wanted` picks."""
    total_kib, counting = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if re.match(r"[0-9a-f]+-[0-9a-f]+$", fields[0]):
            counting = wanted(fields)
        elif counting and fields[0] == "Pss:":
            total_kib += int(fields[1])
    return total_kib / 1024


def _of_inode(inode: str) -> Callable[[list[str]], bool]:
    return lambda fields: fields[4] == inode


def child_memory(pids: list[int]) -> dict[str, float | None]:
    """Medians over the children of their PSS, split into: the guest RAM each dirtied (private
    pages of the RAM file), its share of the guest RAM the children share (the RAM file's pages
    in the host page cache, split among those mapping them), TCG's translation cache (anonymous
    and rwx; a KVM host's QEMU has none) and the rest, QEMU's own. The target
    (docs/architecture.md, Targets): memory per child = its dirtied pages + < 10 MiB."""
    parts: dict[str, list[float]] = {
        key: [] for key in ("pss", "dirtied", "shared_ram_share", "tcg_cache", "qemu_own")}
    for pid in pids:
        memory = mapped_memory(pid)
        inode = str(memory.stat().st_ino)
        pss, ram = pss_mib(pid), _mapping_pss_mib(pid, _of_inode(inode))
        dirtied = sum(run.length for run in private_runs(pid, memory)) / 2**20
        tcg = _mapping_pss_mib(pid, lambda f: f[1] == "rwxp" and len(f) == 5)
        for key, value in (("pss", pss), ("dirtied", dirtied), ("shared_ram_share", ram - dirtied),
                           ("tcg_cache", tcg), ("qemu_own", pss - ram - tcg)):
            parts[key].append(value)
    return {f"{key}_per_child_mib_median": round(statistics.median(values), 1) if values else None
            for key, values in parts.items()}


async def settle_host_writeback() -> None:
    """Flush the host's dirty page cache (the guest's 1 GiB, earlier images) before a measured
    snapshot, so that neither side's figure depends on what the other left to write back."""
    await asyncio.to_thread(os.sync)


async def guest_sh(session: aiohttp.ClientSession, host: str, token: str, script: str) -> None:
    """Run a shell command in the guest through envd (Connect JSON) and wait for it to end."""
    import base64
    import json
    import struct

    payload = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
    async with session.post(
        f"http://{host}:{ENVD_PORT}/process.Process/Start",
        data=struct.pack(">BI", 0, len(payload)) + payload,
        headers={"content-type": "application/connect+json",
                 "X-Access-Token": token,
                 "authorization": "Basic " + base64.b64encode(b"root:").decode()},
        timeout=aiohttp.ClientTimeout(total=600),
    ) as resp:
        body = await resp.read()
    if resp.status != 200 or re.search(rb'"exitCode":\s*-?[1-9]', body):
        raise RuntimeError(f"guest command failed: {body[-300:]!r}")


def spec(template_id: str = BASE_TEMPLATE) -> cluster_pb2.SandboxSpec:
    return cluster_pb2.SandboxSpec(sandbox_id=new_sandbox_id(), template_id=template_id,
                                   envd_access_token=new_secret(), timeout_seconds=3600)


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
            self.records.setdefault(message, []).append({
                key: value for key, value in vars(record).items()
                if key.endswith(("_ms", "_pages")) and isinstance(value, (int, float))})

    def medians(self, message: str) -> dict[str, float]:
        seen: dict[str, list[float]] = {}
        for fields in self.records.get(message, []):
            for key, value in fields.items():
                seen.setdefault(key, []).append(value)
        return {key: round(statistics.median(values), 1) for key, values in seen.items()}

    def sums_s(self, message: str, phases: tuple[str, ...] | None = None) -> list[float]:
        """Per record, the seconds its `phases` (all of them but sub-phases: one after the
        other) took."""
        return [sum(value for key, value in fields.items() if key.endswith("_ms") and (
                    key.removesuffix("_ms") in phases if phases is not None
                    else key.removesuffix("_ms") not in SUB_PHASES)) / 1000
                for fields in self.records.get(message, [])]


# The part of a snapshot during which the guest does not run.
STOPPED_PHASES = ("stop", "memory", "disk", "forked", "cont")
# Timed within another phase ("memory"): not added again to a sum of all phases.
SUB_PHASES = ("freeze",)


class NodeBench:
    def __init__(self, sandboxes: SandboxService, session: aiohttp.ClientSession) -> None:
        self.lc = sandboxes
        self.session = session

    async def pause_resume(self) -> dict[str, object]:
        sandbox = await self.lc.create(spec())
        sid = sandbox.record.sandbox_id
        pauses, resumes, host, wake, image = [], [], [], [], []
        try:
            for _ in range(ROUNDS):
                pauses.append((await elapsed(self.lc.pause(sid)))[0])
                took, resumed = await elapsed(self.lc.resume(sid, timeout_s=3600))
                guest = (resumed.timings_ms.get("envd_ready", 0.0)
                         + resumed.timings_ms.get("envd_init", 0.0)) / 1000
                resumes.append(took)
                wake.append(guest)
                host.append(took - guest)
                # Resumed at once: part of the host side waits for the pause's memory image.
                image.append(resumed.timings_ms.get("memory_image", 0.0) / 1000)
        finally:
            await self.lc.kill(sid)
        return {"pause": summary_ms(pauses), "resume_to_ready": summary_ms(resumes),
                "resume_host_side": summary_ms(host), "resume_guest_wakeup": summary_ms(wake),
                "resume_waiting_for_memory_image": summary_ms(image)}

    async def snapshots(self) -> dict[str, object]:
        sandbox = await self.lc.create(spec())
        sid = sandbox.record.sandbox_id
        calls, materialize = [], []
        try:
            for _ in range(ROUNDS):
                await guest_sh(self.session, sandbox.host, sandbox.record.envd_access_token, DIRTY)
                await settle_host_writeback()
                took, meta = await elapsed(self.lc.create_snapshot(sid))
                calls.append(took)
                materialize.append((await elapsed(self.lc.memory_image(meta.snapshot_id)))[0])
        finally:
            await self.lc.kill(sid)
            for meta in self.lc.snapshots.listed():
                await self.lc.delete_snapshot(meta.snapshot_id)
        return {"snapshot_call": summary_ms(calls),
                "memory_image_ready_after_snapshot_returned": summary_ms(materialize)}

    async def fork(self, count: int) -> dict[str, object]:
        parent = await self.lc.create(spec())
        pid = parent.record.sandbox_id
        try:
            took, results = await elapsed(self.lc.fork(pid, count, timeout_s=3600))
            children = [r.sandbox.sandbox_id for r in results if r.HasField("sandbox")]
            memory = child_memory([self.lc.get(c).vm.pid for c in children])
            for child in children:
                await self.lc.kill(child)
        finally:
            await self.lc.kill(pid)
        return {"children": count, "ok": len(children),
                "fork_to_all_ready_ms": round(took * 1000, 1), **memory}


async def node_agent_runs(state_dir: Path, session: aiohttp.ClientSession) -> dict[str, object]:
    settings = NodeAgentSettings(state_dir=state_dir)
    network = NetworkManager(NetworkConfig(prefix="alcb", pool_cidr="10.216.0.0/24"))
    envd = EnvdClient(session)
    templates = TemplateStore(settings.resolved_templates_dir(), network, envd,
                              QemuDriver(), GuestCommands(session),
                              boot_timeout_s=120, boot_attempts=3)
    templates.register(await base_template_inputs(settings, detect_accelerator(None)))
    records = MemoryRecords()
    lc = SandboxService(SandboxSettings(state_dir, ready_timeout_s=300),
                        SandboxRegistry("bench"), templates, network, envd, records, QemuDriver())
    bench = NodeBench(lc, session)
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
            # The parent's capture, the first part of the fork (its floor takes none).
            [capture] = phases.sums_s("snapshot taken")[taken:]
            forks.append({**fork, "parent_capture_ms": round(capture * 1000, 1)})
        out["fork"] = forks
        return out
    finally:
        logging.getLogger("aenv_nodeagent.sandbox").removeHandler(phases)
        await lc.destroy_all()
        await network.destroy_orphans(keep=set())


class RawFloor:
    """Bare QEMU + QMP over the template's files, one netns per VM, no services."""

    def __init__(self, inputs: TemplateInputs, snap: TemplateSnapshot, network: NetworkManager,
                 session: aiohttp.ClientSession, work: Path) -> None:
        self.inputs, self.snap, self.network, self.session, self.work = (
            inputs, snap, network, session, work)
        self.envd = EnvdClient(session)
        self._n = 0

    async def restore(self, slot: NetSlot, state: Path, disk: Path) -> tuple[QemuVm, float, float]:
        """Launch + load `state` + cont; then wait for envd. Returns (vm, host s, wake-up s)."""
        self._n += 1
        t0 = time.perf_counter()
        vm = await QemuVm.launch(vm_spec(self.inputs, disk, self.snap.memory, mem_shared=False),
                                 self.work / f"vm{self._n}", incoming=True,
                                 argv_prefix=netns_exec_prefix(slot))
        try:
            await vm.restore(state)
            t1 = time.perf_counter()
            await self.envd.wait_healthy(slot.ns_ip, 300)
        except BaseException:
            await vm.shutdown()
            raise
        return vm, t1 - t0, time.perf_counter() - t1

    async def overlay(self, name: str, backing: Path) -> Path:
        disk = self.work / f"{name}.qcow2"
        await create_overlay(backing, disk)
        return disk

    async def pause_resume_snapshot(self, slot: NetSlot) -> dict[str, object]:
        """Pause/resume rounds on a fresh VM, then snapshot rounds after the same dirtying as
        the node agent's (the order of the node agent's runs)."""
        disk = await self.overlay("pr", self.snap.disk)
        vm, _, _ = await self.restore(slot, self.snap.state, disk)
        pauses, resumes, host, wake, snaps = [], [], [], [], []
        try:
            for _ in range(ROUNDS):
                state = self.work / "paused"
                t0 = time.perf_counter()
                await vm.capture(state)
                await vm.shutdown()
                pauses.append(time.perf_counter() - t0)
                vm, h, w = await self.restore(slot, state, disk)
                resumes.append(h + w)
                host.append(h)
                wake.append(w)
            for i in range(ROUNDS):
                await guest_sh(self.session, slot.ns_ip, "", DIRTY)
                await settle_host_writeback()
                t0 = time.perf_counter()
                await vm.pause()
                await vm.capture(self.work / f"snap{i}")
                await vm.resume()
                snaps.append(time.perf_counter() - t0)
                (self.work / f"snap{i}").unlink()
        finally:
            await vm.shutdown()
        return {"pause": summary_ms(pauses), "resume_to_ready": summary_ms(resumes),
                "resume_host_side": summary_ms(host), "resume_guest_wakeup": summary_ms(wake),
                # The floor's guest is stopped for the whole of its snapshot.
                "snapshot_call": summary_ms(snaps), "snapshot_guest_stopped": summary_ms(snaps)}

    async def fork(self, count: int) -> dict[str, object]:
        slots = await asyncio.gather(*(self.network.create_slot(EgressPolicy())
                                       for _ in range(count)))
        vms: list[QemuVm] = []
        try:
            disks = await asyncio.gather(*(self.overlay(f"f{count}-{i}", self.snap.disk)
                                           for i in range(count)))
            t0 = time.perf_counter()
            done = await asyncio.gather(*(self.restore(s, self.snap.state, d)
                                          for s, d in zip(slots, disks, strict=True)))
            took = time.perf_counter() - t0
            vms = [vm for vm, _, _ in done]
            memory = child_memory([vm.pid for vm in vms])
        finally:
            await asyncio.gather(*(vm.shutdown() for vm in vms))
            await asyncio.gather(*(self.network.destroy_slot(s) for s in slots))
        return {"children": count, "fork_to_all_ready_ms": round(took * 1000, 1), **memory}


async def floor_runs(session: aiohttp.ClientSession, work: Path) -> dict[str, object]:
    settings = NodeAgentSettings()
    inputs = await base_template_inputs(settings, detect_accelerator(None))
    network = NetworkManager(NetworkConfig(prefix="alcf", pool_cidr="10.218.0.0/24"))
    envd = EnvdClient(session)
    templates = TemplateStore(settings.resolved_templates_dir(), network, envd,
                              QemuDriver(), GuestCommands(session),
                              boot_timeout_s=120, boot_attempts=3)
    templates.register(inputs)
    work.mkdir(parents=True, exist_ok=True)
    floor = RawFloor(inputs, await templates.get(BASE_TEMPLATE), network, session, work)
    slot = await network.create_slot(EgressPolicy())
    try:
        out = await floor.pause_resume_snapshot(slot)
    finally:
        await network.destroy_slot(slot)
    out["fork"] = [await floor.fork(n) for n in FORKS]
    return out


def plot(node: dict[str, Any], floor: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = ["pause", "resume_host_side", "resume_guest_wakeup", "snapshot_call",
           "snapshot_guest_stopped"]
    labels = ops + [f"fork {f['children']}" for f in node["fork"]]
    ours = [node[o]["p50_ms"] for o in ops] + [f["fork_to_all_ready_ms"] for f in node["fork"]]
    base = [floor[o]["p50_ms"] for o in ops] + [f["fork_to_all_ready_ms"] for f in floor["fork"]]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 1]})
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], ours, 0.4, label="node agent")
    ax.bar([x + 0.2 for x in xs], base, 0.4, label="raw QEMU floor")
    ax.set_xticks(list(xs), labels, rotation=20)
    ax.set_yscale("log")
    ax.set_ylabel("ms (p50; fork: one run)")
    ax.legend()
    ax.set_title(f"lifecycle under {detect_accelerator(None).accel}")
    counts = [str(f["children"]) for f in node["fork"]]
    parts = ("dirtied", "shared_ram_share", "tcg_cache", "qemu_own")
    for shift, runs, hatch in ((-0.2, node["fork"], ""), (0.2, floor["fork"], "//")):
        bottom = [0.0] * len(counts)
        for n, part in enumerate(parts):
            values = [f[f"{part}_per_child_mib_median"] or 0 for f in runs]
            ax2.bar([i + shift for i in range(len(counts))], values, 0.4, bottom=bottom,
                    color=f"C{n}", hatch=hatch, label=part if shift < 0 else None)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax2.set_xticks(range(len(counts)), counts)
    ax2.set_xlabel("fork children (left: node agent, right: raw floor)")
    ax2.set_ylabel("PSS per child, MiB")
    ax2.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="alcb", dir="/tmp") as tmp:
        async with aiohttp.ClientSession() as session:
            node = await node_agent_runs(Path(tmp) / "node", session)
            # Kept on stderr in case the floor run fails.
            print(json.dumps({"node_agent": node}), file=sys.stderr, flush=True)
            floor = await floor_runs(session, Path(tmp) / "floor")
    result = {"rounds": ROUNDS, "accelerator": str(detect_accelerator(None).accel),
              "node_agent": node, "floor_raw_qemu": floor}
    emit("lifecycle", result)
    plot(node, floor, Path(__file__).parent / "results" / "lifecycle.png")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
