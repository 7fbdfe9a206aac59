"""SetSandboxTimeout and GetSandboxMetrics on gRPC: the same service calls as REST's
`POST /sandboxes/{id}/timeout` and `GET /sandboxes/{id}/metrics`, so the same E2B semantics
(shorten or lengthen, 0 ends it now, cut to the longest lifetime) and the same window checks."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable

import grpc
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_common.limits import MAX_TIMEOUT_S

from .conftest import API_KEY, Stack

MD = (("x-api-key", API_KEY),)


@pytest.fixture
async def stub(stack: Stack) -> AsyncIterator[gateway_pb2_grpc.GatewayServiceStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]


async def _create(
    stub: gateway_pb2_grpc.GatewayServiceStub, lifecycle: cluster_pb2.Lifecycle | None = None
) -> str:
    created: gateway_pb2.CreateSandboxResponse = await stub.CreateSandbox(
        gateway_pb2.CreateSandboxRequest(template_id="base", lifecycle=lifecycle), metadata=MD
    )
    return created.sandbox.sandbox_id


async def _set(
    stub: gateway_pb2_grpc.GatewayServiceStub, sandbox_id: str, seconds: int
) -> cluster_pb2.SandboxRecord:
    reply: gateway_pb2.SetSandboxTimeoutResponse = await stub.SetSandboxTimeout(
        gateway_pb2.SetSandboxTimeoutRequest(sandbox_id=sandbox_id, timeout_seconds=seconds),
        metadata=MD,
    )
    return reply.sandbox


async def _code(call: Awaitable[object]) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    code: grpc.StatusCode = failed.value.code()
    return code


async def test_set_timeout_moves_the_end_either_way(
    stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    sid = await _create(stub)
    before = time.time()
    longer = await _set(stub, sid, 3000)
    assert before + 2999 <= longer.end_at.seconds <= time.time() + 3001
    shorter = await _set(stub, sid, 20)
    assert before + 19 <= shorter.end_at.seconds <= time.time() + 21
    assert stack.view.sandbox_records[sid].end_at == shorter.end_at
    # Longer than a sandbox may live: cut to the longest lifetime since its start, not refused.
    started = stack.view.sandbox_records[sid].started_at.seconds
    cut = await _set(stub, sid, MAX_TIMEOUT_S * 2)
    assert started + MAX_TIMEOUT_S - 2 <= cut.end_at.seconds <= started + MAX_TIMEOUT_S + 1
    assert cut.state == cluster_pb2.SANDBOX_STATE_RUNNING


async def test_a_timeout_of_zero_ends_it_now(stub: gateway_pb2_grpc.GatewayServiceStub) -> None:
    sid = await _create(stub)
    ended = await _set(stub, sid, 0)
    assert ended.state == cluster_pb2.SANDBOX_STATE_KILLING
    get = stub.GetSandbox(gateway_pb2.GetSandboxRequest(sandbox_id=sid), metadata=MD)
    assert await _code(get) == grpc.StatusCode.NOT_FOUND
    assert await _code(_set(stub, sid, 10)) == grpc.StatusCode.NOT_FOUND
    assert await _code(_set(stub, "missing", 10)) == grpc.StatusCode.NOT_FOUND

    pausing = await _create(stub, cluster_pb2.Lifecycle(auto_pause=True))
    paused = await _set(stub, pausing, 0)
    assert paused.state == cluster_pb2.SANDBOX_STATE_PAUSED
    # Paused is not gone: not NOT_FOUND, which a client takes for the sandbox's death.
    assert await _code(_set(stub, pausing, 10)) == grpc.StatusCode.FAILED_PRECONDITION


async def test_metrics_are_the_node_agents_samples(
    stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    sid = await _create(stub)
    reply: gateway_pb2.GetSandboxMetricsResponse = await stub.GetSandboxMetrics(
        gateway_pb2.GetSandboxMetricsRequest(sandbox_id=sid, start=10, end=20), metadata=MD
    )
    [metric] = reply.metrics
    assert metric.cpu_count == 2 and metric.cpu_used_pct == 12.5
    assert metric.mem_used == 100 << 20 and metric.mem_total == 512 << 20
    assert metric.mem_cache == 10 << 20
    assert metric.disk_used == 300 << 20 and metric.disk_total == 1 << 30
    assert abs(metric.timestamp.seconds - time.time()) < 10
    await stub.GetSandboxMetrics(gateway_pb2.GetSandboxMetricsRequest(sandbox_id=sid), metadata=MD)
    windows = [
        (r.start if r.HasField("start") else None, r.end if r.HasField("end") else None)
        for r in stack.nodeagent.metric_requests
    ]
    # Absent bounds stay unset (not 0), as on REST.
    assert windows == [(10, 20), (None, None)]


async def test_metrics_refusals(stack: Stack, stub: gateway_pb2_grpc.GatewayServiceStub) -> None:
    sid = await _create(stub)
    for bad in (
        gateway_pb2.GetSandboxMetricsRequest(sandbox_id=sid, start=20, end=10),
        gateway_pb2.GetSandboxMetricsRequest(sandbox_id=sid, start=-1),
        gateway_pb2.GetSandboxMetricsRequest(sandbox_id=sid, end=-1),
    ):
        call = stub.GetSandboxMetrics(bad, metadata=MD)
        assert await _code(call) == grpc.StatusCode.INVALID_ARGUMENT
    assert stack.nodeagent.metric_requests == []
    missing = gateway_pb2.GetSandboxMetricsRequest(sandbox_id="missing")
    assert await _code(stub.GetSandboxMetrics(missing, metadata=MD)) == grpc.StatusCode.NOT_FOUND
    wrong_key = stub.GetSandboxMetrics(
        gateway_pb2.GetSandboxMetricsRequest(sandbox_id=sid), metadata=(("x-api-key", "no"),)
    )
    assert await _code(wrong_key) == grpc.StatusCode.UNAUTHENTICATED
    timeout_wrong_key = stub.SetSandboxTimeout(
        gateway_pb2.SetSandboxTimeoutRequest(sandbox_id=sid, timeout_seconds=5),
        metadata=(("x-api-key", "no"),),
    )
    assert await _code(timeout_wrong_key) == grpc.StatusCode.UNAUTHENTICATED
    assert stack.view.sandbox_records[sid].state == cluster_pb2.SANDBOX_STATE_RUNNING
