"""A Connect stream in flight when its sandbox dies ends, at an envelope boundary, with E2B's
`unavailable` end-of-stream saying E2B's words and then the death's (the cut's `why`); a cut
without one (a kill, a pause) says E2B's words alone.

The upstream is a real TCP server that answers a Connect server stream with one envelope and
then nothing, as a guest whose VM died mid-command does."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator

import httpx
import pytest

from aenv_common.sandbox_routing import SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER, stream_ended
from aenv_nodeagent.proxy import SandboxConnections, build_proxy_app

from .test_proxy_cut import Sandboxes, sandbox

FIRST = b'{"event":{"start":{"pid":7}}}'
DIED = "sandbox sbx1 died: vmm_crash (qemu killed by signal 9)"


def _envelope(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


class Stalling:
    """Answers a Connect stream's first envelope, then nothing."""

    def __init__(self) -> None:
        self.answered = asyncio.Event()
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        chunk = _envelope(FIRST)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/connect+json\r\n"
                     b"transfer-encoding: chunked\r\n\r\n"
                     + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        await writer.drain()
        self.answered.set()
        await reader.read()  # until the proxy drops the connection
        writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Stalling]:
    stalling = Stalling()
    server = await asyncio.start_server(stalling.handle, "127.0.0.1", 0)
    stalling.port = server.sockets[0].getsockname()[1]
    try:
        yield stalling
    finally:
        server.close()
        await server.wait_closed()


async def _cut_mid_stream(upstream: Stalling, why: str) -> dict[str, object]:
    """The end-of-stream error a client reads when the sandbox's traffic is cut mid-stream."""
    connections = SandboxConnections()
    app = build_proxy_app(Sandboxes(sandbox(object())), connections)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            pending = asyncio.create_task(client.post(
                "/process.Process/Start", headers={SANDBOX_ID_HEADER: "sbx1",
                                                   SANDBOX_PORT_HEADER: str(upstream.port)}))
            await asyncio.wait_for(upstream.answered.wait(), 5)
            await asyncio.sleep(0.2)  # its first envelope relayed
            await connections.cut("sbx1", why)
            body = (await asyncio.wait_for(pending, 5)).content
    finally:
        await connections.close()
    assert body[:5 + len(FIRST)] == _envelope(FIRST)
    rest = body[5 + len(FIRST):]
    flag, length = struct.unpack(">BI", rest[:5])
    assert flag == 0x02 and len(rest) == 5 + length
    return dict(json.loads(rest[5:])["error"])


async def test_a_death_s_cut_ends_the_stream_saying_why(upstream: Stalling) -> None:
    assert await _cut_mid_stream(upstream, DIED) == {
        "code": "unavailable", "message": f"{stream_ended('sbx1')}: {DIED}"}


async def test_a_cut_without_a_death_says_e2b_s_words_alone(upstream: Stalling) -> None:
    assert await _cut_mid_stream(upstream, "") == {
        "code": "unavailable", "message": stream_ended("sbx1")}
