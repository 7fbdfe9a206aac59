"""Where a create's time goes, span by span: through one running platform (woken guests on, the
node agent's default), BENCH_ROUNDS (default 20) creates one at a time by the unmodified E2B SDK
(`AsyncSandbox.create` then `commands.run("true")`) and as many by the native client
(`create_sandbox` then `run("true")`), each timed by the client; then every span the services
wrote for them (`<home>/traces/*.jsonl`, what `aenv trace` reads) taken apart.

For each side and each of its two calls (the create, the first command) the JSON gives, as
medians over the rounds:
- `client_ms`: the call as its caller waited for it;
- `outside_spans_ms`: of that, the time no service's span covers (the client, its connection,
  the HTTP or gRPC server's work before its first span begins and after its last ends);
- per span (`<service>:<name>`, summed when a call has several of one name): `ms`, its
  duration, and `self_ms`, the part of it none of its child spans covers (the time a span
  spends itself, or waiting on something no span records: the unexplained gaps).
The self times of a call's spans plus `outside_spans_ms` make `client_ms`, but for spans that
ran side by side (counted in each). The rounds are reported apart by the node's path: `woken`
(a woken guest continued) and `other` (a pre-started VM or a restore of its own).

BENCH_WARMUP untimed creates first (default 4: the pool of woken guests follows demand), and
before each round the pool is let refill to its idle depth (as time_to_first_command.py);
BENCH_WAIT_PUSHES=0 skips waiting for the node's start-up pushes to snapstore (create_latency.py;
1-3 min). BENCH_SPANS_OUT=<file> also writes every span of the measured calls there.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _first_command_platform import PoolWatch
from _platform import running_platform
from _stats import emit
from create_latency import startup_pushes_done
from e2b import AsyncSandbox

from aenv_cli.platform import Platform
from aenv_client import GatewayClient
from aenv_common.rollout import SANDBOX_ID
from aenv_common.telemetry import read_trace_files
from aenv_testing.subnets import free_subnet

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "20"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "4"))
WAIT_PUSHES = os.environ.get("BENCH_WAIT_PUSHES", "1") == "1"
SPANS_OUT = os.environ.get("BENCH_SPANS_OUT")
CALL_TIMEOUT_S = 600.0
Span = dict[str, Any]


@dataclass
class Call:
    """One client call: its wall-clock window (ns, as the spans' clock) and the sandbox."""

    sandbox_id: str
    start_ns: int
    end_ns: int
    spans: list[Span] = field(default_factory=list)

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass
class Round:
    create: Call
    command: Call


Run = Callable[[], Awaitable[Round]]


def sdk_round() -> Run:
    async def run() -> Round:
        t0 = time.time_ns()
        sandbox = await AsyncSandbox.create("base", timeout=600, request_timeout=CALL_TIMEOUT_S)
        t1 = time.time_ns()
        try:
            result = await sandbox.commands.run(
                "true", timeout=CALL_TIMEOUT_S, request_timeout=CALL_TIMEOUT_S)
            t2 = time.time_ns()
            assert result.exit_code == 0, result
        finally:
            await sandbox.kill()
        sid = sandbox.sandbox_id
        return Round(Call(sid, t0, t1), Call(sid, t1, t2))
    return run


def native_round(client: GatewayClient) -> Run:
    async def run() -> Round:
        t0 = time.time_ns()
        record = await client.create_sandbox("base", timeout_seconds=600,
                                             timeout_s=CALL_TIMEOUT_S)
        t1 = time.time_ns()
        sid = record.sandbox_id
        try:
            result = await client.run(sid, "true", timeout_s=CALL_TIMEOUT_S)
            t2 = time.time_ns()
            assert result.exit_code == 0, result
        finally:
            await client.kill_sandbox(sid)
        return Round(Call(sid, t0, t1), Call(sid, t1, t2))
    return run


def attach_spans(calls: Iterable[Call], spans: list[Span]) -> None:
    """Each call gets the traces that name its sandbox and begin within its window (the
    create's trace; the first command's requests), every span of them."""
    by_trace: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        by_trace[span["trace_id"]].append(span)
    for call in calls:
        for trace in by_trace.values():
            begins = min(s["start_ns"] for s in trace)
            named = any((s.get("attributes") or {}).get(SANDBOX_ID) == call.sandbox_id
                        for s in trace)
            if named and call.start_ns <= begins <= call.end_ns:
                call.spans.extend(trace)


def took_woken(create: Call) -> bool:
    """The node continued a woken guest (its `cont` phase) rather than restoring one."""
    return any(s["name"] == "sandbox.cont" for s in create.spans)


def covered_ns(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """How much of [lo, hi] the union of `intervals` covers."""
    total, reach = 0, lo
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, hi)
        if end > start:
            total += end - start
            reach = end
    return total


def decompose(call: Call) -> tuple[dict[str, float], dict[str, float], float]:
    """Per span name: its summed duration and self time (ms); and the call's time no span
    covers (ms)."""
    children: dict[str, list[Span]] = defaultdict(list)
    ids = {s["span_id"] for s in call.spans}
    for span in call.spans:
        children[span.get("parent_id") or ""].append(span)
    total: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    for span in call.spans:
        name = f"{span.get('service')}:{span['name']}"
        kids = [(k["start_ns"], k["end_ns"]) for k in children.get(span["span_id"], [])]
        duration = span["end_ns"] - span["start_ns"]
        total[name] += duration / 1e6
        own[name] += (duration - covered_ns(kids, span["start_ns"], span["end_ns"])) / 1e6
    roots = [(s["start_ns"], s["end_ns"]) for s in call.spans if s.get("parent_id") not in ids]
    outside = (call.end_ns - call.start_ns
               - covered_ns(roots, call.start_ns, call.end_ns)) / 1e6
    return total, own, outside


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else 0.0


def table(calls: list[Call]) -> dict[str, Any]:
    """Medians over the calls: the client's time, the time outside every span, and per span
    name its duration and self time (a span absent from a call counts 0 there)."""
    parts = [decompose(c) for c in calls]
    names = sorted({n for total, _, _ in parts for n in total})
    spans = {
        name: {"ms": median_ms([t.get(name, 0.0) for t, _, _ in parts]),
               "self_ms": median_ms([o.get(name, 0.0) for _, o, _ in parts]),
               "in_calls": sum(name in t for t, _, _ in parts)}
        for name in names}
    ordered = dict(sorted(spans.items(), key=lambda kv: -kv[1]["self_ms"]))
    return {"calls": len(calls), "client_ms": median_ms([c.ms for c in calls]),
            "client_p90_ms": round(statistics.quantiles([c.ms for c in calls], n=10)[8], 2)
            if len(calls) > 1 else median_ms([c.ms for c in calls]),
            "outside_spans_ms": median_ms([o for _, _, o in parts]), "spans": ordered}


async def measure(plat: Platform) -> dict[str, Any]:
    os.environ.update(plat.e2b_env())
    async with (httpx.AsyncClient(timeout=10) as http,
                GatewayClient(plat.grpc_address, plat.api_key, timeout_s=CALL_TIMEOUT_S)
                as client):
        pool = PoolWatch(plat, http)
        sides: dict[str, Run] = {"sdk": sdk_round(), "native": native_round(client)}
        for _ in range(WARMUP):
            await sides["native"]()
        await pool.settle()
        rounds: dict[str, list[Round]] = {side: [] for side in sides}
        for _ in range(ROUNDS):  # the sides interleaved: a drifting host weighs on both alike
            for side, run in sides.items():
                await pool.refilled()  # a trainer's creates have gaps: the pool is back
                rounds[side].append(await run())
    # The span files are written as each span ends; the kills' spans may still be coming.
    await asyncio.sleep(1.0)
    spans = read_trace_files(plat.home / "traces")
    out: dict[str, Any] = {"rounds_started_on_partial_pool": pool.refill_misses}
    for side, made in rounds.items():
        attach_spans([c for r in made for c in (r.create, r.command)], spans)
        woken = [r for r in made if took_woken(r.create)]
        out[side] = {"creates_that_took_a_woken_guest": len(woken)}
        for path, some in (("woken", woken), ("other", [r for r in made if r not in woken])):
            if some:
                out[side][path] = {
                    "create": table([r.create for r in some]),
                    "first_command": table([r.command for r in some]),
                    "create_to_first_command_ms": median_ms(
                        [(r.command.end_ns - r.create.start_ns) / 1e6 for r in some]),
                }
    if SPANS_OUT:
        Path(SPANS_OUT).write_text(json.dumps(
            {side: [{"create": r.create.spans, "command": r.command.spans} for r in made]
             for side, made in rounds.items()}))
    return out


async def main() -> None:
    async with running_platform("acspn", free_subnet(20)) as plat:
        started = time.perf_counter()
        if WAIT_PUSHES:
            await startup_pushes_done(plat, started)
        result: dict[str, Any] = {"rounds": ROUNDS,
                                  "waited_for_startup_s": round(time.perf_counter() - started, 1)}
        result |= await measure(plat)
    emit("create_spans", result)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
