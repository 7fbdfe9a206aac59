"""Data plane: gateway -> (mini) node proxy on the shared StreamingProxy -> a local upstream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import httpx

from .conftest import API_KEY, Stack


async def _sandbox(stack: Stack) -> str:
    async with httpx.AsyncClient(base_url=stack.url) as http:
        r = await http.post(
            "/v2/sandboxes", headers={"X-API-Key": API_KEY}, json={"templateID": "base"}
        )
        return str(r.json()["sandboxID"])


def _headers(sid: str, port: int) -> dict[str, str]:
    return {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": str(port), "X-Access-Token": "tok"}


async def test_forwards_method_path_query_body_and_tokens(stack: Stack) -> None:
    sid = await _sandbox(stack)
    async with httpx.AsyncClient(base_url=stack.url) as http:
        r = await http.put(
            "/echo?a=1&b=%2F", headers=_headers(sid, stack.guest_port), content=b"hi"
        )
        assert r.json() == {"method": "PUT", "path": "/echo", "query": "a=1&b=%2F", "body": "hi"}
        seen = stack.guest.seen_headers[-1]
        assert seen["x-access-token"] == "tok" and seen["e2b-sandbox-id"] == sid
        # Host-based routing reaches the same upstream.
        host = {"Host": f"{stack.guest_port}-{sid}.aenv.test"}
        r = await http.post("/echo?x=y", headers=host, content=b"h")
        assert r.status_code == 200 and r.json()["query"] == "x=y"


async def test_streamed_response_arrives_incrementally_and_disconnect_propagates(
    stack: Stack,
) -> None:
    sid = await _sandbox(stack)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{stack.url}/stream", headers=_headers(sid, stack.guest_port)) as r:
            assert r.headers["content-type"] == "application/connect+json"
            first = await asyncio.wait_for(r.content.readline(), 5)
            assert first == b"first\n"  # arrived while the upstream still holds the second chunk
            stack.guest.release.set()
            assert await asyncio.wait_for(r.content.readline(), 5) == b"second\n"
    # The client went away: the upstream's generator is closed, not left running for an hour.
    await asyncio.wait_for(stack.guest.stream_closed.wait(), 5)


async def test_chunked_upload_streams_through(stack: Stack) -> None:
    sid = await _sandbox(stack)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b"x" * 16384

    async with httpx.AsyncClient(base_url=stack.url) as http:
        r = await http.post("/upload", headers=_headers(sid, stack.guest_port), content=body())
    assert r.json() == {"total": 64 * 16384}
    assert stack.guest.seen_headers[-1].get("transfer-encoding") == "chunked"


async def test_websocket_echo(stack: Stack) -> None:
    sid = await _sandbox(stack)
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(
            f"{stack.url}/ws", headers=_headers(sid, stack.guest_port)
        ) as ws:
            await ws.send_str("ping")
            assert (await asyncio.wait_for(ws.receive(), 5)).data == "echo:ping"


async def test_refusals(stack: Stack) -> None:
    sid = await _sandbox(stack)
    async with httpx.AsyncClient(base_url=stack.url) as http:
        closed = await http.get("/x", headers=_headers(sid, 1))
        assert closed.status_code == 502 and "port is not open" in closed.json()["message"]
        unknown = await http.get("/health", headers=_headers("nosuchsandbox", 49983))
        assert unknown.status_code == 502
        assert unknown.json() == {
            "sandboxId": "nosuchsandbox",
            "message": "The sandbox was not found",
            "code": 502,
        }
        init = await http.post("/init", headers=_headers(sid, 49983), json={})
        assert init.status_code == 403 and init.json()["code"] == 403
        bad_port = await http.get("/x", headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "x"})
        assert bad_port.status_code == 400
        # Control-plane routes win even with sandbox headers attached.
        cp = await http.get(f"/sandboxes/{sid}", headers={**_headers(sid, 1), "X-API-Key": API_KEY})
        assert cp.status_code == 200 and cp.json()["sandboxID"] == sid
