"""Streams held by their API key (keys/open_requests.py), through a real gateway: revoking a
key ends the native gRPC streams it opened within a second, UNAUTHENTICATED (the HTTP edge's
are in test_api_keys.py), and one key holds at most `max_open_requests_per_key` requests on
both edges at once (429 / RESOURCE_EXHAUSTED past it) while another key's go on.

Behind the node proxy double, an envd double whose process stream never ends (`sleep` for
ever: a start event, then keepalives, binary Connect as envd speaks to the gateway).
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from envd.process import process_pb2

from .conftest import API_KEY, Stack, running_stack
from .fakes import NODE_ID
from .test_parity_streams import NodeProxy
from .upstreams import serve

ADMIN = {"X-API-Key": API_KEY}
CAP = 4
Stub = gateway_pb2_grpc.GatewayServiceStub


def _envelope(message: process_pb2.StartResponse) -> bytes:
    payload: bytes = message.SerializeToString()
    return struct.pack(">BI", 0, len(payload)) + payload


async def _start(request: Request) -> Response:
    await request.body()
    started = process_pb2.StartResponse(
        event=process_pb2.ProcessEvent(start=process_pb2.ProcessEvent.StartEvent(pid=7))
    )
    keepalive = process_pb2.StartResponse(
        event=process_pb2.ProcessEvent(keepalive=process_pb2.ProcessEvent.KeepAlive())
    )

    async def events() -> AsyncIterator[bytes]:
        yield _envelope(started)
        while True:
            await asyncio.sleep(0.2)
            yield _envelope(keepalive)

    return StreamingResponse(events(), media_type="application/connect+proto")


async def _ok(request: Request) -> Response:
    await request.body()
    return Response(b"\x00\x00\x00\x00\x00", media_type="application/connect+proto")


async def _stream(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        while True:
            yield b"tick\n"
            await asyncio.sleep(0.2)

    return StreamingResponse(chunks(), media_type="text/plain")


GUEST = Starlette(
    routes=[
        Route("/process.Process/Start", _start, methods=["POST"]),
        Route("/process.Process/SendSignal", _ok, methods=["POST"]),
        Route("/stream", _stream),
    ]
)


@pytest.fixture
async def capped() -> AsyncIterator[Stack]:
    async with running_stack(max_open_requests_per_key=CAP) as stack:
        async with serve(GUEST) as guest_port:
            proxy = NodeProxy(guest_port)
            async with serve(proxy) as proxy_port:
                address = f"127.0.0.1:{proxy_port}"
                stack.scheduler.placement.proxy_address = address
                stack.view.node_records[NODE_ID].proxy_address = address
                yield stack
                await proxy.cut()


async def _key(http: httpx.AsyncClient, name: str) -> dict[str, str]:
    created = await http.post("/admin/keys", headers=ADMIN, json={"name": name})
    assert created.status_code == 201, created.text
    body: dict[str, str] = created.json()
    return body


def _exec(stub: Stub, sandbox_id: str, key: str) -> object:
    async def requests() -> AsyncIterator[gateway_pb2.ExecRequest]:
        yield gateway_pb2.ExecRequest(
            start=gateway_pb2.ExecStart(sandbox_id=sandbox_id, cmd="sleep", args=["infinity"])
        )
        await asyncio.Event().wait()  # stdin stays open

    return stub.Exec(requests(), metadata=(("x-api-key", key),))


@asynccontextmanager
async def _clients(stack: Stack) -> AsyncIterator[tuple[httpx.AsyncClient, Stub, str]]:
    """REST and gRPC clients of the gateway, and a sandbox the admin key created."""
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=10) as http,
        grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel,
    ):
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        created = await http.post("/v2/sandboxes", headers=ADMIN, json={"templateID": "base"})
        assert created.status_code == 201, created.text
        yield http, stub, created.json()["sandboxID"]


async def test_revoking_a_key_ends_its_grpc_exec_stream_within_a_second(capped: Stack) -> None:
    async with _clients(capped) as (http, stub, sandbox_id):
        revoked, kept = await _key(http, "revoked"), await _key(http, "kept")
        revoked_call: grpc.aio.StreamStreamCall = _exec(stub, sandbox_id, revoked["key"])
        kept_call: grpc.aio.StreamStreamCall = _exec(stub, sandbox_id, kept["key"])
        for call in (revoked_call, kept_call):
            first = await asyncio.wait_for(call.read(), 10)
            assert first.started.pid == 7

        cut_at = time.monotonic()
        assert (
            await http.delete(f"/admin/keys/{revoked['keyID']}", headers=ADMIN)
        ).status_code == 204
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            async with asyncio.timeout(5):
                while True:
                    await revoked_call.read()
        took = time.monotonic() - cut_at
        assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED, ended.value
        print(f"revoked key's Exec stream ended in {took * 1000:.1f} ms")
        assert took < 1.0, took
        await asyncio.sleep(0.5)
        assert not kept_call.done()  # the other key's stream flows on
        kept_call.cancel()


async def test_a_key_holds_at_most_its_cap_of_streams_on_both_edges(capped: Stack) -> None:
    async with _clients(capped) as (http, stub, sandbox_id):
        greedy, other = await _key(http, "greedy"), await _key(http, "other")
        routing = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "8080"}

        async def open_stream(key: str) -> httpx.Response:
            request = http.build_request("GET", "/stream", headers={**routing, "X-API-Key": key})
            return await http.send(request, stream=True)

        # Half the cap as HTTP streams, half as gRPC Exec streams: all idle, all held.
        held = [await open_stream(greedy["key"]) for _ in range(CAP // 2)]
        assert all(r.status_code == 200 for r in held)
        calls: list[grpc.aio.StreamStreamCall] = [
            _exec(stub, sandbox_id, greedy["key"]) for _ in range(CAP - CAP // 2)
        ]
        for call in calls:
            assert (await asyncio.wait_for(call.read(), 10)).started.pid == 7

        hits = 0
        refused = await open_stream(greedy["key"])
        assert refused.status_code == 429, refused.status_code
        assert "requests open" in (await refused.aread()).decode()
        hits += 1
        unary = await http.get("/v2/sandboxes", headers={"X-API-Key": greedy["key"]})
        assert unary.status_code == 429
        hits += 1
        extra: grpc.aio.StreamStreamCall = _exec(stub, sandbox_id, greedy["key"])
        with pytest.raises(grpc.aio.AioRpcError) as exhausted:
            await asyncio.wait_for(extra.read(), 10)
        assert exhausted.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        hits += 1

        # Another key is untouched by the first one's streams.
        theirs = await open_stream(other["key"])
        assert theirs.status_code == 200
        assert (
            await http.get("/v2/sandboxes", headers={"X-API-Key": other["key"]})
        ).status_code == 200

        # A stream closed frees its place at once.
        await held.pop().aclose()
        for _ in range(50):
            again = await http.get("/v2/sandboxes", headers={"X-API-Key": greedy["key"]})
            if again.status_code == 200:
                break
            await asyncio.sleep(0.02)
        assert again.status_code == 200
        print(f"cap {CAP} per key: {hits} requests past it refused, the other key's served")
        for response in [*held, theirs]:
            await response.aclose()
        for call in calls:
            call.cancel()


async def test_revoking_a_key_ends_its_http_stream_within_a_second(capped: Stack) -> None:
    async with _clients(capped) as (http, _stub, sandbox_id):
        key = await _key(http, "revoked")
        routing = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "8080"}
        request = http.build_request("GET", "/stream", headers={**routing, "X-API-Key": key["key"]})
        stream = await http.send(request, stream=True)
        lines = stream.aiter_lines()
        assert await anext(lines) == "tick"
        cut_at = time.monotonic()
        assert (await http.delete(f"/admin/keys/{key['keyID']}", headers=ADMIN)).status_code == 204
        with pytest.raises(httpx.HTTPError):
            async with asyncio.timeout(5):
                async for _ in lines:
                    pass
        took = time.monotonic() - cut_at
        print(f"revoked key's HTTP stream ended in {took * 1000:.1f} ms")
        assert took < 1.0, took
        await stream.aclose()
