"""One slot's relay: the guest's NFS connections to ``GATEWAY_IP:2049`` spliced to the volume
server, each preceded by the sandbox's tickets.

The volume server trusts nothing but tickets, and a guest cannot present any (it never sees
them): for each connection the guest opens, the relay dials the server from the agent's netns,
sends ``AENV-VOLUMES 1 <ticket>...\\n`` first, then copies bytes both ways, a bounded chunk at a
time with backpressure (``drain``). When either side ends or fails, both are closed: a guest's
NFS client (NFSv3 is stateless) dials again and carries on, through whatever relay is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

from aenv_common.errors import AenvError

from .config import RelaySettings
from .endpoint import VolumeEndpoint

log = logging.getLogger(__name__)

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
_ACCEPT_PAUSE_S = 0.1  # after an accept that failed (out of descriptors): no busy loop


class SlotRelay:
    """Accepts on ``listener`` (in the slot's netns) on the running event loop until ``stop``."""

    def __init__(self, netns: str, listener: socket.socket, preamble: bytes,
                 endpoint: VolumeEndpoint, settings: RelaySettings) -> None:
        self.netns = netns
        self._listener = listener
        self.preamble = preamble  # secret (tickets): never logged
        self._endpoint = endpoint
        self._settings = settings
        self._connections: set[asyncio.Task[None]] = set()
        self._accepting = asyncio.get_running_loop().create_task(self._accept())

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def stop(self) -> None:
        """Stop accepting and close every connection (both sides); the listener is closed, so
        the netns is held by nothing of the relay's."""
        self._accepting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._accepting
        self._listener.close()
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._listener)
            except OSError as err:
                log.warning("volume relay accept failed",
                            extra={"netns": self.netns, "error": str(err)})
                await asyncio.sleep(_ACCEPT_PAUSE_S)
                continue
            if len(self._connections) >= self._settings.max_connections:
                log.warning("volume relay connection refused: too many",
                            extra={"netns": self.netns, "connections": len(self._connections)})
                conn.close()
                continue
            task = loop.create_task(self._serve(conn))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, conn: socket.socket) -> None:
        limit = self._settings.chunk_bytes
        try:
            guest = await asyncio.open_connection(sock=conn, limit=limit)
        except BaseException:
            conn.close()
            raise
        server: Stream | None = None
        ended = False
        try:
            server = await self._dial(limit)
            if server is not None:
                server[1].write(self.preamble)
                await splice(guest, server, limit)
            ended = True
        finally:
            for writer in (guest[1], *((server[1],) if server is not None else ())):
                _close(writer, flush=ended)

    async def _dial(self, limit: int) -> Stream | None:
        try:
            host, port = await self._endpoint.address()
            return await asyncio.wait_for(asyncio.open_connection(host, port, limit=limit),
                                          self._settings.dial_timeout_s)
        except AenvError as err:
            log.warning("volume relay: no volume server address",
                        extra={"netns": self.netns, "error": err.message})
        except (OSError, TimeoutError) as err:
            self._endpoint.forget()  # it may have moved: the next connection asks again
            log.warning("volume relay: the volume server did not answer",
                        extra={"netns": self.netns, "error": repr(err)})
        return None


async def splice(a: Stream, b: Stream, chunk: int) -> None:
    """Copy both ways until one side ends or fails; the other direction then stops too."""
    pumps = [asyncio.ensure_future(_pump(a[0], b[1], chunk)),
             asyncio.ensure_future(_pump(b[0], a[1], chunk))]
    try:
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, chunk: int) -> None:
    while data := await src.read(chunk):
        dst.write(data)
        await dst.drain()


def _close(writer: asyncio.StreamWriter, *, flush: bool) -> None:
    """``flush``: what is buffered still goes out before the socket closes (one side ended);
    else it is closed at once (the relay stops: an NFS client resends what got no reply)."""
    if flush:
        writer.close()
    else:
        writer.transport.abort()
