"""A killed sandbox's streams end at once through the node proxy, as E2B's do (e2b-compat parity).

The official SDK (async) talks to the node's real proxy app, which forwards to a real envd running
on the host (on a loopback address of its own, at envd's port) and to a guest app; a fake control
plane's kill does what the node agent's kill does to traffic: the sandbox stops serving and its
connections are cut. Every stream in flight must then end within a second with the SDK's error:
the SDK reads the proxy's `unavailable` end-of-stream (a Connect stream) or sees the connection
drop (any other body), probes /health, gets "not found" and raises SandboxNotRunningException
("killed or reached its end of life while the request was in flight").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import aiohttp
import httpx
import pytest
import uvicorn
from e2b import AsyncSandbox, PtySize
from e2b.exceptions import SandboxNotRunningException
from envd_harness import ENVD_PYTHONPATH, stop_process
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from aenv.cluster.v1 import cluster_pb2
from aenv_common.sandbox_routing import ENVD_PORT, SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER
from aenv_envd.version import ENVD_VERSION
from aenv_nodeagent.network.slots import NetSlot
from aenv_nodeagent.proxy import SandboxConnections, build_proxy_app
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.vmm import QemuVm

pytestmark = pytest.mark.sdk

SANDBOX_ID = "sbxparitystreams01"
APP_PORT = 8080
IN_FLIGHT = "was killed or reached its end of life while the request was in flight"
WITHIN_S = 1.0
# A download's bytes already on their way (socket buffers grow to tens of MiB) still arrive
# before the break, and here the reader shares one thread with both servers: the slowest hop.
DOWNLOAD_WITHIN_S = 10.0


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


@contextlib.asynccontextmanager
async def serving(app: ASGIApp, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[int]:
    """`app` on `host:port` (a free port for 0) until the block ends; the port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = _Server(uvicorn.Config(app, lifespan="off", log_config=None, access_log=False,
                                    timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no start event
            await asyncio.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task


def _loopback_host() -> str:
    """A loopback address of this test's own, so envd can listen at its fixed port."""
    return "127." + ".".join(str(secrets.randbelow(250) + 1) for _ in range(3))


@dataclass
class Envd:
    host: str
    token: str


@pytest.fixture
def envd() -> Iterator[Envd]:
    host, token = _loopback_host(), secrets.token_hex(16)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": ENVD_PYTHONPATH,
           "AENV_ENVD_SYNC_CLOCK": "0", "AENV_ENVD_RESEED_RNG": "0"}
    process = subprocess.Popen(
        [sys.executable, "-m", "aenv_envd", "--host", host, "--port", str(ENVD_PORT)], env=env)
    try:
        url = f"http://{host}:{ENVD_PORT}"
        deadline = time.monotonic() + 10
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "envd did not start"
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            time.sleep(0.05)
        # Default user nobody: root's login shell on this host may run hooks of its own.
        init = json.dumps({"accessToken": token, "defaultUser": "nobody"}).encode()
        request = urllib.request.Request(url + "/init", data=init, method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=10):
            pass
        yield Envd(host, token)
    finally:
        stop_process(process)


class GuestApp:
    """An app on a guest port: a slow HTTP stream and a WebSocket that stays open."""

    def __init__(self) -> None:
        self.app = Starlette(routes=[Route("/stream", self.stream), WebSocketRoute("/ws", self.ws)])

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


class Serving:
    def __init__(self, sandbox: Sandbox) -> None:
        self.current: Sandbox | None = sandbox

    def serving(self, sandbox_id: str) -> Sandbox | None:
        current = self.current
        return current if current and current.record.sandbox_id == sandbox_id else None


@dataclass
class Node:
    """The node proxy in front of the guest, and what its kill does to traffic."""

    url: str
    connections: SandboxConnections
    sandboxes: Serving
    killed_at: float = 0.0

    async def kill(self) -> None:
        self.killed_at = time.monotonic()
        self.sandboxes.current = None  # registry.leaving: requests get "not found"
        await self.connections.cut(SANDBOX_ID)

    def since_kill(self) -> float:
        return time.monotonic() - self.killed_at


@pytest.fixture
async def node(envd: Envd, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Node]:
    slot = NetSlot(index=0, netns="none", host_veth="none", host_ip=envd.host, ns_ip=envd.host)
    sandbox = Sandbox(cluster_pb2.SandboxRecord(sandbox_id=SANDBOX_ID), slot,
                      cast(QemuVm, object()), Path("/nonexistent"))
    sandboxes, connections = Serving(sandbox), SandboxConnections()

    async def create(request: Request) -> Response:
        return JSONResponse({
            "templateID": "base", "sandboxID": SANDBOX_ID, "clientID": "cl", "alias": "base",
            "envdVersion": ENVD_VERSION, "envdAccessToken": envd.token,
            "trafficAccessToken": None, "domain": None}, 201)

    async def kill(request: Request) -> Response:
        await state.kill()
        return Response(status_code=204)

    control = Starlette(routes=[Route("/v2/sandboxes", create, methods=["POST"]),
                                Route("/sandboxes/{sandbox_id}", kill, methods=["DELETE"])])
    async with contextlib.AsyncExitStack() as stack:
        proxy_port = await stack.enter_async_context(
            serving(build_proxy_app(sandboxes, connections)))
        control_port = await stack.enter_async_context(serving(control))
        await stack.enter_async_context(serving(GuestApp().app, envd.host, APP_PORT))
        stack.push_async_callback(connections.close)
        state = Node(f"http://127.0.0.1:{proxy_port}", connections, sandboxes)
        monkeypatch.setenv("E2B_API_URL", f"http://127.0.0.1:{control_port}")
        monkeypatch.setenv("E2B_SANDBOX_URL", state.url)
        monkeypatch.setenv("E2B_API_KEY", "e2b_" + "0123456789abcdef" * 2 + "01234567")
        monkeypatch.delenv("E2B_DEBUG", raising=False)
        yield state


async def _ends_with_sdk_error(
    node: Node, call: Awaitable[object],
    expected: type[BaseException] = SandboxNotRunningException, within_s: float = WITHIN_S,
) -> BaseException:
    """`call`, which stays pending while the sandbox runs, raises within `within_s` of a kill."""
    pending = asyncio.ensure_future(call)
    await asyncio.sleep(0.3)
    assert not pending.done(), pending
    await node.kill()
    with pytest.raises(expected) as raised:
        await asyncio.wait_for(pending, within_s + 5)
    assert node.since_kill() < within_s, node.since_kill()
    return raised.value


async def test_a_background_command_s_wait(node: Node) -> None:
    sbx = await AsyncSandbox.create()
    handle = await sbx.commands.run("sleep 60", background=True)
    error = await _ends_with_sdk_error(node, handle.wait())
    assert IN_FLIGHT in str(error)
    assert await sbx.is_running() is False  # the probe the SDK made says so too


async def test_a_connected_command(node: Node) -> None:
    sbx = await AsyncSandbox.create()
    started = await sbx.commands.run("sleep 60", background=True)
    connected = await sbx.commands.connect(started.pid)
    error = await _ends_with_sdk_error(node, connected.wait())
    assert IN_FLIGHT in str(error)


async def test_a_pty(node: Node) -> None:
    sbx = await AsyncSandbox.create()
    pty = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=lambda _: None)
    error = await _ends_with_sdk_error(node, pty.wait())
    assert IN_FLIGHT in str(error)


async def test_a_directory_watch(node: Node) -> None:
    sbx = await AsyncSandbox.create()
    exits: asyncio.Queue[Exception | None] = asyncio.Queue()
    await sbx.files.watch_dir("/tmp", on_event=lambda _: None, on_exit=exits.put_nowait)
    error = await _ends_with_sdk_error(node, _raise(exits.get()))
    assert IN_FLIGHT in str(error)


async def _raise(exit_error: Awaitable[Exception | None]) -> None:
    error = await exit_error
    assert error is not None, "the watch ended without an error"
    raise error


@contextlib.asynccontextmanager
async def _sparse_file(sbx: AsyncSandbox, size: str) -> AsyncIterator[str]:
    path = f"/tmp/parity-{secrets.token_hex(4)}"
    await sbx.commands.run(f"truncate -s {size} {path}")  # sparse: takes no room
    try:
        yield path
    finally:
        Path(path).unlink(missing_ok=True)  # envd runs on this host


async def test_a_download_in_flight(node: Node) -> None:
    sbx = await AsyncSandbox.create()
    async with _sparse_file(sbx, "256M") as path:  # seconds to relay through these proxies
        error = await _ends_with_sdk_error(node, sbx.files.read(path, format="bytes"),
                                           within_s=DOWNLOAD_WITHIN_S)
    assert IN_FLIGHT in str(error)


async def test_a_streamed_download_in_flight(node: Node) -> None:
    """A streamed read surfaces httpx's transport errors as they are (the SDK's documented
    contract): the stream is broken, not complete."""
    sbx = await AsyncSandbox.create()
    async with _sparse_file(sbx, "8G") as path:
        stream = await sbx.files.read(path, format="stream")

        async def read_all() -> None:
            # A reader that stops reading sees the break once it reads again.
            async for _ in stream:
                pass

        await _ends_with_sdk_error(node, read_all(), httpx.RemoteProtocolError,
                                   within_s=DOWNLOAD_WITHIN_S)


async def test_an_upload_in_flight(node: Node) -> None:
    sbx = await AsyncSandbox.create()
    path = f"/tmp/parity-{secrets.token_hex(4)}"

    async def slow_body() -> AsyncIterator[bytes]:
        while True:
            yield b"x" * 65536
            await asyncio.sleep(0.05)

    try:
        # Cut while the body streams: a 502 "not found" answered mid-upload, or the connection
        # dropped and then the probe: the SDK raises SandboxNotRunningException either way.
        await _ends_with_sdk_error(node, sbx.files.write(path, slow_body()))
    finally:
        Path(path).unlink(missing_ok=True)


def _app_port() -> dict[str, str]:
    return {SANDBOX_ID_HEADER: SANDBOX_ID, SANDBOX_PORT_HEADER: str(APP_PORT)}


async def _health(node: Node) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{node.url}/health", headers={SANDBOX_ID_HEADER: SANDBOX_ID}) as r:
            return r.status


async def test_an_app_port_http_stream(node: Node) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{node.url}/stream", headers=_app_port()) as response:
            assert await response.content.readline() == b"tick\n"

            async def read_all() -> None:
                async for _ in response.content:
                    pass

            await _ends_broken(node, read_all())
    assert await _health(node) == 502


async def _ends_broken(node: Node, read: Awaitable[None]) -> None:
    """An HTTP stream the kill breaks: the client sees it cut short, not complete."""
    pending = asyncio.ensure_future(read)
    await asyncio.sleep(0.3)
    assert not pending.done()
    await node.kill()
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(pending, 10)
    assert node.since_kill() < WITHIN_S, node.since_kill()


async def test_an_app_port_websocket(node: Node) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"{node.url}/ws", headers=_app_port()) as ws:
            assert (await ws.receive_str()) == "hello"
            pending = asyncio.ensure_future(ws.receive())
            await asyncio.sleep(0.3)
            assert not pending.done()
            await node.kill()
            message = await asyncio.wait_for(pending, 10)
            assert node.since_kill() < WITHIN_S, node.since_kill()
            assert message.type == aiohttp.WSMsgType.CLOSE and message.data == 1011

