"""Time to a fresh sandbox's first command result — what an RL trainer waits for — through the
whole platform, beside a floor measured in the same run, with the node agent's warm pool of
restored guests off ("before") and on ("after").

- create → first `commands.run("true")` result through the unmodified E2B SDK (AsyncSandbox)
  and create → first `run("true")` through the native client (aenv_client), at 1 and 8 creates
  at once (BENCH_LEVELS=1,8,32 adds 32); the pool is let refill to its idle depth before each
  round;
- fork of a running sandbox into 1, 4 and 16 children (BENCH_FORKS) → every child's first
  command result (native fork);
- resume of a paused sandbox → its first command result (native);
- the node agent's pool as its metrics show it (`aenv_node_pool*`, idle after BENCH_WARMUP
  untimed creates, default 4, since the pool of guests follows recent demand; and at the end,
  with its takes by kind) and the host memory (PSS) of the platform's QEMUs while no sandbox
  runs (the pool's pre-started or warmed guests), at both points;
- pool miss: creates at 1 on a third platform with every warm pool setting 0;
- floor: the same template snapshot restored by bare QEMU + QMP in a prepared netns (no
  services), then `true` run by that guest's envd directly (Connect process Start over HTTP):
  restore + first command. The SDK's command is `bash -l -c true`, the native one `sh -c true`;
  each side's ratio is over the floor running the same. Fork children are compared with as many
  bare restores at once (the fork also captures its parent first; the floor does not).

The platform runs twice: AENV_NODEAGENT_WARM_POOL_GUESTS=0 ("before"), then unset ("after"; or
BENCH_WARM_POOL_GUESTS if given). A node agent without that setting ignores it: both runs then
measure the same platform. Rounds: BENCH_ROUNDS (sequential creates, resumes; default 3),
BENCH_BURST_ROUNDS (rounds of each level above 1; default 1). Under TCG a level of 32 takes
minutes (on a crowded 2-core host most of its creates time out), hence not by default.
BENCH_RUNS (default before,after,pool_miss) picks the platform runs; each waits until the node's
start-up pushes of its template captures to snapstore are done (the steady state, as
create_latency.py; 1-3 min per run on an idle host), unless BENCH_WAIT_PUSHES=0.

Results: JSON on stdout and bench/results/time_to_first_command.json; with BENCH_PLOT=1 (or
--plot) a plot in docs/figures/time_to_first_command.png.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _first_command_floor import BASH_LOGIN_TRUE, SH_TRUE, first_command_floor
from _first_command_platform import (
    FirstCommands,
    PoolWatch,
    platform_qemu_memory,
    summary,
)
from _lifecycle_workload import FORKS
from _platform import artifact_cache, running_platform
from _stats import emit
from create_latency import startup_pushes_done

from aenv_cli.platform import Platform
from aenv_client import GatewayClient
from aenv_nodeagent.vmm import detect_accelerator
from aenv_testing.subnets import free_subnet

LEVELS = [int(n) for n in os.environ.get("BENCH_LEVELS", "1,8").split(",")]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
BURST_ROUNDS = int(os.environ.get("BENCH_BURST_ROUNDS", "1"))
WARMUP = int(os.environ.get("BENCH_WARMUP", "4"))
RUNS = os.environ.get("BENCH_RUNS", "before,after,pool_miss").split(",")
WAIT_PUSHES = os.environ.get("BENCH_WAIT_PUSHES", "1") == "1"
PLOT = os.environ.get("BENCH_PLOT") == "1" or "--plot" in sys.argv
NET_PREFIX = "attfp"
GUESTS_ENV = "AENV_NODEAGENT_WARM_POOL_GUESTS"
# Every warm pool of the node agent off: the pool-miss run.
NO_POOL = {GUESTS_ENV: "0", "AENV_NODEAGENT_WARM_POOL_SLOTS": "0",
           "AENV_NODEAGENT_WARM_POOL_OVERLAYS": "0", "AENV_NODEAGENT_WARM_POOL_VMS": "0",
           "AENV_NODEAGENT_WARM_POOL_SNAPSHOT_VMS": "0"}
FIGURE = Path(__file__).parent.parent / "docs" / "figures" / "time_to_first_command.png"


def rounds_at(level: int) -> int:
    return ROUNDS if level == 1 else BURST_ROUNDS


async def platform_side(plat: Platform, levels: list[int], *, lifecycle: bool) -> dict[str, Any]:
    """Every measurement through one platform; `lifecycle`: forks and resumes too."""
    os.environ.update(plat.e2b_env())
    started = time.perf_counter()
    if WAIT_PUSHES:
        await startup_pushes_done(plat, started)
    out: dict[str, Any] = {"waited_for_startup_s": round(time.perf_counter() - started, 1)}
    async with (httpx.AsyncClient(timeout=10) as http,
                GatewayClient(plat.grpc_address, plat.api_key, timeout_s=600) as client):
        pool = PoolWatch(plat, http)
        runs = FirstCommands(client, pool)
        # The pool of guests keeps as many as creates asked for lately: a few creates first
        # (untimed), as a trainer's earlier steps would have made.
        if WARMUP:
            await runs.burst("warm-up", runs.native, WARMUP, 1)
        out["pool_idle"] = await pool.settle()
        out["pool_memory_idle"] = platform_qemu_memory(NET_PREFIX)
        for side, first in (("sdk", runs.sdk), ("native", runs.native)):
            out[side] = [await runs.burst(side, first, n, rounds_at(n)) for n in levels]
        if lifecycle:
            out["fork"] = [await runs.fork(n) for n in FORKS]
            out["resume"] = await runs.resume(ROUNDS)
        out["rounds_started_on_partial_pool"] = pool.refill_misses
        # Settled again: the pool of guests follows the demand the rounds made.
        out["pool_end"] = await pool.settle()
        out["pool_memory_end"] = platform_qemu_memory(NET_PREFIX)
        out["errors"] = dict(runs.errors)
    return out


async def floor_side(pool_cidr: str) -> dict[str, Any]:
    """Bare restores + first command, at every count the platform side used."""
    with tempfile.TemporaryDirectory(prefix="attfc-") as tmp:
        async with first_command_floor(artifact_cache(), Path(tmp), pool_cidr) as floor:
            out: dict[str, Any] = {}
            for name, script, counts in (("sh", SH_TRUE, sorted({*LEVELS, *FORKS})),
                                         ("bash_login", BASH_LOGIN_TRUE, LEVELS)):
                runs = []
                for n in counts:
                    each, walls = [], []
                    for _ in range(rounds_at(n)):
                        times, wall = await floor.concurrent(n, script)
                        each.extend(times)
                        walls.append(wall)
                    runs.append({"concurrent": n, "first_command": summary(each),
                                 "wall_until_last": summary(walls)})
                out[name] = runs
            out["resume_sh"] = summary([await floor.resume(SH_TRUE) for _ in range(ROUNDS)])
    return out


def p50(entry: dict[str, Any], key: str = "first_command") -> float | None:
    value = entry.get(key, {}).get("p50_ms")
    return float(value) if value else None


def ratio(top: float | None, bottom: float | None) -> float | None:
    return round(top / bottom, 2) if top and bottom else None


def at(runs: list[dict[str, Any]], count: int) -> dict[str, Any]:
    return next((r for r in runs if r["concurrent"] == count), {})


def at_fork(runs: list[dict[str, Any]], children: int) -> dict[str, Any]:
    return next((r for r in runs if r["children"] == children), {})


def ratios(side: dict[str, Any], floor: dict[str, Any]) -> dict[str, float | None]:
    """p50 of each platform figure over the floor's doing the same."""
    out: dict[str, float | None] = {}
    for run in side["sdk"]:
        out[f"sdk_{run['concurrent']}"] = ratio(
            p50(run), p50(at(floor["bash_login"], run["concurrent"])))
    for run in side["native"]:
        out[f"native_{run['concurrent']}"] = ratio(
            p50(run), p50(at(floor["sh"], run["concurrent"])))
    for fork in side.get("fork", []):
        bare = at(floor["sh"], fork["children"])
        out[f"fork_{fork['children']}_child_p50"] = ratio(
            p50(fork, "child_first_command"), p50(bare))
        out[f"fork_{fork['children']}_all_children"] = ratio(
            fork["all_children_first_command_ms"], p50(bare, "wall_until_last"))
    if "resume" in side:
        out["resume"] = ratio(p50(side["resume"]), floor["resume_sh"].get("p50_ms"))
    return out


def after_over_before(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key in ("sdk", "native"):
        for b, a in zip(before[key], after[key], strict=True):
            out[f"{key}_{b['concurrent']}"] = ratio(p50(a), p50(b))
    for b, a in zip(before["fork"], after["fork"], strict=True):
        out[f"fork_{b['children']}_child_p50"] = ratio(
            p50(a, "child_first_command"), p50(b, "child_first_command"))
    out["resume"] = ratio(p50(after["resume"]), p50(before["resume"]))
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    empty: dict[str, Any] = {"sdk": [], "native": [], "fork": [], "resume": {}}
    before, after = result.get("before", empty), result.get("after", empty)
    miss, floor = result.get("pool_miss", empty), result["floor"]
    labels: list[str] = []
    bars: dict[str, list[float]] = {"before (pool of guests off)": [], "after (on)": [],
                                    "pool miss (every pool off)": [],
                                    "floor (bare restore + envd)": []}
    series = list(bars.values())

    def add(label: str, values: list[float | None]) -> None:
        labels.append(label)
        for bucket, value in zip(series, values, strict=True):
            bucket.append(value or 0.0)

    for n in LEVELS:
        for side, bare in (("sdk", "bash_login"), ("native", "sh")):
            add(f"{'SDK' if side == 'sdk' else side} x{n}",
                [p50(at(run[side], n)) for run in (before, after, miss)]
                + [p50(at(floor[bare], n))])
    for n in FORKS:
        add(f"fork {n}\n(per child)", [p50(at_fork(run["fork"], n), "child_first_command")
                                       for run in (before, after)]
            + [None, p50(at(floor["sh"], n))])
    add("resume", [p50(before["resume"]), p50(after["resume"]), None,
                   floor["resume_sh"]["p50_ms"]])
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(labels)), 4.8))
    xs = range(len(labels))
    for i, (name, values) in enumerate(bars.items()):
        ax.bar([x + (i - 1.5) * 0.2 for x in xs], values, 0.2, label=name)
    ax.set_xticks(list(xs), labels, fontsize="small")
    ax.set_yscale("log")
    ax.set_ylabel("ms to the first command's result (p50)")
    ax.set_title(f"time to first command, {result['accelerator']}, 2 cores")
    ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def cancel_on_signals() -> None:
    """SIGINT and SIGTERM cancel the run, so that every platform and VM it started is stopped
    on the way out (also when started where SIGINT is ignored, as a background job)."""
    task, loop = asyncio.current_task(), asyncio.get_running_loop()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)


async def main() -> None:
    cancel_on_signals()
    after_env = ({GUESTS_ENV: os.environ["BENCH_WARM_POOL_GUESTS"]}
                 if "BENCH_WARM_POOL_GUESTS" in os.environ else {})
    os.environ.pop(GUESTS_ENV, None)  # "after" is the node agent's default unless asked
    result: dict[str, Any] = {"accelerator": str(detect_accelerator(None).accel),
                              "levels": LEVELS, "forks": FORKS, "rounds": ROUNDS,
                              "burst_rounds": BURST_ROUNDS}
    # Kept on stderr, as each platform run's, in case a later part fails.
    result["floor"] = await floor_side(free_subnet(24))
    print(json.dumps({"floor": result["floor"]}), file=sys.stderr, flush=True)
    for name, env, lifecycle, levels in (("before", {GUESTS_ENV: "0"}, True, LEVELS),
                                         ("after", after_env, True, LEVELS),
                                         ("pool_miss", NO_POOL, False, [1])):
        if name not in RUNS:
            continue
        async with running_platform(NET_PREFIX, free_subnet(20), env=env) as plat:
            result[name] = await platform_side(plat, levels, lifecycle=lifecycle)
        result[name]["settings"] = env
        print(json.dumps({name: result[name]}), file=sys.stderr, flush=True)
    result["ratio_p50_over_floor"] = {
        name: ratios(result[name], result["floor"])
        for name in ("before", "after", "pool_miss") if name in result}
    if "before" in result and "after" in result:
        result["ratio_p50_after_over_before"] = after_over_before(
            result["before"], result["after"])
    emit("time_to_first_command", result)
    if PLOT:
        plot(result, FIGURE)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
