"""One delivery attempt against real HTTP servers on loopback: E2B's headers and the signed
body, redirects never followed, the timeout, and the target policy applied before any byte is
sent (for a name too: `localhost` resolves to loopback)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from aenv_gateway.core.webhooks.sender import Sender
from aenv_gateway.core.webhooks.targets import GuardedResolver, TargetPolicy
from aenv_testing.webhook_receiver import e2b_documented_signature

BODY = b'{"id":"e1","type":"sandbox.lifecycle.created"}'


@contextlib.asynccontextmanager
async def server(hits: list[tuple[str, dict[str, str], bytes]]) -> AsyncIterator[int]:
    async def hook(request: web.Request) -> web.Response:
        hits.append((request.path, dict(request.headers), await request.read()))
        return web.Response(status=204)

    async def moved(request: web.Request) -> web.Response:
        hits.append((request.path, dict(request.headers), await request.read()))
        raise web.HTTPFound("/hook")

    async def slow(request: web.Request) -> web.Response:
        hits.append((request.path, dict(request.headers), await request.read()))
        await asyncio.sleep(1.5)
        return web.Response()

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/moved", moved)
    app.router.add_post("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def test_an_attempt_carries_e2bs_headers_and_the_signed_body() -> None:
    hits: list[tuple[str, dict[str, str], bytes]] = []
    sender = Sender(TargetPolicy(True), timeout_s=5)
    try:
        async with server(hits) as port:
            attempt = await sender.send("wh1", f"http://localhost:{port}/hook", "s3", BODY)
    finally:
        await sender.close()
    assert attempt.delivered and attempt.status == 204 and attempt.error == ""
    [(path, headers, raw)] = hits
    assert path == "/hook"
    assert raw == BODY and headers["Content-Type"] == "application/json"
    assert headers["e2b-webhook-id"] == "wh1" and headers["e2b-signature-version"] == "v1"
    assert headers["e2b-signature"] == e2b_documented_signature("s3", BODY.decode())
    assert headers["e2b-delivery-id"]


async def test_a_redirect_is_a_failed_attempt_never_followed() -> None:
    hits: list[tuple[str, dict[str, str], bytes]] = []
    sender = Sender(TargetPolicy(True), timeout_s=5)
    try:
        async with server(hits) as port:
            attempt = await sender.send("wh1", f"http://127.0.0.1:{port}/moved", "s", BODY)
    finally:
        await sender.close()
    assert (attempt.status, attempt.error, attempt.delivered) == (302, "HTTP 302", False)
    assert [path for path, _, _ in hits] == ["/moved"]


async def test_a_receiver_that_does_not_answer_in_time_fails_the_attempt() -> None:
    hits: list[tuple[str, dict[str, str], bytes]] = []
    sender = Sender(TargetPolicy(True), timeout_s=0.3)
    try:
        async with server(hits) as port:
            attempt = await sender.send("wh1", f"http://127.0.0.1:{port}/slow", "s", BODY)
    finally:
        await sender.close()
    assert (attempt.status, attempt.delivered) == (0, False)
    assert "in time" in attempt.error and attempt.seconds < 3


async def test_a_private_target_gets_no_request_by_address_or_by_name() -> None:
    hits: list[tuple[str, dict[str, str], bytes]] = []
    sender = Sender(TargetPolicy(False), timeout_s=5)
    try:
        async with server(hits) as port:
            for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]"):
                attempt = await sender.send("wh1", f"http://{host}:{port}/hook", "s", BODY)
                assert attempt.status == 0 and "loopback" in attempt.error, host
    finally:
        await sender.close()
    assert hits == []


async def test_the_connectors_resolver_hands_out_only_checked_addresses() -> None:
    """A name re-pointed after the sender's own check is caught where the connection is made."""
    allowed = await GuardedResolver(TargetPolicy(True)).resolve("localhost", 80)
    assert {r["host"] for r in allowed} <= {"127.0.0.1", "::1"} and allowed
    assert all(r["port"] == 80 and r["hostname"] == "localhost" for r in allowed)
    with pytest.raises(OSError, match="loopback"):
        await GuardedResolver(TargetPolicy(False)).resolve("localhost", 80)
