"""What jailing the VMM costs: sandbox create and a fork into 16 children through the node agent's
sandbox wing (real QEMU, netns, envd; no gateway, scheduler or etcd), three ways in one run,
rounds rotating which goes first: `unjailed` (QEMU as root, no cgroup), `jailed` (a uid of its
own, a mount namespace holding only its files, no capabilities, QEMU's seccomp sandbox) and
`jailed_cgroups` (that and its cgroup with cpu/memory/pids limits, as a node agent runs them).
The issue's bar: the jail costs under 10% (ratio of medians to `unjailed`).

- create: `create` until envd answered /init, then a kill (not timed); BENCH_ROUNDS rounds a side.
- fork: a parent created, then `fork(16)` until every child answered; BENCH_FORK_ROUNDS a side.
- exec_to_qmp: QEMU's own start (exec through the jail step until its QMP socket answers), from
  the VMs' timings: where the jail's work lands.
- fork_16_load_cores_p50 (with BENCH_LOAD): the CPU the busy loops got during each fork of 16,
  in cores: what the host's other work keeps beside the VMs.
- throttled (cgroup side): the CFS quota's throttling of the VM cgroups during each fork of 16,
  summed from their cpu.stat (periods, throttled periods, time throttled).
BENCH_LOAD=N runs N busy loops (bench/_load.py) through the whole measurement: a loaded host,
the same each run.
Results: JSON on stdout and bench/results/jail.json.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from _load import busy_loops, cpu_seconds, load_from_env
from _stats import emit, summary_ms

from aenv.cluster.v1 import cluster_pb2
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.confinement import LimitSettings, VmCgroups, choose
from aenv_nodeagent.envd_client import EnvdClient, guest_session
from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_nodeagent.sandbox.context import SandboxSettings, WingContext
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.server import base_template_inputs
from aenv_nodeagent.templates import TemplateStore
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.vmm import QemuDriver, QemuVm, VmJail, detect_accelerator
from aenv_nodeagent.vmm.uids import UidRange, VmUids
from aenv_testing.records import MemoryRecords

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "8"))
FORK_ROUNDS = int(os.environ.get("BENCH_FORK_ROUNDS", "2"))
FORK_CHILDREN = 16
# BENCH_CGROUPS=0 leaves out the cgroup side.
WITH_CGROUPS = os.environ.get("BENCH_CGROUPS", "1") != "0"
LOAD = load_from_env()
BENCH_UIDS = UidRange(1_100_007_000, 1024)  # apart from a node agent's and the tests' ranges


def spec() -> cluster_pb2.SandboxSpec:
    return cluster_pb2.SandboxSpec(sandbox_id=new_sandbox_id(), template_id=BASE_TEMPLATE,
                                   envd_access_token=new_secret(), timeout_seconds=3600)


@dataclass
class Side:
    name: str
    sandboxes: SandboxWing
    network: NetworkManager
    creates: list[float]
    forks: list[float]
    exec_to_qmp: list[float]
    cgroups: VmCgroups | None = None
    throttled: list[dict[str, int]] = field(default_factory=list)
    load_pids: list[int] = field(default_factory=list)
    load_cores: list[float] = field(default_factory=list)  # what the busy loops got per fork

    async def create_once(self) -> None:
        t0 = time.perf_counter()
        sandbox = await self.sandboxes.creates.create(spec())
        self.creates.append(time.perf_counter() - t0)
        assert isinstance(sandbox.vm, QemuVm)
        self.exec_to_qmp.append(sandbox.vm.timings.get("exec_to_qmp", 0.0) / 1000)
        await self.sandboxes.kills.kill(sandbox.record.sandbox_id)

    async def fork_once(self) -> None:
        parent = await self.sandboxes.creates.create(spec())
        pid = parent.record.sandbox_id
        try:
            before, load_before = cpu_stats(self.cgroups), cpu_seconds(self.load_pids)
            t0 = time.perf_counter()
            results = await self.sandboxes.forks.fork(pid, FORK_CHILDREN, timeout_s=3600)
            took = time.perf_counter() - t0
            if self.load_pids:
                self.load_cores.append((cpu_seconds(self.load_pids) - load_before) / took)
            if self.cgroups is not None:
                self.throttled.append(_delta(before, cpu_stats(self.cgroups)))
            children = [r.sandbox_id for r in results if isinstance(r, Sandbox)]
            assert len(children) == FORK_CHILDREN, f"{self.name}: {len(children)} children"
            self.forks.append(took)
            for child in children:
                await self.sandboxes.kills.kill(child)
        finally:
            await self.sandboxes.kills.kill(pid)

    def result(self) -> dict[str, object]:
        found: dict[str, object] = {"create_to_ready": summary_ms(self.creates),
                                    "fork_16_to_all_ready": summary_ms(self.forks),
                                    "exec_to_qmp": summary_ms(self.exec_to_qmp)}
        if self.load_cores:
            found["fork_16_load_cores_p50"] = round(statistics.median(self.load_cores), 3)
        if self.cgroups is not None:
            found["fork_16_throttled"] = self.throttled
        return found


_THROTTLE_KEYS = ("nr_periods", "nr_throttled", "throttled_time", "throttled_usec")


def cpu_stats(cgroups: VmCgroups | None) -> dict[str, dict[str, int]]:
    """Each VM cgroup's CFS counters (cpu.stat of the cpu hierarchy), by cgroup name."""
    if cgroups is None:
        return {}
    found = {}
    for hierarchy, slice_dir in zip(cgroups.hierarchies, cgroups.slices, strict=True):
        if "cpu" not in hierarchy.controllers:
            continue
        for directory in (d for d in slice_dir.iterdir() if d.is_dir()):
            try:
                lines = (directory / "cpu.stat").read_text().splitlines()
            except OSError:
                continue  # its VM just ended
            pairs = (line.split() for line in lines)
            found[directory.name] = {k: int(v) for k, v in pairs if k in _THROTTLE_KEYS}
    return found


def _delta(before: dict[str, dict[str, int]],
           after: dict[str, dict[str, int]]) -> dict[str, int]:
    total = {"cgroups": len(after)}
    for name, stats in after.items():
        for key, value in stats.items():
            total[key] = total.get(key, 0) + value - before.get(name, {}).get(key, 0)
    return total


def _rotated(sides: list[Side], round_: int) -> list[Side]:
    shift = round_ % len(sides)
    return sides[shift:] + sides[:shift]


def _ratio(jailed: list[float], unjailed: list[float]) -> float:
    return round(statistics.median(jailed) / statistics.median(unjailed), 3)


async def run(state: Path, session: aiohttp.ClientSession) -> dict[str, object]:
    settings = NodeAgentSettings(state_dir=state)
    envd = EnvdClient(session)
    inputs = await base_template_inputs(settings, detect_accelerator(None))
    cgroups = choose("auto", state, LimitSettings()).cgroups if WITH_CGROUPS else None
    uids = VmUids(BENCH_UIDS)
    jails = {"unjailed": VmJail(), "jailed": VmJail(uids=uids)}
    if cgroups is not None:
        jails["jailed_cgroups"] = VmJail(cgroups, uids=uids)
    sides = []
    for index, (name, jail) in enumerate(jails.items()):
        network = NetworkManager(NetworkConfig(prefix=f"ajb{index}x",
                                               pool_cidr=f"10.217.{index}.0/24"))
        templates = TemplateStore(settings.resolved_templates_dir(), network, envd,
                                  QemuDriver(jail), GuestCommands(session),
                                  boot_timeout_s=120, boot_attempts=3)
        templates.register(inputs)
        sandboxes = SandboxWing(
            WingContext.of(SandboxSettings(state / name, ready_timeout_s=300),
                           SandboxRegistry(f"bench-{name}"), MemoryRecords(), templates, network,
                           envd),
            QemuDriver(jail))
        sides.append(Side(name, sandboxes, network, [], [], [], jail.cgroups))
    try:
        for side in sides:  # warm-up: the template's files in the page cache, not timed
            await side.create_once()
            side.creates.clear()
            side.exec_to_qmp.clear()
        with busy_loops(LOAD) as load_pids:
            for side in sides:
                side.load_pids = load_pids
            await measure(sides)
        floor = sides[0]
        return {
            "rounds": ROUNDS, "fork_rounds": FORK_ROUNDS, "cgroups": cgroups is not None,
            "busy_loops": LOAD, "host_cpus": os.cpu_count(),
            **{side.name: side.result() for side in sides},
            **{f"ratio_{side.name}": {"create_p50": _ratio(side.creates, floor.creates),
                                      "fork_16_p50": _ratio(side.forks, floor.forks)}
               for side in sides[1:]},
        }
    finally:
        for side in sides:
            await side.sandboxes.destroy_all()
            await side.network.destroy_orphans(keep=set())
        if cgroups is not None:
            cgroups.close()


async def measure(sides: list[Side]) -> None:
    """The timed rounds, each rotating which side goes first."""
    for round_ in range(ROUNDS):
        for side in _rotated(sides, round_):
            await side.create_once()
    for round_ in range(FORK_ROUNDS):
        for side in _rotated(sides, round_):
            await side.fork_once()


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="aenv-bench-jail-") as tmp:
        async with guest_session() as session:
            emit("jail", await run(Path(tmp), session))


if __name__ == "__main__":
    asyncio.run(main())
