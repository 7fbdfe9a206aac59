"""The lifecycle calls of the native API (gRPC, through aenv_client) against real sandboxes of
the single node: pause and resume (the state as get_sandbox tells it, set_timeout refused while
paused, a command run after the resume), the node's metrics samples of a running sandbox (sane
figures, the window honoured), and set_timeout moving the record's end either way, then ending
the sandbox a few seconds on: SandboxDied to the client that made it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_client import Conflict, NotFound, SandboxDied

from ..conftest import METRICS_INTERVAL_S
from .conftest import until

pytestmark = [
    pytest.mark.vm,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="session"),
]

RUNNING, PAUSED = cluster_pb2.SANDBOX_STATE_RUNNING, cluster_pb2.SANDBOX_STATE_PAUSED


@pytest_asyncio.fixture(loop_scope="session")
async def client(platform: Platform) -> AsyncIterator[GatewayClient]:
    async with GatewayClient.for_home(platform.home, timeout_s=300) as made:
        yield made


@pytest_asyncio.fixture(loop_scope="session")
async def sandbox_id(client: GatewayClient) -> AsyncIterator[str]:
    record = await client.create_sandbox("base", timeout_seconds=600)
    try:
        yield record.sandbox_id
    finally:
        try:
            await client.kill_sandbox(record.sandbox_id)
        except NotFound:
            pass  # the test ended it


def _sane(metric: gateway_pb2.SandboxMetric, since: float) -> None:
    assert metric.cpu_count >= 1
    assert 0.0 <= metric.cpu_used_pct <= 100.0
    assert 0 < metric.mem_used <= metric.mem_total
    assert metric.mem_total >= 64 << 20
    assert 0 < metric.disk_used <= metric.disk_total
    assert since - 5 <= metric.timestamp.seconds <= time.time() + 5


async def test_metrics_then_pause_and_resume(client: GatewayClient, sandbox_id: str) -> None:
    since = time.time()

    async def sampled() -> bool:
        return bool(await client.sandbox_metrics(sandbox_id))

    await until(sampled, 30 * METRICS_INTERVAL_S, "a metrics sample of the running sandbox")
    samples = await client.sandbox_metrics(sandbox_id)
    for metric in samples:
        _sane(metric, since)
    stamps = [m.timestamp.ToNanoseconds() for m in samples]
    assert stamps == sorted(stamps)  # oldest first
    future = int(time.time()) + 3600
    assert await client.sandbox_metrics(sandbox_id, start=future) == []
    first = samples[0].timestamp.seconds
    window = await client.sandbox_metrics(sandbox_id, start=0, end=first)
    assert window and all(m.timestamp.seconds <= first for m in window)

    paused = await client.pause_sandbox(sandbox_id)
    assert paused.state == PAUSED
    assert (await client.get_sandbox(sandbox_id)).state == PAUSED
    with pytest.raises(Conflict):  # paused is not dead: no SandboxDied
        await client.set_timeout(sandbox_id, 60)
    resumed = await client.resume_sandbox(sandbox_id)
    assert resumed.resumed and resumed.sandbox.state == RUNNING
    assert (await client.get_sandbox(sandbox_id)).state == RUNNING
    result = await client.run(sandbox_id, "echo $((6 * 7))", timeout_seconds=60)
    assert (result.exit_code, result.stdout) == (0, b"42\n")
    again = await client.resume_sandbox(sandbox_id)
    assert not again.resumed  # already running: nothing to resume


async def test_set_timeout_moves_the_end_then_ends_it(
    client: GatewayClient, sandbox_id: str
) -> None:
    before = time.time()
    longer = await client.set_timeout(sandbox_id, 1200)
    assert before + 1199 <= longer.end_at.seconds <= time.time() + 1201
    shorter = await client.set_timeout(sandbox_id, 300)
    assert shorter.end_at.seconds < longer.end_at.seconds
    assert (await client.get_sandbox(sandbox_id)).end_at == shorter.end_at

    ending = await client.set_timeout(sandbox_id, 3)
    assert ending.state == RUNNING and ending.end_at.seconds <= time.time() + 4

    async def ended() -> bool:
        try:
            await client.get_sandbox(sandbox_id)
        except SandboxDied:
            return True
        return False

    await until(ended, 90, "the sandbox to end at its timeout")
    with pytest.raises(NotFound):
        await client.sandbox_metrics(sandbox_id)
    with pytest.raises(NotFound):
        await client.set_timeout(sandbox_id, 60)
