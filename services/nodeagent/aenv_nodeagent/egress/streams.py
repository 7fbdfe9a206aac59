"""Byte streams for the header-rule relay: plain asyncio streams and TLS over them in memory.

The proxy has already read the guest's first bytes (a ClientHello or a request head) to learn
the host's name, so TLS cannot be started on the socket itself (`start_tls` would miss them).
`TlsStream` runs the TLS engine on memory BIOs instead, fed by any `ByteStream` — the guest's
socket with those first bytes put back in front, or whatever a dialer returned (a SOCKS5
tunnel, itself possibly TLS to the proxy: TLS in TLS needs nothing special here).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Protocol

CHUNK = 64 * 1024


class ByteStream(Protocol):
    async def read(self) -> bytes:
        """Up to CHUNK bytes; b"" at the end of the stream."""

    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None: ...


class PlainStream:
    """An asyncio stream pair, with bytes already read from it (`replay`) served first."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replay: bytes = b""
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._replay = replay

    async def read(self) -> bytes:
        if self._replay:
            data, self._replay = self._replay, b""
            return data
        return await self._reader.read(CHUNK)

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self._writer.wait_closed()


class TlsStream:
    """TLS over another ByteStream, through `ssl.SSLObject` and two memory BIOs."""

    def __init__(self, inner: ByteStream, tls: ssl.SSLObject, incoming: ssl.MemoryBIO,
                 outgoing: ssl.MemoryBIO) -> None:
        self._inner = inner
        self._tls = tls
        self._in = incoming
        self._out = outgoing

    @classmethod
    async def accept(cls, inner: ByteStream, context: ssl.SSLContext) -> TlsStream:
        """The server side of a handshake (raises ssl.SSLError, ConnectionError)."""
        return await cls._handshake(inner, context, server_side=True, server_hostname=None)

    @classmethod
    async def connect(cls, inner: ByteStream, context: ssl.SSLContext,
                      server_hostname: str) -> TlsStream:
        """The client side of a handshake, verifying the peer as `context` says."""
        return await cls._handshake(inner, context, server_side=False,
                                    server_hostname=server_hostname)

    @classmethod
    async def _handshake(cls, inner: ByteStream, context: ssl.SSLContext, *,
                         server_side: bool, server_hostname: str | None) -> TlsStream:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_side=server_side,
                               server_hostname=server_hostname)
        stream = cls(inner, tls, incoming, outgoing)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await stream._flush()
                if not await stream._fill():
                    raise ConnectionResetError("the peer closed during the TLS handshake") from None
        await stream._flush()
        return stream

    @property
    def alpn(self) -> str | None:
        return self._tls.selected_alpn_protocol()

    async def read(self) -> bytes:
        while True:
            try:
                return self._tls.read(CHUNK)
            except ssl.SSLWantReadError:
                await self._flush()  # e.g. a TLS 1.3 key update's answer
                if not await self._fill():
                    return b""  # closed without close_notify: the end all the same
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def write(self, data: bytes) -> None:
        self._tls.write(data)
        await self._flush()

    async def close(self) -> None:
        # unwrap() queues our close_notify, then wants the peer's, which nobody waits for.
        with contextlib.suppress(ssl.SSLError):
            self._tls.unwrap()
        with contextlib.suppress(OSError, ConnectionError):
            await self._flush()
        await self._inner.close()

    async def _fill(self) -> bool:
        data = await self._inner.read()
        if not data:
            self._in.write_eof()
            return False
        self._in.write(data)
        return True

    async def _flush(self) -> None:
        data = self._out.read()
        if data:
            await self._inner.write(data)
