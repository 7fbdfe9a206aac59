"""Local HTTP servers for data-plane tests: a guest-like app (envd /health, streaming, upload,
websocket echo) and a minimal node proxy built on the shared StreamingProxy, which routes by
`E2b-Sandbox-Port` to 127.0.0.1:<port> and answers "port is not open" on refusal."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import aiohttp
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from aenv_common.httpproxy import StreamingProxy, UpstreamRefused


class _Quiet(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


@contextlib.asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        access_log=False,
        http="httptools",
        ws="websockets-sansio",
    )
    server = _Quiet(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no start event
            await asyncio.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await task


class GuestApp:
    """What runs inside a sandbox; records what it saw."""

    def __init__(self) -> None:
        self.seen_headers: list[dict[str, str]] = []
        self.release = asyncio.Event()
        self.stream_closed = asyncio.Event()
        routes = [
            Route("/health", self.health),
            Route("/stream", self.stream),
            Route("/upload", self.upload, methods=["POST"]),
            Route("/echo", self.echo, methods=["GET", "POST", "PUT"]),
            # An app's path that is also a control-plane route: Host routing must reach the app.
            Route("/sandboxes", self.echo, methods=["GET", "POST"]),
            WebSocketRoute("/ws", self.ws),
        ]
        self.app = Starlette(routes=routes)

    async def health(self, request: Request) -> Response:
        self.seen_headers.append(dict(request.headers))
        return Response(status_code=204)

    async def echo(self, request: Request) -> Response:
        self.seen_headers.append(dict(request.headers))
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "query": request.url.query,
                "body": (await request.body()).decode(),
            }
        )

    async def stream(self, request: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            try:
                yield b"first\n"
                await self.release.wait()  # the second chunk only after the client saw the first
                yield b"second\n"
                await asyncio.sleep(3600)  # long-lived: ends only when the client disconnects
            finally:
                self.stream_closed.set()

        return StreamingResponse(chunks(), media_type="application/connect+json")

    async def upload(self, request: Request) -> Response:
        self.seen_headers.append(dict(request.headers))
        sizes = [len(chunk) async for chunk in request.stream()]
        return JSONResponse({"total": sum(sizes)})

    async def ws(self, websocket: WebSocket) -> None:
        await websocket.accept()
        with contextlib.suppress(Exception):
            while True:
                message = await websocket.receive_text()
                await websocket.send_text("echo:" + message)


class MiniNodeProxy:
    """The node agent's proxy in miniature: same StreamingProxy, upstream chosen by port."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._proxy = StreamingProxy(session)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            websocket = WebSocket(scope, receive, send)
            base = f"http://127.0.0.1:{websocket.headers['e2b-sandbox-port']}"
            await self._proxy.forward_websocket(websocket, base)
            return
        request = Request(scope, receive)
        base = f"http://127.0.0.1:{request.headers['e2b-sandbox-port']}"
        try:
            response = await self._proxy.forward(request, base)
        except UpstreamRefused:
            response = JSONResponse(
                {
                    "sandboxId": request.headers["e2b-sandbox-id"],
                    "code": 502,
                    "message": "The sandbox is running but port is not open",
                },
                status_code=502,
            )
        await response(scope, receive, send)
