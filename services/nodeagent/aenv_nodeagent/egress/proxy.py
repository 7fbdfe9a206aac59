"""One slot's TCP egress: every guest connection nft redirected to the slot's proxy listener.

Per accepted connection: the address the guest dialled (SO_ORIGINAL_DST), dropped at once if it
is in a blocked range or one of the node's own; then the first bytes the guest sends, peeked
within bounds (16 KiB; up to ``name_wait_s`` where the client always speaks first, else
~250 ms so a protocol whose server speaks first is not stalled) for a TLS SNI or HTTP Host
(sniff.py); then the judgement (judge.py): denied, reset (RST, SO_LINGER 0); allowed with
header rules for the host, handed to ``intercept``; otherwise the same address and port are
dialled through the sandbox's dialer (direct or its SOCKS5 proxy) and the bytes spliced both
ways with backpressure, half-close and an idle timeout. Nothing of the guest's reaches the
upstream before that judgement.

A connection with no name by the wait's end (silent, or a head still unfinished) is judged by
its address and spliced; what the guest sends next is judged again, by the same judgement, once
it names a host: a denied name is reset, a rule host's connection — if nothing of the guest's
went out yet — is handed to ``intercept`` (on a fresh upstream connection), else reset, since
its header rules could no longer apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

from aenv_common.egress import EgressRules
from aenv_common.egress.rules import NetworkRule
from aenv_common.errors import AenvError, PermissionDenied

from .dialers import Blocked, Dialer
from .judge import Action, Dispatch, Handoff, Judge, Resolve
from .resolved import IPAddress, ResolvedNames
from .sniff import Sniffed, sniff
from .transforms import SecretLookup

log = logging.getLogger(__name__)

SO_ORIGINAL_DST = 80
IP6T_SO_ORIGINAL_DST = 80
PEEK_BYTES = 16 * 1024
CHUNK = 64 * 1024

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# Sees the client's first chunk (and may read on from its stream); returns what to forward.
Inspect = Callable[[bytes, asyncio.StreamReader], Awaitable[bytes]]
Intercept = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes, str, int,
                      Sequence[NetworkRule], Callable[[], Awaitable[Streams]], SecretLookup],
                     Awaitable[None]]


@dataclass(frozen=True)
class ProxyLimits:
    max_connections: int = 1024
    idle_timeout_s: float = 600.0
    peek_timeout_s: float = 0.25
    name_wait_s: float = 5.0  # where the client always speaks first (judge.Judge.patient)
    peek_bytes: int = PEEK_BYTES


@dataclass(frozen=True)
class Route:
    """What a slot's new connections are judged by and sent through; replaced on update."""

    rules: EgressRules
    dialer: Dialer
    dns_servers: Sequence[str]  # where a fresh resolution of a name goes


@dataclass(frozen=True)
class NodeParts:
    """What every slot's proxy shares in one egress process."""

    blocked: Blocked
    resolve: Resolve
    intercept: Intercept
    limits: ProxyLimits


class SlotProxy:
    def __init__(self, netns: str, route: Route, resolved: ResolvedNames,
                 secrets: SecretLookup, parts: NodeParts) -> None:
        self.netns = netns
        self.route = route
        self._judge = Judge(netns, resolved, parts.resolve)
        self._secrets = secrets
        self._parts = parts
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def start(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self._server = await asyncio.start_server(self._accepted, sock=listener,
                                                  limit=CHUNK)

    async def stop(self) -> None:
        """Stop accepting and end every connection of the slot."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._judge.close()

    async def _accepted(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        address, port = original_destination(writer.get_extra_info("socket"))
        await self.handle(reader, writer, address, port)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     address: IPAddress, port: int) -> None:
        """Serve one guest connection to ``address``:``port`` until it ends."""
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self._parts.limits.max_connections:
            log.warning("egress connection cap reached", extra={"netns": self.netns})
            reset(writer)
            return
        self._connections.add(task)
        try:
            await self._serve(reader, writer, address, port)
        except (AenvError, ConnectionError, TimeoutError, OSError) as err:
            # An upstream that cannot be dialled (refused, blocked, the proxy failing) looks
            # to the guest as a refused connection.
            log.debug("egress connection ended", extra={"netns": self.netns,
                                                        "error": type(err).__name__})
            reset(writer)
        except asyncio.CancelledError:
            # The slot's stop ends it. Not re-raised: Python 3.11's stream server reads the
            # exception of its finished callback task, which for a cancelled one logs an error.
            reset(writer)
        finally:
            self._connections.discard(task)
            if not writer.is_closing():
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     address: IPAddress, port: int) -> None:
        if self._parts.blocked(address):
            self._judge.log_decision(address, port, None, "blocked range", allowed=False)
            reset(writer)
            return
        route = self.route
        wait = self._wait(route, address, port)
        first, sniffed = await self._peek(reader, b"", wait)
        dispatch = await self._judge.dispatch(route.rules, route.dns_servers, address, port,
                                              sniffed.name)
        # No name by the wait's end (silent, or a head unfinished): what the guest sends next
        # is judged again once it names a host, before it goes out.
        late = None if sniffed.complete else partial(
            self._judge_late, route, address, port, first, wait)
        await self._carry(dispatch, route, reader, writer, address, port, first, late)

    async def _carry(self, dispatch: Dispatch, route: Route, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, address: IPAddress, port: int,
                     first: bytes, late: Inspect | None = None) -> None:
        """Carries out ``dispatch`` on a connection nothing was sent upstream for yet but
        ``first``; ``late`` judges the guest's next bytes of a spliced one."""
        if dispatch.action is Action.DENY:
            reset(writer)
            return

        async def dial() -> Streams:
            return await route.dialer.open(address, port)

        if dispatch.action is Action.INTERCEPT:
            await self._parts.intercept(reader, writer, first, dispatch.host, port,
                                        dispatch.rules, dial, self._secrets)
            return
        upstream_reader, upstream_writer = await dial()
        try:
            upstream_writer.write(first)
            await splice(reader, writer, upstream_reader, upstream_writer,
                         self._parts.limits.idle_timeout_s, late)
        except Handoff as handoff:  # the upstream got nothing: the rule host's gets it all
            upstream_writer.close()
            await self._carry(handoff.dispatch, route, reader, writer, address, port,
                              handoff.first)
        finally:
            upstream_writer.close()

    async def _judge_late(self, route: Route, address: IPAddress, port: int, sent: bytes,
                          wait: float, chunk: bytes, reader: asyncio.StreamReader) -> bytes:
        """The late bytes after ``sent`` (peeked, already forwarded), read on (bounded, as the
        peek) until together they can name a host; judged again if they do.

        :raise PermissionDenied: they name a host the policy refuses here, or a rule host
            after bytes went out (its rules could not apply).
        :raise Handoff: they name a rule host and nothing went out yet."""
        data, sniffed = await self._peek(reader, sent + chunk, wait)
        if sniffed.name is None:
            return data[len(sent):]
        dispatch = await self._judge.dispatch(route.rules, route.dns_servers, address, port,
                                              sniffed.name, when="late: ")
        if dispatch.action is Action.DENY:
            raise PermissionDenied(f"{dispatch.host}: {dispatch.reason}")
        if dispatch.action is Action.INTERCEPT:
            if sent:
                self._judge.log_decision(address, port, sniffed.name,
                                         "late: rule host after unnamed bytes went out",
                                         allowed=False)
                raise PermissionDenied(f"{dispatch.host}: header rules could not apply")
            raise Handoff(dispatch, data)
        return data[len(sent):]

    def _wait(self, route: Route, address: IPAddress, port: int) -> float:
        limits = self._parts.limits
        if self._judge.patient(route.rules, address, port):
            return max(limits.name_wait_s, limits.peek_timeout_s)
        return limits.peek_timeout_s

    async def _peek(self, reader: asyncio.StreamReader, data: bytes,
                    wait: float) -> tuple[bytes, Sniffed]:
        """The guest's first bytes (bounded; ``data``: those read already) and what they say:
        complete, with or without a name, or not (yet) by the wait's end."""
        limits = self._parts.limits
        deadline = time.monotonic() + wait
        while len(data) < limits.peek_bytes:
            sniffed = sniff(data)
            if sniffed.complete:
                return data, sniffed
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                chunk = await asyncio.wait_for(reader.read(limits.peek_bytes - len(data)),
                                               remaining)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
        return data, sniff(data)


def original_destination(sock: socket.socket) -> tuple[IPAddress, int]:
    """Where the guest connected before nft redirected it here."""
    if sock.family == socket.AF_INET6:
        raw = sock.getsockopt(socket.IPPROTO_IPV6, IP6T_SO_ORIGINAL_DST, 28)
        port = struct.unpack_from("!H", raw, 2)[0]
        return ipaddress.IPv6Address(raw[8:24]), port
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port = struct.unpack_from("!H", raw, 2)[0]
    return ipaddress.IPv4Address(raw[4:8]), port


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST: the guest sees its connection refused, not a clean end."""
    if writer.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def splice(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter,
                 upstream_reader: asyncio.StreamReader, upstream_writer: asyncio.StreamWriter,
                 idle_timeout_s: float, inspect_first: Inspect | None = None) -> None:
    """Copy both ways until both directions ended (each end's EOF is passed on as a
    half-close) or nothing moved for ``idle_timeout_s``. ``inspect_first`` sees the client's
    first chunk before anything is forwarded; a PermissionDenied or Handoff it raises is raised
    here."""
    last = [time.monotonic()]

    async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                   inspect: Inspect | None = None) -> None:
        while chunk := await source.read(CHUNK):
            if inspect is not None:
                chunk = await inspect(chunk, source)
                inspect = None
            sink.write(chunk)
            await sink.drain()  # backpressure: read no more than the other side takes
            last[0] = time.monotonic()
        if sink.can_write_eof():
            with contextlib.suppress(OSError):
                sink.write_eof()

    pumps = [asyncio.ensure_future(pump(client_reader, upstream_writer, inspect_first)),
             asyncio.ensure_future(pump(upstream_reader, client_writer))]
    pending: set[asyncio.Future[None]] = set(pumps)
    try:
        while pending:
            idle_left = last[0] + idle_timeout_s - time.monotonic()
            if idle_left <= 0:
                return
            done, pending = await asyncio.wait(pending, timeout=idle_left,
                                               return_when=asyncio.FIRST_COMPLETED)
            refused = pumps[0].exception() if pumps[0] in done else None
            if isinstance(refused, PermissionDenied | Handoff):
                raise refused
            if any(p.exception() for p in done):
                return  # one side broke: the other is cut too
    finally:
        for p in pumps:
            p.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
