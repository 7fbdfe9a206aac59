"""The proxy's splice between a guest connection and its upstream, on loopback sockets: bytes
intact both ways under backpressure, each side's end passed on as a half-close, idle ends it."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from aenv_nodeagent.egress.proxy import splice

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def upstream_echo_until_eof(reader: asyncio.StreamReader,
                                  writer: asyncio.StreamWriter) -> None:
    """Reads everything, then answers its digest: works only if the client's EOF arrives."""
    digest = hashlib.sha256()
    while chunk := await reader.read(1 << 16):
        digest.update(chunk)
    writer.write(digest.hexdigest().encode())
    await writer.drain()
    writer.close()


async def upstream_silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()


@pytest.fixture
async def relay() -> AsyncIterator[Callable[[Handler, float], Awaitable[Streams]]]:
    """Starts an upstream and a proxy splicing to it; returns a client of the proxy."""
    servers: list[asyncio.Server] = []
    splices: list[asyncio.Task[None]] = []

    async def start(upstream: Handler, idle_s: float) -> Streams:
        up = await asyncio.start_server(upstream, "127.0.0.1", 0)

        async def proxied(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            splices.append(task)
            up_reader, up_writer = await asyncio.open_connection(
                "127.0.0.1", up.sockets[0].getsockname()[1])
            try:
                await splice(reader, writer, up_reader, up_writer, idle_s)
            finally:
                up_writer.close()
                writer.close()

        proxy = await asyncio.start_server(proxied, "127.0.0.1", 0)
        servers.extend([up, proxy])
        return await asyncio.open_connection("127.0.0.1", proxy.sockets[0].getsockname()[1])

    yield start
    for task in splices:
        task.cancel()
    await asyncio.gather(*splices, return_exceptions=True)
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_bytes_pass_intact_and_the_clients_end_reaches_upstream(
    relay: Callable[[Handler, float], Awaitable[Streams]],
) -> None:
    reader, writer = await relay(upstream_echo_until_eof, 30)
    payload = os.urandom(8 << 20)  # far beyond every buffer on the way: drain must hold back
    writer.write(payload)
    await writer.drain()
    writer.write_eof()  # half-close: the answer still comes back
    answer = await asyncio.wait_for(reader.read(), 30)
    assert answer.decode() == hashlib.sha256(payload).hexdigest()
    writer.close()


async def test_nothing_moving_ends_the_splice_after_the_idle_timeout(
    relay: Callable[[Handler, float], Awaitable[Streams]],
) -> None:
    reader, writer = await relay(upstream_silent, 0.3)
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    assert 0.25 < time.monotonic() - started < 5
    writer.close()
