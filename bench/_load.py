"""Controlled host load for the benchmarks: N busy loops beside what is measured, so a figure
taken "on a loaded host" can be taken again. They run in the bench's own cgroup (the root one
when it is run from a shell at the top) and end with the block, also on failure.

Each loop is a session of its own, as another user's job is: with the scheduler's autogroups
(kernel.sched_autogroup_enabled, on here) a session in the root cgroup weighs one task's share
whatever its number of threads, so N loops in the bench's own session would weigh as one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

BUSY_LOOP = "while True: pass"


def load_from_env() -> int:
    """BENCH_LOAD: how many busy loops run during the measurement (0: none)."""
    return int(os.environ.get("BENCH_LOAD", "0"))


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[list[int]]:
    """`count` processes spinning on a CPU each, for the block's duration; their pids."""
    loops: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(count):
            loops.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP],
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        yield [loop.pid for loop in loops]
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait()


def cpu_seconds(pids: list[int]) -> float:
    """The CPU time `pids` used so far (user + system): what the load got of the host."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks
