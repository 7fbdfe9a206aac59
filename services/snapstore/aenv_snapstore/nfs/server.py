"""The volume server's NFS endpoint: one TCP port for MOUNT v3 and NFS v3.

Per connection: the relay's preamble (tickets -> grants; anything wrong closes the connection),
then RPC records. The Linux client pipelines many calls on one connection, so each call runs in
its own task (at most MAX_IN_FLIGHT at once; reading pauses beyond that) and its reply is written
whole as soon as it is ready, in whatever order calls finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets

from aenv_snapstore.volumes.tickets import TicketKey

from .api import VolumeStoreLike
from .context import log
from .dispatch import Observer, dispatch
from .rpc import MAX_RECORD, BadCall, RecordTooLarge, frame, parse_call, read_record
from .session import MAX_PREAMBLE, BadPreamble, Session, parse_preamble

PREAMBLE_TIMEOUT_S = 5.0
MAX_IN_FLIGHT = 64
CALL_GRACE_S = 5.0  # how long a closing connection waits for its calls in flight
# The stream's buffer bound: above a whole record, so a 1 MiB WRITE is read without pausing the
# socket every 128 KiB; a preamble is bounded separately (MAX_PREAMBLE, checked once read).
_READ_LIMIT = MAX_RECORD


class NfsServer:
    def __init__(self, store: VolumeStoreLike, tickets: TicketKey, *,
                 observe: Observer | None = None) -> None:
        self._store = store
        self._tickets = tickets
        self._observe = observe
        # The write verifier: new per server instance, so a client resends what it wrote
        # UNSTABLE and had not committed when this process started.
        self.verifier = secrets.token_bytes(8)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def open_connections(self) -> int:
        """Connections open now (those still sending their preamble included): for metrics."""
        return len(self._connections)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; the bound (host, port) (port 0 picks one)."""
        self._server = await asyncio.start_server(self._accept, host, port, limit=_READ_LIMIT)
        bound = self._server.sockets[0].getsockname()
        log.info("nfs server listening", extra={"host": bound[0], "port": bound[1]})
        return str(bound[0]), int(bound[1])

    async def close(self) -> None:
        """Stop listening and end every connection (calls in flight are cancelled)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = _peer(writer)
        try:
            await self._serve(reader, writer, peer)
        except asyncio.CancelledError:
            pass  # close(): the connection ends below
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     peer: str) -> None:
        session = await self._preamble(reader, peer)
        if session is None:
            return
        connection = _Connection(writer)
        try:
            while True:
                await connection.slots.acquire()
                try:
                    record = await read_record(reader)
                except asyncio.IncompleteReadError:
                    connection.slots.release()
                    return  # the client went away
                except RecordTooLarge as exc:
                    log.warning("nfs connection closed", extra={"peer": peer, "why": str(exc)})
                    return
                connection.start(self._call(record, session, connection, peer))
        finally:
            await connection.close()

    async def _preamble(self, reader: asyncio.StreamReader, peer: str) -> Session | None:
        try:
            async with asyncio.timeout(PREAMBLE_TIMEOUT_S):
                line = await reader.readuntil(b"\n")
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError) as exc:
            log.warning("nfs connection closed: no preamble",
                        extra={"peer": peer, "why": type(exc).__name__})
            return None
        try:
            if len(line) > MAX_PREAMBLE:
                raise BadPreamble("preamble longer than 64 KiB")
            grants = parse_preamble(line[:-1], self._tickets)
        except BadPreamble as exc:
            log.warning("nfs connection closed: bad preamble", extra={"peer": peer,
                                                                      "why": str(exc)})
            return None
        log.info("nfs connection", extra={
            "peer": peer, "sandboxes": sorted({g.sandbox_id for g in grants.values()}),
            "exports": sorted(grants)})
        return Session(self._store, grants)

    async def _call(self, record: bytes, session: Session, connection: _Connection,
                    peer: str) -> None:
        try:
            call = parse_call(record)
        except BadCall as exc:
            log.info("nfs record ignored", extra={"peer": peer, "why": str(exc)})
            return
        reply = await dispatch(call, session, self.verifier, peer, self._observe)
        await connection.send(frame(reply))


class _Connection:
    """The calls in flight on one connection and the one writer their replies share."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()

    def start(self, call: object) -> None:
        assert asyncio.iscoroutine(call)
        task: asyncio.Task[None] = asyncio.create_task(call)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self.slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.warning("nfs reply not sent", extra={"why": repr(task.exception())})

    async def send(self, data: bytes) -> None:
        async with self._write_lock:  # one reply's bytes are never interleaved with another's
            if self.writer.is_closing():
                return  # the peer went away: the reply has no one to go to
            self.writer.write(data)
            with contextlib.suppress(ConnectionError):
                await self.writer.drain()

    async def close(self) -> None:
        """Lets the calls in flight finish (a volume call cut in half helps no one; their replies
        go nowhere if the peer is gone), cancelling what is still running after a grace."""
        tasks = list(self._tasks)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=CALL_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


def _peer(writer: asyncio.StreamWriter) -> str:
    address = writer.get_extra_info("peername")
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
