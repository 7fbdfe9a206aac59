"""The restore's /init is its guest's first request: sent again while no envd takes it (nothing
listening yet, a connection dropped unanswered), never once envd may have applied it, and
bounded by its deadline; the node agent keeps no connection to a guest alive. Over real
sockets, against small HTTP servers standing in for envd."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from aenv_common.errors import DeadlineExceeded, Internal
from aenv_nodeagent.envd_client import EnvdClient, guest_session
from aenv_testing.ports import free_port

HOST = "127.0.0.1"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def envd(port: int, handler: Handler) -> AsyncIterator[list[dict[str, object]]]:
    """An HTTP server on `port` whose POST /init is `handler`; yields the bodies it was sent."""
    bodies: list[dict[str, object]] = []

    async def init(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await handler(request)

    app = web.Application()
    app.router.add_post("/init", init)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, HOST, port).start()
        yield bodies
    finally:
        await runner.cleanup()


async def answered(request: web.Request) -> web.StreamResponse:
    return web.Response(status=204, headers={"X-Envd-Version": "1.2.3"})


async def init(session: aiohttp.ClientSession, port: int, timeout_s: float) -> str:
    return await EnvdClient(session).init(HOST, env_vars={"K": "v"}, access_token="t",
                                          port=port, timeout_s=timeout_s)


async def test_it_waits_for_envd_to_listen_and_is_applied_once() -> None:
    port = free_port()
    async with aiohttp.ClientSession() as session:
        sending = asyncio.ensure_future(init(session, port, 10))
        await asyncio.sleep(0.3)  # refused meanwhile: nothing listens
        assert not sending.done()
        async with envd(port, answered) as bodies:
            assert await asyncio.wait_for(sending, 10) == "1.2.3"
    assert [body["envVars"] for body in bodies] == [{"K": "v"}]


async def test_a_connection_dropped_unanswered_is_sent_again() -> None:
    """As a guest whose network is still coming up may."""
    port, dropped = free_port(), asyncio.Event()

    async def drop_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.transport.abort()  # no answer: the request reached nothing
        dropped.set()

    server = await asyncio.start_server(drop_first, HOST, port)
    async with aiohttp.ClientSession() as session:
        sending = asyncio.ensure_future(init(session, port, 10))
        await asyncio.wait_for(dropped.wait(), 10)
        server.close()
        await server.wait_closed()
        async with envd(port, answered) as bodies:
            assert await asyncio.wait_for(sending, 10) == "1.2.3"
    assert len(bodies) == 1


async def test_no_envd_is_a_deadline() -> None:
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="did not answer /init within"):
            await init(session, free_port(), 0.5)
    assert time.monotonic() - started < 3


async def test_an_envd_that_took_it_is_not_asked_again() -> None:
    """No answer within the deadline: the /init may be applied, so it is not sent twice."""
    released = asyncio.Event()

    async def unanswered(request: web.Request) -> web.StreamResponse:
        await released.wait()
        return web.Response(status=204)

    port = free_port()
    async with envd(port, unanswered) as bodies, aiohttp.ClientSession() as session:
        started = time.monotonic()
        try:
            with pytest.raises(DeadlineExceeded):
                await init(session, port, 0.5)
            assert time.monotonic() - started < 3
            assert len(bodies) == 1
        finally:
            released.set()


async def test_a_refused_init_fails_at_once() -> None:
    async def refused(request: web.Request) -> web.StreamResponse:
        return web.Response(status=401, text="bad token")

    port = free_port()
    async with envd(port, refused) as bodies, aiohttp.ClientSession() as session:
        with pytest.raises(Internal, match="HTTP 401 bad token"):
            await init(session, port, 10)
        assert len(bodies) == 1


async def test_the_guest_session_keeps_no_connection_alive() -> None:
    """Each request on a connection of its own: none outlives the VM it reached."""
    peers: list[object] = []

    async def peer(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        peers.append(request.transport.get_extra_info("peername"))
        return web.Response(status=204)

    port = free_port()
    async with envd(port, peer), guest_session() as session:
        for _ in range(2):
            async with session.post(f"http://{HOST}:{port}/init", json={}) as resp:
                assert resp.status == 204
    assert len(peers) == 2 and peers[0] != peers[1]
