"""Volume relays for tests without netns: listeners on loopback (one per slot, any port) and an
endpoint that names a given volume server instead of asking snapstore; plus a fake NFS server
that records each connection's preamble and echoes what follows it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass, field

from aenv_nodeagent.volumes import VolumeEndpoint, VolumeRelays
from aenv_nodeagent.volumes.listener import listen_on


class FixedEndpoint(VolumeEndpoint):
    """Says `address` (a volume server) without asking snapstore; counts how often it said."""

    def __init__(self, address: str) -> None:
        super().__init__("snapstore.invalid:1")
        self.nfs_address = address
        self.asked = 0

    async def _ask(self) -> str:
        self.asked += 1
        return self.nfs_address


async def loopback_listener(netns: str, backlog: int) -> socket.socket:
    return listen_on("127.0.0.1", 0, backlog)


def loopback_relays(nfs_address: str = "127.0.0.1:9") -> VolumeRelays:
    return VolumeRelays(FixedEndpoint(nfs_address), open_listener=loopback_listener)


@dataclass
class FakeNfsServer:
    """Reads the preamble line, then echoes every byte back until the client closes."""

    preambles: list[bytes] = field(default_factory=list)
    open_connections: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def address(self) -> str:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def start(self) -> FakeNfsServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.open_connections += 1
        self.closed.clear()
        try:
            self.preambles.append(await reader.readline())
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.open_connections -= 1
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if self.open_connections == 0:
                self.closed.set()
