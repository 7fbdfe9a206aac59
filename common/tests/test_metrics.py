"""Every gRPC server counts and times its requests by method and status (the shared
interceptor), and `/metrics` serves them over HTTP in Prometheus' text format."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from aenv_common.errors import NotFound
from aenv_common.grpc_server import start_grpc_server
from aenv_common.metrics import MetricsEndpoint
from aenv_testing.metrics import Samples
from aenv_testing.metrics import scrape as scrape_url

CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"


class Failing(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """A second health service whose Check raises a typed error."""

    async def Check(self, request: Any, context: Any) -> Any:
        raise NotFound("nothing here")


@pytest.fixture
async def server() -> AsyncIterator[str]:
    grpc_server, port = await start_grpc_server("127.0.0.1:0", [])
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await grpc_server.stop(0)


@pytest.fixture
async def endpoint() -> AsyncIterator[MetricsEndpoint]:
    started = await MetricsEndpoint.start("127.0.0.1:0")
    try:
        yield started
    finally:
        await started.stop()


def scrape(port: int) -> Samples:
    return scrape_url(f"http://127.0.0.1:{port}/metrics")


async def test_requests_are_counted_and_timed_by_method_and_status(
    server: str, endpoint: MetricsEndpoint
) -> None:
    ok = ("aenv_grpc_requests_total", (("code", "OK"), ("method", CHECK)))
    missing = ("aenv_grpc_requests_total", (("code", "NOT_FOUND"), ("method", CHECK)))
    timed = ("aenv_grpc_request_seconds_count", (("method", CHECK),))
    before = await asyncio.to_thread(scrape, endpoint.port)
    async with grpc.aio.insecure_channel(server) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(3):
            await stub.Check(health_pb2.HealthCheckRequest())
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    after = await asyncio.to_thread(scrape, endpoint.port)
    assert after[ok] - before.get(ok, 0) == 3
    assert after[missing] - before.get(missing, 0) == 1  # the servicer's own abort
    assert after[timed] - before.get(timed, 0) == 4


async def test_a_typed_error_is_counted_with_its_status(endpoint: MetricsEndpoint) -> None:
    grpc_server, port = await start_grpc_server(
        "127.0.0.1:0", [(health_pb2_grpc.add_HealthServicer_to_server, Failing(), "failing")])
    key = ("aenv_grpc_requests_total", (("code", "NOT_FOUND"), ("method", CHECK)))
    before = await asyncio.to_thread(scrape, endpoint.port)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    finally:
        await grpc_server.stop(0)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    after = await asyncio.to_thread(scrape, endpoint.port)
    assert after[key] - before.get(key, 0) == 1
