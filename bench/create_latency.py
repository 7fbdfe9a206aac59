"""Create → ready latency through the whole platform, beside the raw-QEMU floor.

- platform: 20 sequential `POST /v2/sandboxes` through the gateway, each followed by envd
  `GET /health` through the data plane (the SDK's first envd call), then a kill (not timed), in
  two series. `paced`: before each create the node's warm pool is let refill to its idle depth
  (a trainer's creates have gaps: its episodes), so a create continues a woken guest (the pool
  follows demand: 4 untimed creates first). `back_to_back`: the next create as soon as the last
  sandbox is killed, a sustained rate the pool cannot follow on a small host: mostly pool misses,
  what a miss costs. Each series reports which pool path its creates took.
- floor: the same template snapshot restored by bare QEMU + QMP with no services: exec QEMU with
  `-incoming defer` in a prepared netns, `migrate-incoming`, `cont`, until envd answers /health.

Host-side phases are reported apart from guest wake-up: under TCG (these machines) re-translating
guest code dominates wake-up, on KVM it is a few ms.

A fresh node pushes its built-in template captures and their disks (~1 GB) to its empty
snapstore at start: the creates wait until those pushes are done (the steady state; the JSON
says how long). With BENCH_DURING_PUSHES=1 as many creates run first at once, during them, and
are reported beside the steady ones (`platform_during_startup_pushes`).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import grpc
import httpx
from _first_command_platform import PoolWatch
from _platform import artifact_cache, running_platform
from _stats import emit, summary_ms
from prometheus_client.parser import text_string_to_metric_families

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_cli.platform import Platform
from aenv_cli.ports import address
from aenv_common.snapshots import snapstore_stub
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.network import EgressPolicy, NetworkConfig, NetworkManager, netns_exec_prefix
from aenv_nodeagent.server import base_template_inputs
from aenv_nodeagent.templates import load_snapshot, snapshot_dir, vm_spec
from aenv_nodeagent.vmm import QemuVm, detect_accelerator

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "20"))
# Untimed creates before the paced series: the pool keeps as many woken guests as were asked for.
WARMUP = 4
# The pool's counters of what each create took (woken, prestarted, missed).
TAKES = "aenv_node_pool_takes_total"
DURING_PUSHES = os.environ.get("BENCH_DURING_PUSHES") == "1"
# A fresh node's start-up pushes took ~1-3 min on this 2-core host.
PUSHES_WITHIN_S = 900.0
# Captures a fresh node pushes at start (templates/distribution.py), each after its disks.
BUILTIN_CAPTURES = ("template-base-", "template-code-interpreter-v1-")


async def startup_pushes_done(plat: Platform, started: float) -> float:
    """Seconds from `started` until snapstore holds both built-in captures and the node has no
    push pending (`aenv_node_snapshot_pushes_pending`; a node agent without it: none to say)."""
    metrics = f"http://{address(plat.ports.nodeagent_metrics)}/metrics"
    async with (httpx.AsyncClient(timeout=10) as client,
                grpc.aio.insecure_channel(address(plat.ports.snapstore)) as channel):
        store = snapstore_stub(channel)
        while True:
            stored = (await store.ListManifests(pb.ListManifestsRequest())).snapshot_ids
            text = (await client.get(metrics)).text
            pending = sum(sample.value for family in text_string_to_metric_families(text)
                          if family.name == "aenv_node_snapshot_pushes_pending"
                          for sample in family.samples)
            captured = all(any(m.startswith(p) for m in stored) for p in BUILTIN_CAPTURES)
            if captured and pending == 0:
                return time.perf_counter() - started
            if time.perf_counter() - started > PUSHES_WITHIN_S:
                raise TimeoutError(f"start-up pushes not done: {sorted(stored)}, {pending}")
            await asyncio.sleep(0.5)


async def create_and_kill(client: httpx.AsyncClient, plat: Platform) -> tuple[float, float]:
    """One create, then envd's /health through the data plane; the kill after is not timed.
    Returns (the create call, create → envd ready), seconds."""
    t0 = time.perf_counter()
    resp = await client.post(f"{plat.api_url}/v2/sandboxes", json={"templateID": "base"},
                             headers={"X-API-Key": plat.api_key})
    t1 = time.perf_counter()
    resp.raise_for_status()
    sid = resp.json()["sandboxID"]
    health = await client.get(f"{plat.sandbox_url}/health",
                              headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983"})
    t2 = time.perf_counter()
    assert health.status_code < 300, health.text
    await client.delete(f"{plat.api_url}/sandboxes/{sid}", headers={"X-API-Key": plat.api_key})
    return t1 - t0, t2 - t0


async def platform_creates(plat: Platform, pool: PoolWatch, *, paced: bool) -> dict[str, object]:
    """ROUNDS creates one at a time; `paced`, each once the pool is back at its idle depth."""
    totals, api = [], []
    before = await pool.read()
    async with httpx.AsyncClient(timeout=120) as client:
        for _ in range(ROUNDS):
            if paced:
                await pool.refilled()
            call, total = await create_and_kill(client, plat)
            api.append(call)
            totals.append(total)
    after = await pool.read()
    return {"create_to_ready": summary_ms(totals), "api_create": summary_ms(api),
            "first_health_after_201": summary_ms([t - a for t, a in zip(totals, api, strict=True)]),
            "pool_takes": {k: after[k] - before.get(k, 0.0) for k in after if k.startswith(TAKES)}}


async def steady_creates(plat: Platform, pool: PoolWatch) -> dict[str, object]:
    async with httpx.AsyncClient(timeout=120) as client:
        for _ in range(WARMUP):
            await create_and_kill(client, plat)
    await pool.settle()
    paced = await platform_creates(plat, pool, paced=True)
    paced["rounds_started_on_partial_pool"] = pool.refill_misses
    return {"paced": paced, "back_to_back": await platform_creates(plat, pool, paced=False)}


async def raw_qemu_restores(cache_dir: Path) -> dict[str, object]:
    """The floor: no gateway, scheduler, etcd or node agent; only QEMU, QMP and the netns."""
    settings = NodeAgentSettings(cache_dir=cache_dir)
    inputs = await base_template_inputs(settings, detect_accelerator(settings.pvm_guest_kernel))
    snap = load_snapshot(snapshot_dir(cache_dir / "templates", inputs))
    assert snap is not None, "template snapshot missing: run the platform once first"
    network = NetworkManager(NetworkConfig(prefix="abench", pool_cidr="10.214.0.0/24"))
    slot = await network.create_slot(EgressPolicy())
    totals, exec_qmp, restore, wake = [], [], [], []
    try:
        async with aiohttp.ClientSession() as session:
            envd = EnvdClient(session)
            for _ in range(ROUNDS):
                with tempfile.TemporaryDirectory() as tmp:
                    overlay = Path(tmp) / "disk.qcow2"
                    proc = await asyncio.create_subprocess_exec(
                        "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
                        "-b", str(snap.disk), str(overlay))
                    await proc.wait()
                    spec = vm_spec(inputs, overlay, snap.memory, mem_shared=False)
                    t0 = time.perf_counter()
                    vm = await QemuVm.launch(spec, Path(tmp) / "vm", incoming=True,
                                             argv_prefix=netns_exec_prefix(slot))
                    t1 = time.perf_counter()
                    try:
                        await vm.restore(snap.state)
                        t2 = time.perf_counter()
                        await envd.wait_healthy(slot.ns_ip, 30)
                        t3 = time.perf_counter()
                    finally:
                        await vm.shutdown()
                    totals.append(t3 - t0)
                    exec_qmp.append(t1 - t0)
                    restore.append(t2 - t1)
                    wake.append(t3 - t2)
    finally:
        await network.destroy_slot(slot)
    return {
        "exec_to_ready": summary_ms(totals),
        "exec_to_qmp": summary_ms(exec_qmp),
        "migrate_incoming_and_cont": summary_ms(restore),
        "guest_wakeup_to_health": summary_ms(wake),
    }


def p50_of(result: dict[str, object], key: str) -> float:
    return float(result[key]["p50_ms"])  # type: ignore[index]


async def main() -> None:
    during: dict[str, object] = {}
    async with (running_platform("abenp", "10.215.0.0/20") as plat,
                httpx.AsyncClient(timeout=10) as metrics):
        pool = PoolWatch(plat, metrics)
        started = time.perf_counter()
        pushes = asyncio.create_task(startup_pushes_done(plat, started))
        if DURING_PUSHES:
            during = await platform_creates(plat, pool, paced=False)
            during["startup_pushes_still_running_at_end"] = not pushes.done()
        pushes_s = await pushes
        waited_s = time.perf_counter() - started
        steady = await steady_creates(plat, pool)
    floor = await raw_qemu_restores(artifact_cache())
    floor_p50 = p50_of(floor, "exec_to_ready")
    result: dict[str, object] = {
        "rounds": ROUNDS,
        "waited_for_startup_pushes_s": round(waited_s, 2),
        "startup_pushes_done_after_s": round(pushes_s, 2),
        "accelerator": str(detect_accelerator(None).accel),
        "platform": steady,
        "floor_raw_qemu_restore": floor,
    }
    for series, measured in steady.items():
        p50 = p50_of(measured, "create_to_ready")  # type: ignore[arg-type]
        result[f"ratio_p50_{series}_over_floor"] = round(p50 / floor_p50, 3)
        result[f"overhead_p50_{series}_ms"] = round(p50 - floor_p50, 2)
    if during:
        during_p50 = p50_of(during, "create_to_ready")
        result |= {
            "platform_during_startup_pushes": during,
            "ratio_p50_during_pushes_over_floor": round(during_p50 / floor_p50, 3),
        }
    emit("create_latency", result)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
