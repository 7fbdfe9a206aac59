"""The code interpreter through the whole platform, beside its floor in the same run.

- round trip: `run_code("1 + 1")` of the official `e2b_code_interpreter` SDK (gateway, node
  proxy, the server on port 49999, the Python kernel), ROUNDS calls on one sandbox;
- floor: the same execute request sent straight to that kernel from inside the guest
  (jupyter_client on its connection file, no HTTP, no network), timed in the guest;
- between them: the server's own `/execute` called from inside the guest (no network hops);
- create: `Sandbox.create()` to the first `run_code` result (CREATES times, each then killed);
- memory: the PSS of each sandbox's QEMU with SANDBOXES code-interpreter sandboxes running
  (each has run one cell), and of base sandboxes beside them for comparison.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _platform import running_platform
from _qemu_memory import pss_mib
from _stats import emit, summary_ms

from aenv_cli.platform import Platform
from aenv_nodeagent.vmm import detect_accelerator

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "50"))
CREATES = int(os.environ.get("BENCH_CREATES", "10"))
SANDBOXES = int(os.environ.get("BENCH_SANDBOXES", "4"))
CODE = "1 + 1"
CAPTURE_WITHIN_S = 900.0

# Runs in the guest on its own Python, on the connection file of the default Python context's
# kernel (which that kernel names itself).
KERNEL_FLOOR = """
import json, sys, time
from jupyter_client import BlockingKernelClient
rounds, code, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
client = BlockingKernelClient(connection_file=path)
client.load_connection_file()
client.start_channels()
client.wait_for_ready(timeout=30)
samples = []
for _ in range(rounds):
    start = time.perf_counter()
    reply = client.execute_interactive(code, timeout=30, output_hook=lambda msg: None,
                                       store_history=False)
    samples.append(time.perf_counter() - start)
    assert reply['content']['status'] == 'ok', reply
client.stop_channels()
print(json.dumps({'samples': samples}))
"""
CONNECTION_FILE = "from ipykernel.connect import get_connection_file\nget_connection_file()"

SERVER_IN_GUEST = """
import json, sys, time, urllib.request
rounds, code = int(sys.argv[1]), sys.argv[2]
samples = []
for _ in range(rounds):
    body = json.dumps({'code': code}).encode()
    request = urllib.request.Request('http://127.0.0.1:49999/execute', data=body,
                                     headers={'Content-Type': 'application/json'})
    start = time.perf_counter()
    with urllib.request.urlopen(request) as response:
        lines = response.read().decode().splitlines()
    samples.append(time.perf_counter() - start)
    assert any('"result"' in line for line in lines), lines
print(json.dumps({'samples': samples}))
"""


def _sdk_env(plat: Platform) -> None:
    os.environ.update({k: v for k, v in plat.e2b_env().items() if k.startswith("E2B_")})


def _first_sandbox() -> Any:
    """The first create waits for the template's capture (the node prewarms it at start)."""
    import httpx
    from e2b import SandboxException, ServiceBusyException
    from e2b_code_interpreter import Sandbox

    deadline = time.monotonic() + CAPTURE_WITHIN_S
    while True:
        try:
            return Sandbox.create(timeout=600, request_timeout=180)
        except (SandboxException, ServiceBusyException, httpx.TimeoutException):
            if time.monotonic() > deadline:
                raise
            time.sleep(5)


def _guest_samples(sandbox: Any, script: str, *args: str) -> list[float]:
    sandbox.files.write("/tmp/bench_probe.py", script)
    argv = " ".join(shlex.quote(arg) for arg in (str(ROUNDS), CODE, *args))
    result = sandbox.commands.run(f"PYTHONPATH= python3 /tmp/bench_probe.py {argv}",
                                  user="user", timeout=600)
    return list(json.loads(result.stdout.strip().splitlines()[-1])["samples"])


def round_trips(sandbox: Any) -> dict[str, object]:
    assert sandbox.run_code(CODE).text == "2"  # warm: the first call after a create
    platform = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        execution = sandbox.run_code(CODE)
        platform.append(time.perf_counter() - start)
        assert execution.text == "2", execution
    connection_file = sandbox.run_code(CONNECTION_FILE).text
    assert connection_file, "the kernel did not name its connection file"
    kernel = _guest_samples(sandbox, KERNEL_FLOOR, connection_file)
    server = _guest_samples(sandbox, SERVER_IN_GUEST)
    p50, floor = statistics.median(platform), statistics.median(kernel)
    return {"platform_run_code": summary_ms(platform),
            "floor_kernel_in_guest": summary_ms(kernel),
            "server_in_guest": summary_ms(server),
            "ratio_p50_platform_over_floor": round(p50 / floor, 2),
            "overhead_p50_ms": round((p50 - floor) * 1000, 2)}


def creates() -> dict[str, object]:
    from e2b_code_interpreter import Sandbox

    totals, api = [], []
    for _ in range(CREATES):
        start = time.perf_counter()
        sandbox = Sandbox.create(timeout=120)
        created = time.perf_counter()
        assert sandbox.run_code(CODE).text == "2"
        totals.append(time.perf_counter() - start)
        api.append(created - start)
        sandbox.kill()
    return {"create_to_first_result": summary_ms(totals), "create_call": summary_ms(api)}


def _qemu_pss_mib(home: Path, sandbox_id: str) -> float:
    """The PSS of the sandbox's QEMU, found by the pidfile in its node's state dir (a pooled
    VM's command line does not name the sandbox it became)."""
    [pidfile] = home.glob(f"**/sandboxes/{sandbox_id}/vm/qemu.pid")
    pss: float = pss_mib(int(pidfile.read_text().strip()))
    return pss


def memory(home: Path) -> dict[str, object]:
    from e2b import Sandbox as BaseSandbox
    from e2b_code_interpreter import Sandbox

    interpreters = [Sandbox.create(timeout=300) for _ in range(SANDBOXES)]
    bases = [BaseSandbox.create(timeout=300) for _ in range(SANDBOXES)]
    try:
        for sandbox in interpreters:
            assert sandbox.run_code("import pandas; 1 + 1").text == "2"
        for base in bases:
            base.commands.run("true")
        time.sleep(2)
        ours = [_qemu_pss_mib(home, s.sandbox_id) for s in interpreters]
        theirs = [_qemu_pss_mib(home, s.sandbox_id) for s in bases]
    finally:
        for sandbox in [*interpreters, *bases]:
            sandbox.kill()
    return {"sandboxes": SANDBOXES,
            "code_interpreter_pss_mib": {"median": round(statistics.median(ours), 1),
                                         "each": [round(x, 1) for x in ours]},
            "base_pss_mib": {"median": round(statistics.median(theirs), 1),
                             "each": [round(x, 1) for x in theirs]}}


async def main() -> None:
    async with running_platform("abeci", "10.216.0.0/20") as plat:
        _sdk_env(plat)
        first = await asyncio.to_thread(_first_sandbox)
        try:
            trips = await asyncio.to_thread(round_trips, first)
        finally:
            await asyncio.to_thread(first.kill)
        made = await asyncio.to_thread(creates)
        held = await asyncio.to_thread(memory, plat.home)
    emit("code_interpreter", {
        "rounds": ROUNDS,
        "accelerator": str(detect_accelerator(None).accel),
        "code": CODE,
        "run_code": trips,
        "create": made,
        "memory": held,
    })


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
