"""The gateway passes a stream's break on at once (e2b-compat parity: a killed sandbox's streams
end). When the node proxy cuts a sandbox's traffic (kill, pause, a VM that exited) it breaks off
the streams in flight; the gateway must show each client its stream broken (not complete, not
pending), and answer the SDK's health probe "not found", so the SDK raises
SandboxNotRunningException ("killed or reached its end of life while the request was in flight").

The node proxy here is a double on the shared StreamingProxy, as the real one is; behind it, an
envd double (a Connect process stream that never ends, /health) and a guest app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from e2b import AsyncSandbox
from e2b.exceptions import SandboxNotRunningException
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from aenv_common.httpproxy import StreamingProxy
from aenv_common.sandbox_routing import ENVD_PORT, sandbox_not_found
from envd.process import process_pb2

from .conftest import Stack
from .fakes import NODE_ID
from .upstreams import serve

IN_FLIGHT = "was killed or reached its end of life while the request was in flight"
WITHIN_S = 1.0


def _envelope(message: process_pb2.StartResponse) -> bytes:
    payload: bytes = json_format.MessageToJson(message).encode()  # the SDK speaks JSON
    return struct.pack(">BI", 0, len(payload)) + payload


class Guest:
    """envd's process stream and /health, and an app's HTTP stream and WebSocket."""

    def __init__(self) -> None:
        self.app = Starlette(routes=[
            Route("/health", self.health),
            Route("/process.Process/Start", self.start, methods=["POST"]),
            Route("/stream", self.stream),
            WebSocketRoute("/ws", self.ws),
        ])

    async def health(self, request: Request) -> Response:
        return Response(status_code=204)

    async def start(self, request: Request) -> Response:
        await request.body()
        started = process_pb2.StartResponse(
            event=process_pb2.ProcessEvent(start=process_pb2.ProcessEvent.StartEvent(pid=7)))

        keepalive = process_pb2.StartResponse(
            event=process_pb2.ProcessEvent(keepalive=process_pb2.ProcessEvent.KeepAlive()))

        async def events() -> AsyncIterator[bytes]:
            yield _envelope(started)
            while True:  # `sleep 60` and more: no end event while it runs, keepalives as envd's
                await asyncio.sleep(0.5)
                yield _envelope(keepalive)

        return StreamingResponse(events(), media_type="application/connect+json")

    async def stream(self, request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            while True:
                yield b"tick\n"
                await asyncio.sleep(0.2)

        return StreamingResponse(chunks(), media_type="text/plain")

    async def ws(self, websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text("hello")
        with contextlib.suppress(Exception):
            while True:
                await websocket.receive_text()


class NodeProxy:
    """Forwards to the guest (envd's port to the guest's port) until `cut`, which does to the
    sandbox's traffic what the node agent does when its VM stops."""

    def __init__(self, guest_port: int) -> None:
        self._guest_port = guest_port
        self._session = aiohttp.ClientSession(auto_decompress=False)
        self._proxy = StreamingProxy(self._session)
        self.serving = True
        self.cut_at = 0.0

    async def cut(self) -> None:
        self.cut_at = time.monotonic()
        self.serving = False
        self._proxy.cut("the sandbox stopped serving")
        await self._session.close()

    def since_cut(self) -> float:
        return time.monotonic() - self.cut_at

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        base = f"http://127.0.0.1:{self._guest_port}"
        if scope["type"] == "websocket":
            await self._proxy.forward_websocket(WebSocket(scope, receive, send), base)
            return
        request = Request(scope, receive)
        if self.serving:
            response = await self._proxy.forward(request, base)
        else:
            response = sandbox_not_found(request.headers["e2b-sandbox-id"])
        await response(scope, receive, send)


@pytest.fixture
async def node(stack: Stack) -> AsyncIterator[NodeProxy]:
    guest = Guest()
    async with serve(guest.app) as guest_port:
        proxy = NodeProxy(guest_port)
        async with serve(proxy) as proxy_port:
            # The sandboxes created from now on live behind this node proxy.
            address = f"127.0.0.1:{proxy_port}"
            stack.scheduler.placement.proxy_address = address
            stack.view.node_records[NODE_ID].proxy_address = address
            yield proxy
        if proxy.serving:
            await proxy.cut()


def _app_port(sandbox_id: str) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "8080"}


async def test_a_command_stream_cut_at_the_node_ends_in_the_sdk_s_error(
    e2b_env: Stack, node: NodeProxy
) -> None:
    sbx = await AsyncSandbox.create("base")
    handle = await sbx.commands.run("sleep 60", background=True)
    assert handle.pid == 7
    pending = asyncio.ensure_future(handle.wait())
    await asyncio.sleep(0.3)
    assert not pending.done()
    await sbx.kill()
    await node.cut()
    with pytest.raises(SandboxNotRunningException, match=IN_FLIGHT):
        await asyncio.wait_for(pending, 10)
    assert node.since_cut() < WITHIN_S, node.since_cut()


async def test_an_app_stream_cut_at_the_node_is_broken_for_the_client(
    e2b_env: Stack, node: NodeProxy, caplog: pytest.LogCaptureFixture
) -> None:
    stack = e2b_env
    sbx = await AsyncSandbox.create("base")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{stack.url}/stream", headers=_app_port(sbx.sandbox_id)) as r:
            assert await r.content.readline() == b"tick\n"
            with caplog.at_level(logging.INFO):
                await node.cut()
                with pytest.raises(aiohttp.ClientPayloadError):
                    async for _ in r.content:
                        pass
    assert node.since_cut() < WITHIN_S, node.since_cut()
    # A break is no failure of the gateway's: no traceback is logged for it.
    assert not [rec for rec in caplog.records if rec.exc_info], caplog.records
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{stack.url}/health", headers={
                "E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": str(ENVD_PORT)}) as probe:
            assert probe.status == 502 and "was not found" in (await probe.json())["message"]


async def test_a_websocket_closed_at_the_node_closes_the_client_s(
    e2b_env: Stack, node: NodeProxy
) -> None:
    stack = e2b_env
    sbx = await AsyncSandbox.create("base")
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"{stack.url}/ws", headers=_app_port(sbx.sandbox_id)) as ws:
            assert await ws.receive_str() == "hello"
            pending = asyncio.ensure_future(ws.receive())
            await asyncio.sleep(0.3)
            await node.cut()
            message = await asyncio.wait_for(pending, 10)
    assert node.since_cut() < WITHIN_S, node.since_cut()
    assert message.type == aiohttp.WSMsgType.CLOSE and message.data == 1011

