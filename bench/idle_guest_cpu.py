"""What an idle sandbox costs the host's CPU, beside the floor of a bare guest, in one run.

COUNT `base` sandboxes are created through a single-node platform (so restored by its node
agent, envd /init done), left to settle for SETTLE_S, then their QEMUs' CPU time is read over
one shared WINDOW_S (every thread's schedstat: _cpu_time.py). Beside them, the floor: FLOOR_COUNT
bare QEMUs of the same VM shape (kernel, machine, devices, netns) booted into a guest running
nothing of ours (_idle_floor.py), measured over their own window after the sandboxes are gone.
One sandbox is also asked what its guest does while idle: its clocksource and clock event
device, its timer interrupts a second, and which of its processes used CPU.

Reported per guest: the median CPU ms per wall second (split into QEMU's main loop, vCPU and
other threads), its ratio to the floor, and what 200 such guests would take of the host.

Run: .venv/bin/python bench/idle_guest_cpu.py  (COUNT=8 FLOOR_COUNT=4 SETTLE_S=20 WINDOW_S=30)
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

from _cpu_time import idle_ms_per_s, per_guest
from _idle_floor import bare_guests
from _platform import running_platform
from _stats import emit, summary_ms

from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_testing.subnets import free_subnet

COUNT = int(os.environ.get("COUNT", "8"))
FLOOR_COUNT = int(os.environ.get("FLOOR_COUNT", "4"))
SETTLE_S = float(os.environ.get("SETTLE_S", "20"))
WINDOW_S = float(os.environ.get("WINDOW_S", "30"))
GUEST_WINDOW_S = 10
SCALE = 200  # the sandboxes a trainer holds in tests/e2e/test_leases.py

# Run in one idle sandbox: its clock devices, then its timer interrupts (LOC) and each
# process's CPU ticks (USER_HZ) before and after GUEST_WINDOW_S of idling.
GUEST_PROBE = f"""
cat /sys/devices/system/clocksource/clocksource0/current_clocksource
cat /sys/devices/system/clockevents/clockevent0/current_device
ticks() {{ for s in /proc/[0-9]*/stat; do cat "$s" 2>/dev/null; echo; done |
  awk 'NF>15 {{ print $1, $2, $14 + $15 }}'; }}
awk '$1 == "LOC:" {{ print $2 }}' /proc/interrupts; ticks > /tmp/idle-ticks-0
sleep {GUEST_WINDOW_S}
awk '$1 == "LOC:" {{ print $2 }}' /proc/interrupts; ticks > /tmp/idle-ticks-1
awk 'NR == FNR {{ t[$1] = $3; next }} $3 > t[$1] {{ print $2, $3 - t[$1] }}' \
  /tmp/idle-ticks-0 /tmp/idle-ticks-1
rm -f /tmp/idle-ticks-0 /tmp/idle-ticks-1
"""


def qemu_pid(home: Path, sandbox_id: str) -> int:
    """The sandbox's QEMU, from the pidfile its node agent keeps in the sandbox's directory."""
    found = list(home.rglob(f"sandboxes/{sandbox_id}/vm/qemu.pid"))
    if len(found) != 1:
        raise RuntimeError(f"no single QEMU pidfile for {sandbox_id}: {found}")
    return int(found[0].read_text().split()[0])


async def guest_view(client: GatewayClient, sandbox_id: str) -> dict[str, object]:
    result = await client.run(sandbox_id, GUEST_PROBE, user="root",
                              timeout_s=GUEST_WINDOW_S + 120)
    lines = result.stdout.decode().splitlines()
    if result.exit_code != 0 or len(lines) < 4:
        raise RuntimeError(f"guest probe failed ({result.exit_code}): {result.stderr!r}")
    busy: dict[str, int] = {}
    for line in lines[4:]:
        name, _, ticks = line.rpartition(" ")
        busy[name] = busy.get(name, 0) + int(ticks)
    return {
        "clocksource": lines[0], "clockevent": lines[1],
        "timer_interrupts_per_s": round((int(lines[3]) - int(lines[2])) / GUEST_WINDOW_S, 1),
        # The probe's own processes (sleep, awk, cat, sh) are among them.
        "process_cpu_ms_per_s": {name: ticks * 10 / GUEST_WINDOW_S
                                 for name, ticks in sorted(busy.items())},
    }


async def sandboxes(platform: Platform) -> tuple[dict[str, object], dict[str, float | int]]:
    created: list[str] = []
    create_s: list[float] = []
    async with GatewayClient.for_home(platform.home, timeout_s=600) as client:
        try:
            for _ in range(COUNT):
                started = time.perf_counter()
                created.append((await client.create_sandbox("base")).sandbox_id)
                create_s.append(time.perf_counter() - started)
            pids = [qemu_pid(platform.home, sandbox_id) for sandbox_id in created]
            await asyncio.sleep(SETTLE_S)
            rates = await idle_ms_per_s(pids, WINDOW_S)
            guest = await guest_view(client, created[0])
        finally:
            await asyncio.gather(*(client.kill_sandbox(sandbox_id) for sandbox_id in created),
                                 return_exceptions=True)
    return {"create_latency": summary_ms(create_s), "guest": guest}, per_guest(rates)


async def floor() -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="aenv-idle-floor-") as tmp:
        prefix = "aif" + secrets.token_hex(2) + "x"
        async with bare_guests(FLOOR_COUNT, Path(tmp), prefix, free_subnet(24)) as vms:
            await asyncio.sleep(SETTLE_S)
            rates = await idle_ms_per_s([vm.pid for vm in vms], WINDOW_S)
    summary: dict[str, float | int] = per_guest(rates)
    return summary


async def main() -> None:
    os.environ.update(
        AENV_NODEAGENT_PREWARM_CODE_INTERPRETER="false",
        # No woken guests: their refills after the creates would run in the measured window.
        AENV_NODEAGENT_WARM_POOL_GUESTS="0",
        AENV_NODEAGENT_RESTORE_READY_TIMEOUT_S="300",
    )
    prefix = "aid" + secrets.token_hex(2) + "x"
    async with running_platform(prefix, free_subnet(22)) as platform:
        ours, idle = await sandboxes(platform)
    print(json.dumps(ours | {"idle": idle}), file=sys.stderr, flush=True)
    bare = await floor()
    median, floor_median = float(idle["median_ms_per_s"]), float(bare["median_ms_per_s"])
    emit("idle_guest_cpu", {
        "settle_s": SETTLE_S,
        "window_s": WINDOW_S,
        "sandbox": ours | {"idle": idle},
        "floor_bare_guest": bare,
        "ratio_to_floor": round(median / floor_median, 2) if floor_median else None,
        f"cores_for_{SCALE}_idle_sandboxes": round(SCALE * median / 1000, 3),
        "host_cpus": os.cpu_count(),
    })


if __name__ == "__main__":
    asyncio.run(main())
