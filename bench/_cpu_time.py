"""The CPU time QEMU processes use while their guests idle, per wall second, per thread kind,
read from /proc (no perf needed)."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

# QEMU's threads by what they do: its first thread runs the main loop (device timers, I/O,
# QMP); the others are its vCPUs (running guest code) and its workers (RCU, I/O), which idle.
# Without `-name debug-threads=on` they are all named alike, so the thread id tells them apart.
KINDS = ("main_loop", "vcpus_and_workers")


def thread_ns(pid: int) -> dict[str, tuple[str, int]]:
    """Each live thread's kind and CPU time in ns, by thread id: the first field of its
    schedstat (ns on a CPU), finer than /proc/<pid>/stat's 10 ms ticks, which an idle guest's
    few ms a second would round away."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kind = KINDS[0] if task.name == str(pid) else KINDS[1]
            out[task.name] = (kind, int((task / "schedstat").read_text().split()[0]))
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended since the listing
    return out


async def idle_ms_per_s(pids: list[int], window_s: float) -> list[dict[str, float]]:
    """Each process's CPU ms per wall second over one shared window of `window_s`: in all
    (`total`) and per thread kind."""
    before, started = [thread_ns(pid) for pid in pids], time.monotonic()
    await asyncio.sleep(window_s)
    after, wall = [thread_ns(pid) for pid in pids], time.monotonic() - started
    rates = []
    for first, last in zip(before, after, strict=True):
        rate = dict.fromkeys(KINDS, 0.0)
        for tid, (kind, ns) in last.items():
            rate[kind] += (ns - first.get(tid, (kind, 0))[1]) / 1e6 / wall
        rates.append(rate | {"total": sum(rate.values())})
    return rates


def per_guest(rates: list[dict[str, float]]) -> dict[str, float | int]:
    """Median and spread of the guests' totals, the median of each thread kind, and what all
    of them add up to (in cores)."""
    totals = sorted(rate["total"] for rate in rates)
    return {
        "guests": len(totals),
        "median_ms_per_s": round(statistics.median(totals), 3),
        "min_ms_per_s": round(totals[0], 3),
        "max_ms_per_s": round(totals[-1], 3),
        **{f"{kind}_median_ms_per_s": round(statistics.median(r[kind] for r in rates), 3)
           for kind in KINDS},
        "sum_cores": round(sum(totals) / 1000, 4),
    }
