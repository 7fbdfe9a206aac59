"""The proxy's judgement of a guest connection on loopback: the real ``SlotProxy`` and
``Interceptor`` with a plain-HTTP origin that records what it got, the original destination
given instead of read from nft. A client slow to name its host still gets its host's header
rules, whether the name comes within the wait or after it; a name reached without our resolver
is resolved afresh once, retried when no server answered, and remembered for its TTL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address

import dns.rdatatype
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress import EgressRules
from aenv_nodeagent.egress import dns_upstream
from aenv_nodeagent.egress.certs import EgressCA
from aenv_nodeagent.egress.dns import Resolution, resolve
from aenv_nodeagent.egress.dns_upstream import UpstreamFailed
from aenv_nodeagent.egress.intercept import Interceptor
from aenv_nodeagent.egress.proxy import NodeParts, ProxyLimits, Route, SlotProxy, Streams
from aenv_nodeagent.egress.resolved import IPAddress, ResolvedNames

from .dnsfakes import scripted_upstream
from .echo_upstream import EchoUpstream

HOST = "api.aenv-test.example"
ADDRESS = IPv4Address("203.0.113.10")
RULE = cluster_pb2.NetworkRule(host=HOST, transforms=[
    cluster_pb2.HeaderTransform(set_headers={"X-Rule": "applied"})])


def policy(*, deny_all: bool, rules: bool = True) -> EgressRules:
    return EgressRules.from_proto(cluster_pb2.NetworkPolicy(
        allow_internet_access=not deny_all, allow_out=[HOST], rules=[RULE] if rules else []))


@dataclass
class LoopbackDialer:
    """Every destination is the origin on loopback; remembers what it was asked to open."""

    port: int
    opened: list[tuple[str, int]] = field(default_factory=list)

    async def open(self, host: str | IPAddress, port: int) -> Streams:
        self.opened.append((str(host), port))
        return await asyncio.open_connection("127.0.0.1", self.port)


@dataclass
class Lookups:
    """A stand-in for dns.resolve: fails ``failures`` times, then answers ADDRESS."""

    failures: int = 0
    calls: int = 0

    async def __call__(self, name: str, servers: Sequence[str]) -> Resolution:
        self.calls += 1
        await asyncio.sleep(0.05)  # concurrent connections overlap with it
        if self.calls <= self.failures:
            raise UpstreamFailed("no answer from 1 upstream DNS server(s)")
        return Resolution([ADDRESS], 30.0)


@dataclass
class World:
    origin: EchoUpstream
    dialer: LoopbackDialer
    resolved: ResolvedNames
    proxy_port: int

    async def get(self, *, delay_s: float = 0.0) -> bytes:
        """A request naming HOST, sent ``delay_s`` after connecting; the answer or b"reset"."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.proxy_port)
        try:
            await asyncio.sleep(delay_s)
            writer.write(f"GET /x HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
                         .encode())
            return await asyncio.wait_for(reader.read(), 15)
        except ConnectionResetError:
            return b"reset"
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def running(rules: EgressRules, port: int, lookups: Lookups | None = None,
                  ) -> AsyncIterator[World]:
    """A slot proxy whose guest connections all went to ADDRESS:``port``."""
    origin = await EchoUpstream().start()
    resolved = ResolvedNames()
    dialer = LoopbackDialer(origin.port)
    parts = NodeParts(lambda _address: False, lookups or Lookups(),
                      Interceptor(EgressCA.generate()).intercept,
                      ProxyLimits(peek_timeout_s=0.25, name_wait_s=5.0))
    proxy = SlotProxy("ns-test", Route(rules, dialer, ["192.0.2.53"]), resolved,
                      lambda _name: None, parts)
    server = await asyncio.start_server(
        lambda r, w: proxy.handle(r, w, ADDRESS, port), "127.0.0.1", 0)
    try:
        yield World(origin, dialer, resolved, server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await proxy.stop()
        await origin.stop()


async def test_a_client_slow_to_name_a_rule_host_gets_its_rules_on_port_80() -> None:
    async with running(policy(deny_all=True), 80) as world:
        world.resolved.record(HOST, [ADDRESS], 60)
        assert (await world.get(delay_s=0.4)).startswith(b"HTTP/1.1 200")
        assert [seen.header("X-Rule") for seen in world.origin.seen] == [["applied"]]
        assert world.dialer.opened == [(str(ADDRESS), 80)]


async def test_any_port_of_a_rule_hosts_address_waits_for_the_name() -> None:
    async with running(policy(deny_all=True), 8080) as world:
        world.resolved.record(HOST, [ADDRESS], 60)
        assert (await world.get(delay_s=0.4)).startswith(b"HTTP/1.1 200")
        assert [seen.header("X-Rule") for seen in world.origin.seen] == [["applied"]]


async def test_a_rule_host_named_after_the_wait_is_intercepted_before_anything_goes_out() -> None:
    # Port 8080 towards an address no rule host is known at: the short peek, then the address
    # lets it through (unlisted); the name that comes late is judged the same way.
    lookups = Lookups()
    async with running(policy(deny_all=False), 8080, lookups) as world:
        assert (await world.get(delay_s=0.4)).startswith(b"HTTP/1.1 200")
        assert [seen.header("X-Rule") for seen in world.origin.seen] == [["applied"]]
        # The connection dialled for the silent guest carried nothing and was dropped.
        assert world.dialer.opened == [(str(ADDRESS), 8080)] * 2
        assert len(world.origin.seen) == 1
        assert lookups.calls == 1 and world.resolved.is_resolved_for(HOST, ADDRESS)


async def test_a_server_that_speaks_first_is_not_stalled_on_other_ports() -> None:
    async def banner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-test\r\n")
        await writer.drain()
        await reader.read()
        writer.close()

    async with running(policy(deny_all=False), 2222) as world:
        server = await asyncio.start_server(banner, "127.0.0.1", 0)
        world.dialer.port = server.sockets[0].getsockname()[1]
        try:
            started = time.monotonic()
            reader, writer = await asyncio.open_connection("127.0.0.1", world.proxy_port)
            assert await asyncio.wait_for(reader.readline(), 10) == b"SSH-2.0-test\r\n"
            assert time.monotonic() - started < 2.5  # the short peek, not the 5 s wait
            writer.close()
        finally:
            server.close()


Logged = Callable[[str], list[logging.LogRecord]]


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Logged:
    """The egress process's debug records with a given message."""
    caplog.set_level(logging.DEBUG, logger="aenv_nodeagent.egress")
    return lambda message: [r for r in caplog.records if r.getMessage() == message]


async def test_a_failed_lookup_is_retried_and_its_answer_remembered(logged: Logged) -> None:
    lookups = Lookups(failures=1)
    async with running(policy(deny_all=True, rules=False), 80, lookups) as world:
        answers = await asyncio.gather(*(world.get() for _ in range(3)))
        assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers)
        assert lookups.calls == 2  # three connections, one lookup asked twice
        assert world.resolved.is_resolved_for(HOST, ADDRESS)
        assert (await world.get()).startswith(b"HTTP/1.1 200")
        assert lookups.calls == 2  # the recorded answer serves the next connection
    assert [(r.__dict__["host"], r.__dict__["attempt"])
            for r in logged("egress lookup failed")] == [(HOST, 1)]


async def test_a_lookup_that_keeps_failing_refuses_saying_why(logged: Logged) -> None:
    lookups = Lookups(failures=10)
    async with running(policy(deny_all=True, rules=False), 80, lookups) as world:
        assert await world.get() == b"reset"
        assert world.origin.connections == 0
    assert [r.__dict__["reason"] for r in logged("egress decision")] == [
        "address not resolved for name (lookup failed: no answer from 1 upstream DNS server(s))"]


async def test_resolve_raises_when_no_server_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dns_upstream, "ATTEMPT_TIMEOUT_S", 0.1)
    upstream, server = await scripted_upstream(lambda _asked: [])
    try:
        with pytest.raises(UpstreamFailed):
            await resolve(HOST, [server])
        assert {q.question[0].rdtype for q in upstream.queries} == {
            dns.rdatatype.A, dns.rdatatype.AAAA}
    finally:
        assert upstream.transport is not None
        upstream.transport.close()
