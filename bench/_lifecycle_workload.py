"""What the lifecycle benchmark's node-agent and raw-QEMU sides share: the work done in the
guest, and the template store both take the base template from."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import statistics
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from _stats import summary_ms

from aenv.cluster.v1 import cluster_pb2
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.sandbox.context import SandboxSettings, WingContext
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.server import base_template_inputs
from aenv_nodeagent.templates import TemplateStore
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.vmm import QemuDriver, detect_accelerator
from aenv_testing.records import MemoryRecords

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
FORKS = [int(n) for n in os.environ.get("BENCH_FORKS", "1,4,16").split(",")]
# Each fork size is measured this many times, a new parent (or fresh restores) each time.
FORK_ROUNDS = int(os.environ.get("BENCH_FORK_ROUNDS", "3"))
ENVD_PORT = 49983
# Rewritten before every snapshot: non-zero data (zero pages cost nothing in a capture).
DIRTY = (
    "yes $RANDOM | head -c 1G > /root/dirty.disk && sync && mkdir -p /run/dirty && "
    "(mountpoint -q /run/dirty || mount -t tmpfs -o size=300m tmpfs /run/dirty) && "
    "yes $RANDOM | head -c 256M > /run/dirty/mem"
)


async def settle_host_writeback() -> None:
    """Flush the host's dirty page cache (the guest's 1 GiB, earlier images) before a measured
    snapshot, so that neither side's figure depends on what the other left to write back."""
    await asyncio.to_thread(os.sync)


async def guest_sh(session: aiohttp.ClientSession, host: str, token: str, script: str) -> None:
    """Run a shell command in the guest through envd (Connect JSON) and wait for it to end."""
    payload = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", script]}}).encode()
    async with session.post(
        f"http://{host}:{ENVD_PORT}/process.Process/Start",
        data=struct.pack(">BI", 0, len(payload)) + payload,
        headers={
            "content-type": "application/connect+json",
            "X-Access-Token": token,
            "authorization": "Basic " + base64.b64encode(b"root:").decode(),
        },
        timeout=aiohttp.ClientTimeout(total=600),
    ) as resp:
        body = await resp.read()
    if resp.status != 200 or re.search(rb'"exitCode":\s*-?[1-9]', body):
        raise RuntimeError(f"guest command failed: {body[-300:]!r}")


def fork_summary(
    children: int, took_s: list[float], memories: list[dict[str, float | None]]
) -> dict[str, object]:
    """A fork size's rounds: the time until all children answered (p50 and spread), and each
    memory figure's median over the rounds."""
    took = summary_ms(took_s)
    memory = {key: round(statistics.median(v for m in memories if (v := m[key]) is not None), 1)
              for key in memories[0]}
    return {"children": children, "fork_to_all_ready_ms": took["p50_ms"],
            "fork_to_all_ready": took, **memory}


def template_store(
    settings: NodeAgentSettings, network: NetworkManager, session: aiohttp.ClientSession
) -> TemplateStore:
    return TemplateStore(
        settings.resolved_templates_dir(),
        network,
        EnvdClient(session),
        QemuDriver(),
        GuestCommands(session),
        boot_timeout_s=120,
        boot_attempts=3,
    )


@dataclass(frozen=True)
class BenchNode:
    wing: SandboxWing
    pool: WarmPool | None

    async def pool_refilled(self) -> None:
        """Until the warm pool is full again (a running node's is, between two operations).

        :raise RuntimeError: it was not within two minutes."""
        if self.pool is None:
            return
        for _ in range(2400):
            if self.pool.full():
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"the warm pool did not refill within two minutes: {self.pool.sizes()}")


@asynccontextmanager
async def bench_node(
    state_dir: Path, session: aiohttp.ClientSession, prefix: str, pool_cidr: str, *,
    pooled_slots: int = 0, pooled_vms: int = 0, pooled_snapshot_vms: int = 0,
) -> AsyncIterator[BenchNode]:
    """A node agent's sandbox wing over real QEMU, netns and envd, with the base template
    (no gateway, scheduler or etcd), and a warm pool of `pooled_slots` network slots,
    `pooled_vms` pre-started VMs per template and up to `pooled_snapshot_vms` more as restores
    from snapshots ask (a node agent's defaults: config.py), no woken guests; every sandbox,
    pooled slot and netns of its prefix is removed at the end."""
    settings = NodeAgentSettings(state_dir=state_dir)
    network = NetworkManager(NetworkConfig(prefix=prefix, pool_cidr=pool_cidr))
    envd = EnvdClient(session)
    templates = template_store(settings, network, session)
    templates.register(await base_template_inputs(settings, detect_accelerator(None)))
    pool = (WarmPool(network, state_dir / "pool", slots=pooled_slots, overlays_per_backing=0,
                     vms_per_template=pooled_vms, snapshot_vms_per_template=pooled_snapshot_vms,
                     vm_root=state_dir / "sandboxes")
            if pooled_slots or pooled_vms or pooled_snapshot_vms else None)
    wing = SandboxWing(
        WingContext.of(SandboxSettings(state_dir, ready_timeout_s=300), SandboxRegistry("bench"),
                       MemoryRecords(), templates, network, envd),
        QemuDriver(), pool=pool,
    )
    node = BenchNode(wing, pool)
    try:
        if pool is not None:
            pool.start()
        await node.pool_refilled()
        yield node
    finally:
        await wing.destroy_all()
        if pool is not None:
            await pool.close()
        await network.destroy_orphans(keep=set())


def spec(template_id: str = BASE_TEMPLATE) -> cluster_pb2.SandboxSpec:
    return cluster_pb2.SandboxSpec(
        sandbox_id=new_sandbox_id(),
        template_id=template_id,
        envd_access_token=new_secret(),
        timeout_seconds=3600,
    )
