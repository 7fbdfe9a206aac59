"""A Connect server stream the upstream breaks off ends, at an envelope boundary, with E2B's
`unavailable` end-of-stream envelope; a break inside an envelope, or of any other body, stays a
break (the shared StreamingProxy, which the gateway and the node proxy both relay through)."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator

import aiohttp
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from aenv_common.httpproxy import StreamingProxy
from aenv_common.sandbox_routing import stream_ended

from .upstreams import serve

ENDED = stream_ended("sbx-1")


def _envelope(payload: bytes) -> bytes:
    return struct.pack(">BI", 0, len(payload)) + payload


FIRST = _envelope(b'{"event":{"start":{"pid":7}}}')


async def _held(head: bytes, media_type: str) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield head
        await asyncio.Event().wait()  # a command that never ends

    return StreamingResponse(body(), media_type=media_type)


async def connect_stream(request: Request) -> Response:
    return await _held(FIRST, "application/connect+json")


async def half_envelope(request: Request) -> Response:
    return await _held(FIRST + _envelope(b'{"event":{"keepalive":{}}}')[:9],
                       "application/connect+json")


async def plain(request: Request) -> Response:
    return await _held(b"tick\n", "text/plain")


class Relay:
    def __init__(self, upstream_port: int, session: aiohttp.ClientSession) -> None:
        self.proxy = StreamingProxy(session)
        self._base = f"http://127.0.0.1:{upstream_port}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.proxy.forward(Request(scope, receive), self._base, None, ENDED)
        await response(scope, receive, send)


async def _relay_then_cut(path: str, head: bytes) -> bytes:
    """The body the client reads through the relay when the upstream is cut after `head`."""
    upstream = Starlette(routes=[Route("/connect", connect_stream), Route("/half", half_envelope),
                                 Route("/plain", plain)])
    async with serve(upstream) as upstream_port, aiohttp.ClientSession() as session:
        relay = Relay(upstream_port, session)
        async with serve(relay) as relay_port, aiohttp.ClientSession() as client:
            async with client.get(f"http://127.0.0.1:{relay_port}{path}") as response:
                assert response.status == 200
                assert await response.content.readexactly(len(head)) == head
                relay.proxy.cut("the sandbox stopped serving")
                return await asyncio.wait_for(response.content.read(), 10)


async def test_a_connect_stream_cut_between_envelopes_ends_with_unavailable() -> None:
    rest = await _relay_then_cut("/connect", FIRST)
    flag, length = struct.unpack(">BI", rest[:5])
    assert flag == 0x02 and len(rest) == 5 + length  # one end-of-stream envelope, then the end
    assert json.loads(rest[5:]) == {"error": {"code": "unavailable", "message": ENDED}}


@pytest.mark.parametrize(("path", "head"), [
    ("/half", FIRST + _envelope(b'{"event":{"keepalive":{}}}')[:9]),
    ("/plain", b"tick\n"),
])
async def test_a_break_inside_an_envelope_or_of_another_body_stays_a_break(
    path: str, head: bytes
) -> None:
    with pytest.raises(aiohttp.ClientPayloadError):
        await _relay_then_cut(path, head)
