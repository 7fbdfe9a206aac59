"""An idle envd sleeps: no periodic wake-up (each one is emulated on the host's CPU under TCG,
for every idle sandbox), and a stop signal still ends it at once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import uvicorn
from envd_harness import _wait_healthy, start_envd, stop_process

from aenv_envd.quiet_server import QuietServer

IDLE_S = 2.0


def wake_ups(pid: int) -> int:
    """The voluntary context switches of all the process's threads: one per sleep it left."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def test_idle_envd_does_not_wake_and_stops_on_sigterm() -> None:
    process, url = start_envd()
    try:
        _wait_healthy(url, process)
        time.sleep(0.5)  # what answering /health left (keep-alive close) is done
        before = wake_ups(process.pid)
        time.sleep(IDLE_S)
        woke = wake_ups(process.pid) - before
        # uvicorn's own loop wakes every 0.1 s: 20 times here.
        assert woke <= 3, f"an idle envd woke {woke} times in {IDLE_S} s"
        process.send_signal(signal.SIGTERM)
        try:
            # uvicorn raises the signal again once it has shut down gracefully.
            assert process.wait(timeout=10) in (0, -signal.SIGTERM)
        except subprocess.TimeoutExpired:
            raise AssertionError("envd did not stop within 10 s of SIGTERM") from None
    finally:
        stop_process(process)


def test_main_loop_waits_for_exit_and_ends_on_it() -> None:
    server = QuietServer(uvicorn.Config("aenv_envd.app:never_loaded"))
    ticks = 0
    original = server.on_tick

    async def counted(counter: int) -> bool:
        nonlocal ticks
        ticks += 1
        return await original(counter)

    server.on_tick = counted  # type: ignore[method-assign]

    async def scenario() -> None:
        loop_task = asyncio.create_task(server.main_loop())
        await asyncio.sleep(0.5)
        assert ticks == 1, "the loop woke without being asked"
        server.handle_exit(signal.SIGTERM, None)
        await asyncio.wait_for(loop_task, 5)

    asyncio.run(scenario())
    assert server.should_exit
