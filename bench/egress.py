"""Egress by name: what the node's egress process costs a guest's traffic, and its memory.

In one run, against the test internet (tests/e2e/egress/internet.py: real HTTP/HTTPS servers in
a netns of their own, nothing leaves the machine), from two sandboxes of one platform:

- `egress_path`: policy `allowOut: [<name>], denyOut: [0.0.0.0/0]` — the guest's TCP is
  redirected to the egress process, which reads the Host/SNI, decides, dials and splices;
- `unfiltered`: beside it, an IP-only policy (`allowOut: [<address>/32]`), nft alone, no
  egress process: the node forwards and masquerades the guest's own traffic (host_nat.py),
  towards the test internet's prefixes only (`Internet.node_env`).

Each guest runs bench/_egress_guest.py, the two in turn, four blocks each: HTTP keep-alive
request latency, a large download (MB/s), and TLS connect+handshake+request latency (a new
connection each); both connect to the same server address naming the same host.

Then `egress_memory`: a second egress process started as the node agent starts it
(`start_egress`), RSS and PSS with no slot and with 100 slots attached, each with a policy of
names and a header rule (slots without VMs: the network manager builds them).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from _platform import running_platform
from _stats import emit, summary_ms
from e2b import Sandbox, SandboxNetworkOpts

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.platform import Platform
from aenv_common.cluster import ClusterStore
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.egress.startup import start_egress
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkConfig, NetworkManager
from aenv_testing.subnets import free_subnet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.egress.internet import ALLOWED, WILD, Internet, running_internet

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "200"))
TLS_ROUNDS = int(os.environ.get("BENCH_TLS_ROUNDS", "40"))
DOWNLOAD_MIB = int(os.environ.get("BENCH_DOWNLOAD_MIB", "64"))
SLOTS = int(os.environ.get("BENCH_EGRESS_SLOTS", "100"))
BLOCKS = 4
GUEST_SCRIPT = Path(__file__).with_name("_egress_guest.py")
NET_PREFIX = "aebeg"


def guest_run(sandbox: Sandbox, address: str, rounds: int, tls_rounds: int,
              download: int) -> dict[str, Any]:
    """One block of the guest's measurements toward `address` (naming ALLOWED; "-": the address
    the guest's resolver gives), raw."""
    done = sandbox.commands.run(
        f"python3 /root/egress_guest.py {address} {ALLOWED} /root/test-ca.pem {rounds} "
        f"{tls_rounds} {download}", user="root", timeout=1800, request_timeout=1830)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def summarised(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    size, seconds = sum(b["download_bytes"] for b in blocks), sum(b["download_s"] for b in blocks)
    return {
        "http_keepalive_request": summary_ms([x for b in blocks for x in b["keepalive_s"]]),
        "tls_connect_handshake_request": summary_ms([x for b in blocks for x in b["tls_s"]]),
        "download_mib": size / (1 << 20),
        "download_mb_per_s": round(size / 1e6 / seconds, 2),
    }


@contextlib.contextmanager
def sandbox_with(network: dict[str, Any], net: Internet) -> Iterator[Sandbox]:
    sandbox = Sandbox.create(timeout=3600, network=cast(SandboxNetworkOpts, network))
    try:
        sandbox.files.write("/root/egress_guest.py", GUEST_SCRIPT.read_text(), user="root")
        sandbox.files.write("/root/test-ca.pem", net.ca_pem, user="root")
        yield sandbox
    finally:
        sandbox.kill()


def data_paths(net: Internet) -> dict[str, Any]:
    """Both paths measured in alternating blocks, so the load of a shared host drifting during
    the run weighs on both alike."""
    address = net.addresses[ALLOWED][0]
    blocks: dict[str, list[dict[str, Any]]] = {"egress_path": [], "unfiltered": []}
    shares = (ROUNDS // BLOCKS, TLS_ROUNDS // BLOCKS, (DOWNLOAD_MIB << 20) // BLOCKS)
    with (sandbox_with({"allow_out": [ALLOWED], "deny_out": ["0.0.0.0/0"]}, net) as named,
          sandbox_with({"allow_out": [f"{address}/32"], "deny_out": ["0.0.0.0/0"]},
                       net) as direct):
        for _ in range(BLOCKS):
            blocks["egress_path"].append(guest_run(named, "-", *shares))
            blocks["unfiltered"].append(guest_run(direct, address, *shares))
    return {path: summarised(done) for path, done in blocks.items()}


def memory_of(pid: int) -> dict[str, int]:
    """RSS and PSS (KiB) of one process."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss"):
            fields[f"{name.lower()}_kib"] = int(rest.split()[0])
    return fields


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def bench_policy() -> EgressPolicy:
    transform = cluster_pb2.HeaderTransform(set_headers={"X-Bench": "1"})
    return EgressPolicy(network=cluster_pb2.NetworkPolicy(
        allow_internet_access=True, allow_out=[ALLOWED, f"*.{WILD}"], deny_out=["0.0.0.0/0"],
        rules=[cluster_pb2.NetworkRule(host=ALLOWED, transforms=[transform])]),
        owner_key_id="bench")


async def egress_memory(plat: Platform) -> dict[str, Any]:
    prefix, pool = "aebm", free_subnet(22)
    with environment(plat.service_env() | {"AENV_NODEAGENT_NET_PREFIX": prefix,
                                           "AENV_NODEAGENT_NET_POOL_CIDR": pool}):
        settings = NodeAgentSettings()

    async def nothing(netns: str, addresses: list[str], ttl_s: float) -> None:
        return None

    store = await ClusterStore.connect(settings.common)
    slots: list[NetSlot] = []
    try:
        config = NetworkConfig(prefix, pool)
        egress = await start_egress(settings, store, config, nothing)
        try:
            pid = egress.pid
            assert pid is not None
            idle = memory_of(pid)
            network = NetworkManager(config, egress=egress)
            started = time.perf_counter()
            try:
                for _ in range(SLOTS):
                    slots.append(await network.create_slot(bench_policy()))
                attach_s = time.perf_counter() - started
                loaded = memory_of(pid)
                stats = await egress.stats()
            finally:
                for slot in slots:
                    await network.destroy_slot(slot)
        finally:
            await egress.stop()
    finally:
        await store.close()
    return {
        "slots": SLOTS, "idle": idle, f"with_{SLOTS}_slots": loaded,
        "pss_kib_per_slot": round((loaded["pss_kib"] - idle["pss_kib"]) / SLOTS, 1),
        "slots_created_and_attached_s": round(attach_s, 2),
        "egress_process_stats": stats,
    }


async def main() -> None:
    with running_internet() as net:
        env = net.node_env() | {"AENV_NODEAGENT_WARM_POOL_VMS": "0"}
        async with running_platform(NET_PREFIX, free_subnet(22), env=env) as plat:
            os.environ.update(plat.e2b_env())
            paths = await asyncio.to_thread(data_paths, net)
            memory = await egress_memory(plat)
    keepalive = paths["egress_path"]["http_keepalive_request"]["p50_ms"]
    tls = paths["egress_path"]["tls_connect_handshake_request"]["p50_ms"]
    emit("egress", {
        "rounds": ROUNDS, "tls_rounds": TLS_ROUNDS, "target": ALLOWED, **paths,
        "p50_keepalive_added_ms": round(
            keepalive - paths["unfiltered"]["http_keepalive_request"]["p50_ms"], 2),
        "p50_tls_added_ms": round(
            tls - paths["unfiltered"]["tls_connect_handshake_request"]["p50_ms"], 2),
        "egress_memory": memory,
    })


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    asyncio.run(main())
