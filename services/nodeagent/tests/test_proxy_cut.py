"""The node proxy ends requests to a VM that stops serving instead of leaving them waiting.

The upstream here is a real TCP server that accepts a request and never answers, as a guest that
was killed or paused mid-request does (no RST comes from a VM that is gone).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import httpx
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.sandbox_routing import NOT_FOUND_MESSAGE, SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER
from aenv_nodeagent.network.slots import NetSlot
from aenv_nodeagent.proxy import SandboxConnections, build_proxy_app
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.vmm import QemuVm


class Silent:
    """Accepts connections and reads requests, answers nothing."""

    def __init__(self) -> None:
        self.accepted = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        self.accepted.set()
        await reader.read()  # until the proxy drops the connection

    def close(self) -> None:
        for writer in self._writers:
            writer.close()


class Sandboxes:
    def __init__(self, sandbox: Sandbox) -> None:
        self.current: Sandbox | None = sandbox

    def serving(self, sandbox_id: str) -> Sandbox | None:
        current = self.current
        return current if current and current.record.sandbox_id == sandbox_id else None


def sandbox(vm: object) -> Sandbox:
    slot = NetSlot(index=0, netns="none", host_veth="none", host_ip="127.0.0.1",
                   ns_ip="127.0.0.1")
    return Sandbox(cluster_pb2.SandboxRecord(sandbox_id="sbx1"), slot, cast(QemuVm, vm),
                   Path("/nonexistent"))


@pytest.fixture
async def silent() -> AsyncIterator[tuple[Silent, int]]:
    upstream = Silent()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    try:
        yield upstream, server.sockets[0].getsockname()[1]
    finally:
        upstream.close()
        server.close()
        await server.wait_closed()


async def _request(app: object, port: int) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        return await client.get("/health", headers={SANDBOX_ID_HEADER: "sbx1",
                                                    SANDBOX_PORT_HEADER: str(port)})


class Node:
    def __init__(self, upstream: Silent, port: int) -> None:
        self.upstream, self.port = upstream, port
        self.sandboxes, self.connections = Sandboxes(sandbox(object())), SandboxConnections()
        self.app = build_proxy_app(self.sandboxes, self.connections)

    async def stalled_request(self) -> asyncio.Task[httpx.Response]:
        """A request the upstream has read and will never answer."""
        self.upstream.accepted.clear()
        pending = asyncio.create_task(_request(self.app, self.port))
        await asyncio.wait_for(self.upstream.accepted.wait(), 5)
        assert not pending.done()
        return pending


@pytest.fixture
async def node(silent: tuple[Silent, int]) -> AsyncIterator[Node]:
    node = Node(*silent)
    try:
        yield node
    finally:
        await node.connections.close()


async def test_a_killed_sandbox_s_request_in_flight_ends_with_not_found(node: Node) -> None:
    pending = await node.stalled_request()
    node.sandboxes.current = None
    await node.connections.cut("sbx1")
    response = await asyncio.wait_for(pending, 5)
    assert response.status_code == 502
    assert response.json()["message"] == NOT_FOUND_MESSAGE
    assert len(node.connections) == 0


async def test_a_reset_sandbox_gets_a_fresh_pool_and_its_old_one_closes(node: Node) -> None:
    pending = await node.stalled_request()
    # Same id, new VM: the next request's pool replaces the old one, which is closed.
    node.sandboxes.current = sandbox(object())
    second = await node.stalled_request()
    response = await asyncio.wait_for(pending, 5)
    assert response.status_code == 502
    assert "unreachable" in response.json()["message"]
    assert not second.done() and len(node.connections) == 1
    second.cancel()
