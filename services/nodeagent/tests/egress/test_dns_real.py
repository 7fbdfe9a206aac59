"""The platform resolver against real DNS: dnsmasq upstream in its own netns, the resolver on
sockets in a real slot netns, queries asked from inside it, resolved addresses written to the
slot's real nft sets by the agent's ResolvedSets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from ipaddress import IPv4Address

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

from aenv_common.egress import EgressRules
from aenv_nodeagent.egress.dns import SlotResolver
from aenv_nodeagent.egress.resolved import ResolvedNames
from aenv_nodeagent.network.namespaces import enter_netns, run_in_fresh_thread
from aenv_nodeagent.network.resolved_sets import ResolvedSets
from aenv_nodeagent.network.slots import GATEWAY_IP

from .dnsfakes import rules
from .dnsnet import (
    ALIAS,
    ALLOWED,
    BIG,
    BIG_TEXT,
    DENIED,
    DNS_PORT,
    DOMAIN,
    MIXED,
    OTHER,
    SHORT,
    DnsNet,
    dns_net,
    query_in,
    resolver_sockets,
    set_elements,
)

pytestmark = pytest.mark.netns

POLICY = rules(allow=[ALLOWED, f"*.{DOMAIN}"], deny=[DENIED, "0.0.0.0/0"])


@dataclass
class Running:
    net: DnsNet
    resolver: SlotResolver
    resolved: ResolvedNames

    async def ask(self, name: str, rdtype: str = "A", tcp: bool = False) -> dns.message.Message:
        query = dns.message.make_query(name, rdtype)
        return await query_in(self.net.slot.netns, query, tcp=tcp)

    async def resolved4(self) -> str:
        return await run_in_fresh_thread(set_elements(self.net.slot.netns), name="test-list")


async def _start(net: DnsNet, policy: EgressRules) -> Running:
    sets = ResolvedSets(net.config)
    resolved = ResolvedNames()
    resolver = SlotResolver(net.slot.netns, policy, resolved, [net.node_upstream], sets.add)
    udp, tcp = await run_in_fresh_thread(lambda: resolver_sockets(net.slot.netns),
                                         name="test-sockets")
    await resolver.start(udp, tcp)
    return Running(net, resolver, resolved)


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    async with dns_net() as net:
        started = await _start(net, POLICY)
        try:
            yield started
        finally:
            await started.resolver.stop()


def _addresses(reply: dns.message.Message) -> set[str]:
    return {rd.address for rrset in reply.answer for rd in rrset if hasattr(rd, "address")}


async def test_allowed_names_are_forwarded_recorded_and_put_in_the_nft_set(
    running: Running,
) -> None:
    reply = await running.ask(ALLOWED)
    assert reply.rcode() == dns.rcode.NOERROR and _addresses(reply) == {"203.0.113.10"}
    assert running.resolved.is_resolved_for(ALLOWED, IPv4Address("203.0.113.10"))
    assert running.resolved.is_resolved_any_allowed(IPv4Address("203.0.113.10"))

    # a wildcard-allowed name with a private address besides its public one: the guest sees
    # both, the nft set gets only the public one
    reply = await running.ask(MIXED)
    assert _addresses(reply) == {"203.0.113.11", "10.1.2.3"}
    # a CNAME chain is recorded under the name the guest asked
    reply = await running.ask(ALIAS)
    assert _addresses(reply) == {"203.0.113.10"}
    assert running.resolved.is_resolved_for(ALIAS, IPv4Address("203.0.113.10"))

    listing = await running.resolved4()
    assert "203.0.113.10 timeout" in listing and "203.0.113.11 timeout" in listing
    assert "10.1.2.3" not in listing


async def test_denied_nxdomain_unlisted_refused_over_udp_and_tcp(running: Running) -> None:
    for tcp in (False, True):
        assert (await running.ask(DENIED, tcp=tcp)).rcode() == dns.rcode.NXDOMAIN
        assert (await running.ask("other.example.org", tcp=tcp)).rcode() == dns.rcode.REFUSED
        assert (await running.ask(ALLOWED, tcp=tcp)).rcode() == dns.rcode.NOERROR
    assert "203.0.113.13" not in await running.resolved4()


async def test_a_malformed_query_gets_formerr(running: Running) -> None:
    def send_garbage() -> bytes:
        import socket
        enter_netns(running.net.slot.netns)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(5)
            sock.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07trunc",
                        (GATEWAY_IP, DNS_PORT))
            return sock.recv(512)
    reply = await run_in_fresh_thread(send_garbage, name="test-garbage")
    assert reply[:2] == b"\x12\x34" and reply[3] & 0xF == dns.rcode.FORMERR


async def test_a_short_ttl_expires_from_the_record_and_the_set(running: Running) -> None:
    reply = await running.ask(SHORT)
    assert reply.answer[0].ttl <= 5
    assert running.resolved.is_resolved_any_allowed(IPv4Address("203.0.113.12"))
    assert "203.0.113.12 timeout 5s" in await running.resolved4()
    for _ in range(40):  # nft expires it at 5 s; give a loaded host 5 s more
        if "203.0.113.12" not in await running.resolved4():
            break
        await asyncio.sleep(0.25)
    assert "203.0.113.12" not in await running.resolved4()
    assert not running.resolved.is_resolved_any_allowed(IPv4Address("203.0.113.12"))


async def test_a_big_answer_comes_over_tcp_from_upstream(running: Running) -> None:
    # The resolver asks upstream with a 1232-byte EDNS size: dnsmasq truncates, the resolver
    # asks again over TCP. The guest's stub falls back to TCP itself on our truncated reply.
    def ask_with_fallback() -> tuple[dns.message.Message, bool]:
        enter_netns(running.net.slot.netns)
        query = dns.message.make_query(BIG, "TXT")
        return dns.query.udp_with_fallback(query, GATEWAY_IP, timeout=5, port=DNS_PORT)
    reply, used_tcp = await run_in_fresh_thread(ask_with_fallback, name="test-big")
    assert used_tcp and reply.rcode() == dns.rcode.NOERROR
    assert [s.decode() for rd in reply.answer[0] for s in rd.strings] == BIG_TEXT

    big_edns = dns.message.make_query(BIG, "TXT", use_edns=0, payload=4096)
    reply = await query_in(running.net.slot.netns, big_edns)
    assert not reply.flags & dns.flags.TC
    assert [s.decode() for rd in reply.answer[0] for s in rd.strings] == BIG_TEXT


async def test_the_sandboxs_dns_servers_and_a_policy_update_are_honoured() -> None:
    async with dns_net() as net:
        own = rules(allow=[ALLOWED], deny=["0.0.0.0/0"], dns_servers=[net.own_server])
        started = await _start(net, own)
        try:
            assert _addresses(await started.ask(ALLOWED)) == {"203.0.113.99"}
            assert (await started.ask(OTHER)).rcode() == dns.rcode.REFUSED
            started.resolver.update(rules(allow=[OTHER], deny=["0.0.0.0/0"]))
            assert (await started.ask(ALLOWED)).rcode() == dns.rcode.REFUSED
            assert _addresses(await started.ask(OTHER)) == {"203.0.113.14"}
            assert not started.resolved.is_resolved_any_allowed(IPv4Address("203.0.113.99"))
        finally:
            await started.resolver.stop()
