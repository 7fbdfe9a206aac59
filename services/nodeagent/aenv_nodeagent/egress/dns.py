"""The platform resolver: one per slot, on the UDP and TCP sockets the node agent made for it.

A sandbox whose policy needs the egress process has every DNS query it sends, to whatever
address on port 53, redirected by nft to ``GATEWAY_IP:15053`` in its netns; the agent creates
the listening sockets there and passes them to the egress process, which serves them from its
own (unprivileged, root-netns) side. The guest's own resolver choice therefore changes nothing.

Per query (``dns_messages`` holds the decisions and message building, ``dns_upstream`` the
exchange with upstream servers, ``dns_report`` what the agent is told):
- denied names answer NXDOMAIN, unlisted ones REFUSED when the policy denies unlisted traffic;
- the rest is asked of the sandbox's ``dnsServers``, else the node's configured upstreams;
- for a name the policy allows by name, the A/AAAA answers of the question's CNAME chain are
  recorded in the slot's ``ResolvedNames`` (which the TCP proxy asks before letting the name
  through) and reported to the agent, which puts the public ones in the slot's nft ``resolved``
  sets so UDP to them passes too. The guest gets its answer only after that report, so its
  first packet never races the set, and never with a TTL longer than the set holds it.

Each slot has its own limits: a token bucket of queries per second, a cap on queries in flight
and on TCP connections. What exceeds them is dropped (the guest's stub retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, cast

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype

from aenv_common.egress import EgressRules, NameClass, is_blocked

from .dns_messages import (
    Action,
    BadQuery,
    action_for,
    chain_addresses,
    error_reply,
    guest_reply,
    parse_query,
    question_name,
    reply_wire,
    udp_limit,
)
from .dns_report import Reporter, ReportResolved
from .dns_upstream import UpstreamFailed, exchange, upstream_query
from .resolved import MAX_TTL_S, MIN_TTL_S, IPAddress, ResolvedNames

log = logging.getLogger(__name__)

QUERIES_PER_SECOND = 100.0
QUERY_BURST = 200
MAX_IN_FLIGHT = 64
MAX_TCP_CONNECTIONS = 16
TCP_IDLE_S = 10.0
_LENGTH = struct.Struct("!H")


def servers_for(rules: EgressRules, node_upstreams: Sequence[str]) -> list[str]:
    """The sandbox's own DNS servers when it names any, else the node's upstreams. A sandbox's
    server in an always-blocked range is never asked (the platform would be sending the guest's
    packets into private space for it); the node's own upstreams are configuration, trusted."""
    own = [str(server) for server in rules.dns_servers if not is_blocked(server)]
    return own or list(node_upstreams)


@dataclass(frozen=True)
class Resolution:
    """A fresh answer: its A and AAAA addresses, held for the lowest TTL among them."""

    addresses: list[IPAddress]
    ttl_s: float


async def resolve(name: str, dns_servers: Sequence[str]) -> Resolution:
    """A fresh A and AAAA resolution of ``name`` (for a connection that names a host the guest
    did not ask our resolver about, e.g. from /etc/hosts). No addresses when the name has none,
    or ``name`` is no DNS name at all.

    :raise UpstreamFailed: no server answered either question (the caller may ask again)."""
    try:
        qname = dns.name.from_text(name)
    except dns.exception.DNSException:
        return Resolution([], MIN_TTL_S)
    found = await asyncio.gather(
        *(_addresses(qname, rdtype, dns_servers)
          for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)), return_exceptions=True)
    answers = [part for part in found if not isinstance(part, BaseException)]
    for failure in found:
        # One question answered is enough (an AAAA lost under load leaves the A addresses).
        if isinstance(failure, BaseException) and (
                not answers or not isinstance(failure, UpstreamFailed)):
            raise failure
    with_addresses = [part for part in answers if part[0]]
    return Resolution([address for part in with_addresses for address in part[0]],
                      min((ttl for _, ttl in with_addresses), default=MIN_TTL_S))


async def _addresses(
    qname: dns.name.Name, rdtype: dns.rdatatype.RdataType, servers: Sequence[str],
) -> tuple[list[IPAddress], float]:
    query = upstream_query(qname, rdtype)
    answer = await exchange(query, servers)
    _, addresses, ttl = chain_addresses(answer.answer, query.question[0].name)
    return addresses, ttl


class TokenBucket:
    """``rate`` takes per second, at most ``burst`` saved up."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self._rate, self._burst, self._clock = rate, float(burst), clock
        self._tokens, self._at = float(burst), clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class SlotResolver:
    """The resolver of one slot netns. ``update`` swaps the policy; ``stop`` closes the sockets,
    ends every query in flight and forgets what was resolved (the sandbox detached)."""

    def __init__(
        self, netns: str, rules: EgressRules, resolved: ResolvedNames,
        node_upstreams: Sequence[str], report: ReportResolved,
    ) -> None:
        self.netns = netns
        self._resolved = resolved
        self._upstreams = list(node_upstreams)
        self._reporter = Reporter(netns, report)
        self._bucket = TokenBucket(QUERIES_PER_SECOND, QUERY_BURST)
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._tcp_connections = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self.update(rules)

    def update(self, rules: EgressRules) -> None:
        self._rules = rules
        self._reporter.reset()  # the agent may have emptied the sets
        self._resolved.set_allowed(lambda name: rules.classify_name(name) is NameClass.ALLOWED)

    async def start(self, udp_sock: socket.socket, tcp_sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._udp, _ = await loop.create_datagram_endpoint(
            lambda: _UdpServer(self), sock=udp_sock)
        self._tcp = await asyncio.start_server(self._serve_tcp, sock=tcp_sock)

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._resolved.clear()

    def admit(self) -> bool:
        """Take one query's room under the slot's limits; False: drop it."""
        if not self._bucket.take() or self._in_flight >= MAX_IN_FLIGHT:
            log.debug("dns query dropped by the slot's limits", extra={"netns": self.netns})
            return False
        self._in_flight += 1
        return True

    async def answer(self, wire: bytes, *, tcp: bool, admitted: bool = False) -> bytes | None:
        """The reply to one query's bytes; None to stay silent (over limits, or not a query)."""
        if not admitted and not self.admit():
            return None
        try:
            return await self._answer(wire, tcp)
        except Exception:
            log.exception("dns query failed", extra={"netns": self.netns})
            return None
        finally:
            self._in_flight -= 1

    async def _answer(self, wire: bytes, tcp: bool) -> bytes | None:
        try:
            query = parse_query(wire)
        except BadQuery as bad:
            return bad.reply
        name = question_name(query)
        action = action_for(self._rules, name)
        log.debug("dns query", extra={"netns": self.netns, "host": name, "action": action.value})
        if action is Action.NXDOMAIN:
            return error_reply(query, dns.rcode.NXDOMAIN)
        if action is Action.REFUSED:
            return error_reply(query, dns.rcode.REFUSED)
        reply = await self._forward(query, name)
        if isinstance(reply, bytes):
            return reply
        return reply_wire(reply, 65535 if tcp else udp_limit(query))

    async def _forward(self, query: dns.message.Message, name: str) -> dns.message.Message | bytes:
        question = query.question[0]
        dnssec = bool(query.ednsflags & dns.flags.DO)
        asked = upstream_query(question.name, question.rdtype, dnssec=dnssec)
        try:
            upstream = await exchange(asked, servers_for(self._rules, self._upstreams))
        except UpstreamFailed as exc:
            log.info("dns upstream failed", extra={"netns": self.netns, "host": name,
                                                   "error": str(exc)})
            return error_reply(query, dns.rcode.SERVFAIL)
        chain, addresses, ttl = chain_addresses(upstream.answer, asked.question[0].name)
        # Only a name allowed by name is recorded: for any other, decide() judges the address
        # alone, and a guest asking random unlisted names must not fill the slot's record.
        if addresses and self._rules.classify_name(name) is NameClass.ALLOWED:
            ttl = self._resolved.record(name, addresses, ttl)
            ttl = await self._reporter.vouch(addresses, ttl)
        return guest_reply(query, upstream, chain, ttl if chain else MAX_TTL_S)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._tcp_connections >= MAX_TCP_CONNECTIONS:
            writer.close()
            return
        self._tcp_connections += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._tcp_queries(reader, writer)
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass
        finally:
            self._tcp_connections -= 1
            if task is not None:
                self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _tcp_queries(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
    ) -> None:
        """Length-prefixed queries, answered in order, until idle or a query gets no answer."""
        while True:
            header = await asyncio.wait_for(reader.readexactly(_LENGTH.size), TCP_IDLE_S)
            wire = await asyncio.wait_for(reader.readexactly(_LENGTH.unpack(header)[0]),
                                          TCP_IDLE_S)
            reply = await self.answer(wire, tcp=True)
            if reply is None:
                return
            writer.write(_LENGTH.pack(len(reply)) + reply)
            await writer.drain()


class _UdpServer(asyncio.DatagramProtocol):
    def __init__(self, resolver: SlotResolver) -> None:
        self._resolver = resolver
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Python 3.11's selector transport is not a DatagramTransport subclass, though it is one.
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        # Limits first, so a flood costs no task per datagram.
        if self._resolver.admit():
            self._resolver.spawn(self._reply(data, addr))

    async def _reply(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        reply = await self._resolver.answer(data, tcp=False, admitted=True)
        if reply is not None and self._transport is not None and not self._transport.is_closing():
            self._transport.sendto(reply, addr)
