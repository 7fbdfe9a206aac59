"""A small HTTP/1.1 origin for the relay's tests (h11, keep-alive, optional TLS): it records
every request it gets (headers as sent, body) and answers with a JSON summary. Requests with
`Expect: 100-continue` get a 100 first; an `Upgrade` request gets a 101 and then its bytes echoed
back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass, field

import h11


@dataclass
class Seen:
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    connection: int

    def header(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]


@dataclass
class EchoUpstream:
    tls: ssl.SSLContext | None = None
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    port: int = 0
    _server: asyncio.Server | None = None

    async def start(self) -> EchoUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        try:
            while await self._one(conn, reader, writer, self.connections):
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()

    async def _one(self, conn: h11.Connection, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter, connection: int) -> bool:
        request = await _next(conn, reader)
        if not isinstance(request, h11.Request):
            return False
        headers = [(n.decode(), v.decode()) for n, v in request.headers.raw_items()]
        if conn.they_are_waiting_for_100_continue:
            writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        body = b""
        while isinstance(event := await _next(conn, reader), h11.Data):
            body += event.data
        seen = Seen(request.method.decode(), request.target.decode(), headers, body, connection)
        self.seen.append(seen)
        if any(n.lower() == "upgrade" for n, _ in headers):
            await self._upgrade(conn, reader, writer)
            return False
        answer = json.dumps({"target": seen.target, "body_bytes": len(body)}).encode()
        writer.write(conn.send(h11.Response(status_code=200, headers=[
            ("content-type", "application/json"), ("content-length", str(len(answer)))])))
        writer.write(conn.send(h11.Data(data=answer)) + conn.send(h11.EndOfMessage()))
        await writer.drain()
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _upgrade(self, conn: h11.Connection, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        writer.write(conn.send(h11.InformationalResponse(
            status_code=101, headers=[("upgrade", "echo"), ("connection", "upgrade")])))
        rest = conn.trailing_data[0]
        if rest:
            writer.write(rest)
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
    while (event := conn.next_event()) is h11.NEED_DATA:
        conn.receive_data(await reader.read(65536))
    return event
