"""Admission refusals at the edges: a full or timed-out scheduler queue is 429 with Retry-After
on REST and RESOURCE_EXHAUSTED with RetryInfo on gRPC; a request nothing can ever hold says
nothing of retrying. And the scheduler replicas: a standby's UNAVAILABLE sends the gateway to
the next replica, and a lone standby is asked again until it leads."""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.errors import ResourceExhausted, Unavailable
from aenv_common.grpc_server import start_grpc_server
from aenv_common.retry_info import retry_after_from
from aenv_gateway.cluster.clients import ChannelPool, SchedulerClient
from aenv_gateway.core.sandboxes import NODE_REFUSALS

from .conftest import API_KEY, Stack
from .fakes import FakeScheduler

AUTH = {"X-API-Key": API_KEY}


async def test_full_queue_is_429_with_retry_after(stack: Stack) -> None:
    stack.scheduler.failures["busy"] = ResourceExhausted("scheduler queue is full", 2.5)
    stack.scheduler.failures["huge"] = ResourceExhausted("no node can ever hold 99 vCPU")
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        busy = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "busy"})
        huge = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "huge"})
    assert busy.status_code == 429
    assert busy.headers["Retry-After"] == "3"  # whole seconds, rounded up
    assert busy.json() == {"code": 429, "message": "scheduler queue is full"}
    # Room may come: the SDK's retry honours a present Should-Retry header alone.
    assert busy.headers["Should-Retry"] == "true"
    assert huge.status_code == 429 and "Retry-After" not in huge.headers
    assert huge.headers["Should-Retry"] == "false"


async def test_full_queue_is_resource_exhausted_with_retry_info_on_grpc(stack: Stack) -> None:
    stack.scheduler.failures["busy"] = ResourceExhausted("no capacity within 30.0 s", 4.0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CreateSandbox(
                gateway_pb2.CreateSandboxRequest(template_id="busy"),
                metadata=(("x-api-key", API_KEY),),
            )
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.details() == "no capacity within 30.0 s"
    assert retry_after_from(refused.value.trailing_metadata()) == 4.0


async def test_a_node_full_under_the_scheduler_sends_the_create_back_to_it(stack: Stack) -> None:
    """Creates that raced past the scheduler's view of a node are refused by the node: placed
    again, the create succeeds once there is room; refused every time, it is a 429 that still
    says when to retry."""
    full = ResourceExhausted("node 'n1' cannot take the sandbox: 40 of 40 vCPUs are taken")
    stack.nodeagent.create_failures[:] = [full, full]
    before = stack.scheduler.calls
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        made = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base"})
        assert made.status_code == 201, made.text
        assert stack.scheduler.calls - before == 3  # placed, refused twice, placed again
        stack.nodeagent.create_failures[:] = [full] * (NODE_REFUSALS + 1)
        refused = await http.post("/v2/sandboxes", headers=AUTH, json={"templateID": "base"})
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    message = refused.json()["message"]
    assert "maximum number of concurrent sandboxes" in message and full.message in message
    assert not stack.nodeagent.create_failures


class StandbyScheduler(FakeScheduler):
    def __init__(self) -> None:
        super().__init__(set(), scheduler_pb2.Placement(node_id="n2"))
        self.failures["base"] = Unavailable("this scheduler is a standby")


async def test_a_standby_sends_the_gateway_to_the_next_replica() -> None:
    standby = StandbyScheduler()
    leader = FakeScheduler({"base"}, scheduler_pb2.Placement(node_id="n1"))
    servers, addresses = [], []
    for servicer in (standby, leader):
        server, port = await start_grpc_server("127.0.0.1:0", [(
            scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server, servicer,
            "aenv.scheduler.v1.SchedulerService")])
        servers.append(server)
        addresses.append(f"127.0.0.1:{port}")
    pool = ChannelPool()
    try:
        client = SchedulerClient(pool, ",".join(addresses), deadline_s=5, failover_s=5)
        spec = cluster_pb2.SandboxSpec(sandbox_id="s1", template_id="base")
        assert (await client.schedule(spec)).node_id == "n1"
        assert (await client.schedule(spec)).node_id == "n1"
        # The leader found is asked first afterwards.
        assert (standby.calls, leader.calls) == (1, 2)

        lone = SchedulerClient(pool, addresses[0], deadline_s=5, failover_s=5)
        with pytest.raises(Unavailable):
            await lone.schedule(spec)  # down, and no other replica: answered at once
        assert standby.calls == 2

        # A lone replica that says it is a standby (its election runs) is asked again.
        standby.failures["base"] = Unavailable("this scheduler is a standby", 0.1)
        asked = asyncio.get_running_loop().call_later(0.5, standby.failures.clear)
        standby.templates.add("base")
        assert (await lone.schedule(spec)) == standby.placement
        assert standby.calls > 3
        asked.cancel()
    finally:
        await pool.close()
        for server in servers:
            await server.stop(None)
