"""An HTTP (ASGI) server embedded in a service's own event loop: uvicorn without its signal
handling (the service owns SIGINT/SIGTERM, and tests keep theirs)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn

from aenv_common.errors import Unavailable


class EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def start_http_server(
    config: uvicorn.Config, sock: socket.socket | None = None
) -> tuple[EmbeddedServer, asyncio.Task[None]]:
    """Serves in a background task; returns once listening, or raises Unavailable if the server
    stopped during start-up (e.g. the address is taken)."""
    server = EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock] if sock else None))
    while not server.started:
        if task.done():
            with contextlib.suppress(BaseException):
                await task
            raise Unavailable(f"http server could not start on {config.host}:{config.port}")
        await asyncio.sleep(0.01)
    return server, task
