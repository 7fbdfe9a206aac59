"""A webhook receiver for tests: a real HTTP server on loopback that answers a script of
statuses and keeps every request, and E2B's documented way to verify a delivery's signature
(written from E2B's docs, apart from the gateway's own code, so a test checks one against the
other)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator

from aiohttp import web


def e2b_documented_signature(secret: str, raw_body: str) -> str:
    """E2B's docs' verification: base64 of SHA-256 over the secret followed by the raw payload,
    its '=' padding removed."""
    digest = hashlib.sha256((secret + raw_body).encode("utf-8")).digest()
    return base64.b64encode(digest).decode("utf-8").rstrip("=")


class Receiver:
    """Answers `statuses` in turn, then `after` to every request."""

    def __init__(self, statuses: list[int] | None = None, after: int = 200) -> None:
        self.statuses = list(statuses or [])
        self.after = after
        # (headers, raw body, status answered) of every request, in order.
        self.requests: list[tuple[dict[str, str], bytes, int]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        status = self.statuses.pop(0) if self.statuses else self.after
        self.requests.append((dict(request.headers), raw, status))
        return web.Response(status=status, text="ok")

    def accepted(self) -> list[dict[str, object]]:
        """The bodies of the requests answered 200, parsed, in order."""
        return [json.loads(raw) for _, raw, status in self.requests if status == 200]

    def unsigned(self, secret: str) -> list[bytes]:
        """The bodies whose `e2b-signature` E2B's verification does not accept."""
        return [raw for headers, raw, _ in self.requests
                if headers.get("e2b-signature") != e2b_documented_signature(secret, raw.decode())]


@contextlib.asynccontextmanager
async def serving(receiver: Receiver) -> AsyncIterator[Receiver]:
    """`receiver` on 127.0.0.1 (a free port), at `receiver.url` (POST /hook) meanwhile."""
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None and server.sockets  # type: ignore[attr-defined]
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()
