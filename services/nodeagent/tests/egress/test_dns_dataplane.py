"""The whole non-TCP path by name on a real slot, no VM: a fake guest (a netns on the slot's
tap0) asks any address on port 53, nft redirects the query to the resolver's socket, the answer
for an allowed name lands in the slot's resolved set, and only then, and only until its TTL,
does the guest's UDP reach that address."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

import dns.message
import dns.rcode
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.egress.dns import SlotResolver
from aenv_nodeagent.egress.resolved import ResolvedNames
from aenv_nodeagent.network import EgressPolicy, firewall, slotops
from aenv_nodeagent.network.namespaces import enter_netns, run_in_fresh_thread
from aenv_nodeagent.network.resolved_sets import ResolvedSets

from ..network.helpers import INTERNET_SERVER_IP, attach_fake_guest, attach_fake_internet
from .dnsnet import DENIED, DOMAIN, UDP_NAME, DnsNet, dns_net, query_in, resolver_sockets

pytestmark = pytest.mark.netns

POLICY = EgressPolicy(cluster_pb2.NetworkPolicy(
    allow_internet_access=True, allow_out=[f"*.{DOMAIN}"], deny_out=[DENIED, "0.0.0.0/0"]))
ANY_RESOLVER = "192.0.2.53"  # the guest's own choice: nft hands the query to ours anyway


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.transport.sendto(data, addr)


@dataclass
class World:
    net: DnsNet
    guest: str
    echo_port: int

    async def udp_reaches_server(self) -> bool:
        """One datagram from a fresh guest socket (a new flow, so conntrack vouches for
        nothing) to the fake internet's echo server; True if it came back."""
        def send() -> bool:
            enter_netns(self.guest)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.settimeout(0.5)
                sock.sendto(b"ping", (INTERNET_SERVER_IP, self.echo_port))
                try:
                    return sock.recv(10) == b"ping"
                except TimeoutError:
                    return False
        return await run_in_fresh_thread(send, name="test-guest-udp")


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with dns_net() as net:
        slot, prefix = net.slot, net.config.prefix
        guest, internet = f"{prefix}gu", f"{prefix}in"  # swept with the prefix
        await run_in_fresh_thread(partial(attach_fake_guest, slot, guest), name="test-guest")
        await run_in_fresh_thread(partial(attach_fake_internet, slot, internet), name="test-inet")
        await run_in_fresh_thread(
            partial(slotops.apply_in_slot, slot, partial(_names_ruleset, net)), name="t")
        echo_sock = await run_in_fresh_thread(partial(_bound_udp, internet), name="test-echo")
        echo, _ = await asyncio.get_running_loop().create_datagram_endpoint(
            _Echo, sock=echo_sock)
        resolver = SlotResolver(slot.netns, POLICY.rules, ResolvedNames(), [net.node_upstream],
                                ResolvedSets(net.config).add)
        udp, tcp = await run_in_fresh_thread(partial(resolver_sockets, slot.netns), name="t")
        await resolver.start(udp, tcp)
        try:
            yield World(net, guest, echo_sock.getsockname()[1])
        finally:
            await resolver.stop()
            echo.close()


def _names_ruleset(net: DnsNet, host_addresses: list[str]) -> str:
    """The slot's rules for POLICY, as the manager renders them for a policy naming hosts."""
    blocked = [net.config.pool_cidr, *host_addresses]
    return firewall.render_policy_update(POLICY, blocked, net.slot, firewall.EgressPorts(),
                                         flush_resolved=True)


def _bound_udp(netns: str) -> socket.socket:
    enter_netns(netns)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((INTERNET_SERVER_IP, 0))
    return sock


async def test_udp_reaches_an_allowed_name_only_after_asking_and_until_its_ttl(
    world: World,
) -> None:
    assert not await world.udp_reaches_server()  # an address nobody resolved: denied

    asked = dns.message.make_query(DENIED, "A")
    reply = await query_in(world.guest, asked, ANY_RESOLVER, port=53)
    assert reply.rcode() == dns.rcode.NXDOMAIN  # our resolver's answer, not 192.0.2.53's

    reply = await query_in(world.guest, dns.message.make_query(UDP_NAME, "A"), ANY_RESOLVER,
                           port=53, tcp=True)
    assert [rd.address for rd in reply.answer[0]] == [INTERNET_SERVER_IP]
    assert reply.answer[0].ttl <= 5
    assert await world.udp_reaches_server()

    for _ in range(40):  # the set's element expires with the answer's 5 s TTL
        await asyncio.sleep(0.25)
        if not await world.udp_reaches_server():
            break
    assert not await world.udp_reaches_server()
