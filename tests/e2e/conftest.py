"""Shared by the end-to-end tests that drive the platform through the official E2B SDK."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from e2b import Sandbox

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.children import ChildProcess
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_cli.ports import address
from aenv_cli.readiness import GrpcHealthProbe
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.errors import AenvError
from aenv_testing.ports import free_port
from aenv_testing.subnets import free_subnet

from ..conftest import netns_names, qemu_pids_under

# Written aside and renamed: a reader never sees the file truncated mid-write.
COUNTER = ("i=0; while true; do i=$((i+1)); echo $i > /tmp/counter.tmp; "
           "mv /tmp/counter.tmp /tmp/counter; sleep 0.5; done")


def counter(sandbox: Sandbox) -> int:
    """The value the guest's COUNTER process last published."""
    return int(sandbox.files.read("/tmp/counter").strip())


@pytest.fixture
def sdk_env(e2b_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK reads its endpoints and key from the process environment."""
    for name, value in e2b_env.items():
        if name.startswith("E2B_"):
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("E2B_DEBUG", raising=False)


@pytest.fixture
def sandboxes(sdk_env: None) -> Iterator[list[str]]:
    """Ids of every sandbox a test made; all are killed afterwards, also on failure."""
    made: list[str] = []
    try:
        yield made
    finally:
        for sandbox_id in made:
            Sandbox.kill(sandbox_id)


async def grpc_reset(
    platform: Platform, sandbox_id: str, snapshot_id: str
) -> cluster_pb2.SandboxRecord:
    """The native gRPC API's reset: the sandbox rewound to the snapshot, in place."""
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        return await client.reset_sandbox(sandbox_id, snapshot_id)


async def until(check: Callable[[], Awaitable[bool]], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def another_node_agent(
    platform: Platform, tmp_path: Path, node_id: str, **env: str
) -> AsyncIterator[tuple[str, Path, str]]:
    """Another node agent of the platform's cluster, its settings overridden by `env`:
    (node id, state dir, netns prefix). Nothing of it is left once it stops."""
    prefix = "aeb" + secrets.token_hex(2) + "x"
    state_dir = tmp_path / node_id
    grpc_address = address(free_port())
    child_env = platform.service_env() | {
        "AENV_NODEAGENT_NODE_ID": node_id,
        "AENV_NODEAGENT_LISTEN": grpc_address,
        "AENV_NODEAGENT_PROXY_LISTEN": address(free_port()),
        "AENV_NODEAGENT_METRICS_LISTEN": address(free_port()),
        "AENV_NODEAGENT_STATE_DIR": str(state_dir),
        "AENV_NODEAGENT_NET_PREFIX": prefix,
        "AENV_NODEAGENT_NET_POOL_CIDR": free_subnet(24),
        "AENV_NODEAGENT_WARM_POOL_VMS": "0",
        "AENV_NODEAGENT_WARM_POOL_GUESTS": "0",
        "AENV_NODEAGENT_PREWARM_CODE_INTERPRETER": "false",
    } | env
    child = await ChildProcess.spawn(node_id, [sys.executable, "-m", "aenv_nodeagent"],
                                     child_env, tmp_path / f"{node_id}.log")
    try:
        await until(GrpcHealthProbe(grpc_address).ready, 300, f"node agent {node_id}")
        yield node_id, state_dir, prefix
    finally:
        await child.stop(30)
        assert qemu_pids_under(state_dir) == [] and netns_names(prefix) == []


# The node of the fault tests' own platforms.
FAULTS_NODE = "faults-node"
# How long the services may take to reconnect by themselves after a fault.
RECOVERY_S = 60.0


async def create_once_back(client: GatewayClient) -> tuple[cluster_pb2.SandboxRecord, float]:
    """A create, tried until the platform has recovered: (the sandbox, seconds it took)."""
    started = time.monotonic()
    while True:
        try:
            made = await client.create_sandbox("base", timeout_seconds=600)
        except AenvError:
            assert time.monotonic() - started < RECOVERY_S, "no create since the fault ended"
            await asyncio.sleep(1)
            continue
        return made, time.monotonic() - started


@contextlib.asynccontextmanager
async def opened_store(etcd_endpoints: str) -> AsyncIterator[ClusterStore]:
    """A cluster store on a platform's etcd, closed when the block ends."""
    store = await ClusterStore.connect(CommonSettings(etcd_endpoints=etcd_endpoints))
    try:
        yield store
    finally:
        await store.close()
