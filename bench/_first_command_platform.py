"""The platform side of the time-to-first-command benchmark: through one running platform, each
sandbox timed from its create (or fork, or resume) to its first command's result — by the
unmodified E2B SDK (`AsyncSandbox.create` + `commands.run("true")`) and by the native client
(`create_sandbox` + `run`); and the node agent's warm pool as its metrics and processes show it."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from _qemu_memory import pss_mib
from _stats import summary_ms
from e2b import AsyncSandbox
from prometheus_client.parser import text_string_to_metric_families

from aenv_cli.platform import Platform
from aenv_cli.ports import address
from aenv_client import AenvError, GatewayClient

CALL_TIMEOUT_S = 600.0
# Before each measured round the pool is given this long to be back at its idle depth.
REFILL_WITHIN_S = float(os.environ.get("BENCH_REFILL_WITHIN_S", "30"))
# The pool's gauges and counters, the node's sandboxes by state and the PSS of their VMs.
WATCHED = ("aenv_node_pool", "aenv_node_sandboxes", "aenv_node_vm_memory")
READY = "aenv_node_pool_ready"

Sample = tuple[float, float]  # (create → first command result, create call alone), seconds
Kill = Callable[[], Awaitable[object]]
FirstCommand = Callable[[], Awaitable[tuple[Sample, Kill]]]


class PoolWatch:
    """The node agent's pool metrics (`aenv_node_pool*`, every label) from its endpoint."""

    def __init__(self, plat: Platform, client: httpx.AsyncClient) -> None:
        self.url = f"http://{address(plat.ports.nodeagent_metrics)}/metrics"
        self.client = client
        self.idle: dict[str, float] = {}
        self.refill_misses = 0

    async def read(self) -> dict[str, float]:
        text = (await self.client.get(self.url)).text
        return {
            sample.name + _labels(sample.labels): sample.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith(WATCHED)
            for sample in family.samples
        }

    async def settle(self, quiet_s: float = 10.0, within_s: float = 180.0) -> dict[str, float]:
        """The pool once its metrics held still for `quiet_s` (filled, the last kills done): its
        idle depth."""
        started, last, since = time.perf_counter(), await self.read(), time.perf_counter()
        while time.perf_counter() - since < quiet_s and time.perf_counter() - started < within_s:
            await asyncio.sleep(0.5)
            now = await self.read()
            if now != last:
                last, since = now, time.perf_counter()
        self.idle = last
        return last

    async def refilled(self) -> None:
        """Until every kind of the pool is back at its idle depth (a trainer's steps have gaps);
        counted when it is not within REFILL_WITHIN_S (the round then starts on a partial
        pool)."""
        deadline = time.perf_counter() + REFILL_WITHIN_S
        while time.perf_counter() < deadline:
            now = await self.read()
            if all(now.get(key, 0.0) >= value for key, value in self.idle.items()
                   if key.startswith(READY)):
                return
            await asyncio.sleep(0.25)
        self.refill_misses += 1


def _labels(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{{{inner}}}" if inner else ""


def platform_qemu_memory(net_prefix: str) -> dict[str, float | int | None]:
    """The QEMU processes in this platform's netns (named `<net_prefix>-<n>`) and their PSS:
    taken while no sandbox runs, they are the pool's pre-started or warmed guests."""
    netns = {os.stat(p).st_ino for p in Path("/run/netns").glob(f"{net_prefix}-*")}
    pss: list[float] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (b"qemu-system" in (proc / "cmdline").read_bytes().split(b"\0")[0]
                    and os.stat(proc / "ns" / "net").st_ino in netns):
                pss.append(pss_mib(int(proc.name)))
        except OSError:  # gone meanwhile
            continue
    return {
        "pooled_qemus": len(pss),
        "pss_total_mib": round(sum(pss), 1),
        "pss_per_pooled_qemu_mib_median": round(statistics.median(pss), 1) if pss else None,
    }


class FirstCommands:
    """Each way to a sandbox's first command result, timed; failures counted by message."""

    def __init__(self, client: GatewayClient, pool: PoolWatch) -> None:
        self.client, self.pool = client, pool
        self.errors: Counter[str] = Counter()

    async def sdk(self) -> tuple[Sample, Kill]:
        t0 = time.perf_counter()
        sandbox = await AsyncSandbox.create(
            "base", timeout=600, request_timeout=CALL_TIMEOUT_S)
        t1 = time.perf_counter()
        try:
            # Not the SDK's 60 s command limit: 32 creates at once on 2 loaded cores pass it.
            result = await sandbox.commands.run(
                "true", timeout=CALL_TIMEOUT_S, request_timeout=CALL_TIMEOUT_S)
            assert result.exit_code == 0, result
        except BaseException:
            await sandbox.kill()
            raise
        return (time.perf_counter() - t0, t1 - t0), sandbox.kill

    async def native(self) -> tuple[Sample, Kill]:
        t0 = time.perf_counter()
        record = await self.client.create_sandbox(
            "base", timeout_seconds=600, timeout_s=CALL_TIMEOUT_S)
        t1 = time.perf_counter()
        sid = record.sandbox_id
        try:
            await self._true(sid)
        except BaseException:
            await self.client.kill_sandbox(sid)
            raise
        return (time.perf_counter() - t0, t1 - t0), lambda: self.client.kill_sandbox(sid)

    async def _true(self, sandbox_id: str) -> None:
        result = await self.client.run(sandbox_id, "true", timeout_s=CALL_TIMEOUT_S)
        if result.exit_code != 0:
            raise AenvError(f"`true` exited {result.exit_code}: {result.status}")

    async def burst(self, side: str, first: FirstCommand, count: int, rounds: int
                    ) -> dict[str, object]:
        """`rounds` times: `count` creates at once (the pool refilled first), each to its first
        command's result; then all killed (not timed)."""
        totals: list[float] = []
        creates: list[float] = []
        walls: list[float] = []
        for _ in range(rounds):
            await self.pool.refilled()
            t0 = time.perf_counter()
            done = await asyncio.gather(*(first() for _ in range(count)), return_exceptions=True)
            walls.append(time.perf_counter() - t0)
            made = [d for d in done if not isinstance(d, BaseException)]
            self.errors.update(f"{side}: {d!r}"[:200] for d in done if isinstance(d, BaseException))
            totals.extend(total for (total, _), _ in made)
            creates.extend(create for (_, create), _ in made)
            await asyncio.gather(*(kill() for _, kill in made), return_exceptions=True)
        return {"concurrent": count, "first_command": summary(totals),
                "create_call": summary(creates), "wall_until_last": summary(walls),
                "failed": rounds * count - len(totals)}

    async def fork(self, count: int) -> dict[str, object]:
        """A parent (its first command run), forked into `count`: each child's seconds from the
        fork call to its first command's result, and until the last child's."""
        parent = (await self.client.create_sandbox("base", timeout_seconds=600)).sandbox_id
        children: list[str] = []
        try:
            await self._true(parent)
            await self.pool.refilled()
            t0 = time.perf_counter()
            outcomes = await self.client.fork_sandbox(
                parent, count, timeout_seconds=600, timeout_s=CALL_TIMEOUT_S)
            forked = time.perf_counter() - t0
            children = [o.sandbox_id for o in outcomes if not isinstance(o, AenvError)]
            self.errors.update(f"fork: {o.message}" for o in outcomes if isinstance(o, AenvError))

            async def child_first(sid: str) -> float:
                await self._true(sid)
                return time.perf_counter() - t0

            each = await asyncio.gather(*(child_first(c) for c in children))
            return {"children": count, "ok": len(children),
                    "fork_call_ms": round(forked * 1000, 1),
                    "child_first_command": summary(list(each)),
                    "all_children_first_command_ms": round(max(each, default=0) * 1000, 1)}
        finally:
            await asyncio.gather(*(self.client.kill_sandbox(s) for s in [*children, parent]),
                                 return_exceptions=True)

    async def resume(self, rounds: int) -> dict[str, object]:
        """One sandbox paused and resumed `rounds` times: resume call → first command result."""
        sid = (await self.client.create_sandbox("base", timeout_seconds=600)).sandbox_id
        totals, calls = [], []
        try:
            await self._true(sid)
            for _ in range(rounds):
                await self.client.pause_sandbox(sid, timeout_s=CALL_TIMEOUT_S)
                t0 = time.perf_counter()
                await self.client.resume_sandbox(sid, timeout_seconds=600,
                                                 timeout_s=CALL_TIMEOUT_S)
                t1 = time.perf_counter()
                await self._true(sid)
                totals.append(time.perf_counter() - t0)
                calls.append(t1 - t0)
        finally:
            await self.client.kill_sandbox(sid)
        return {"first_command": summary(totals), "resume_call": summary(calls)}


def summary(samples_s: list[float]) -> dict[str, float]:
    """_stats.summary_ms plus p99 (few samples: p99 is near the max)."""
    out: dict[str, float] = summary_ms(samples_s)
    if len(samples_s) > 1:
        ms = sorted(x * 1000 for x in samples_s)
        out["p99_ms"] = round(statistics.quantiles(ms, n=100, method="inclusive")[98], 2)
    elif samples_s:
        out["p99_ms"] = out["p50_ms"]
    return out
