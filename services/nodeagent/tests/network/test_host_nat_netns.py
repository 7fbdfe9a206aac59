"""A guest's own traffic out of the node through the production path, on the real kernel: a fake
guest (helpers.attach_fake_guest) in a real slot, and a "world" netns the root netns routes a
public-looking /24 into, as an uplink would. Only the links the test makes are switched to
forward; nothing is sent anywhere but into these namespaces."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import cast

import pytest
from pyroute2 import IPRoute

from aenv_nodeagent.network import NetSlot, NetworkConfig, NetworkManager, netlink
from aenv_nodeagent.network.host_nat import HostNat, uplinks
from aenv_nodeagent.network.namespaces import (
    create_and_enter_netns,
    enter_netns,
    remove_netns,
    run_in_fresh_thread,
)
from aenv_nodeagent.network.nft import run_nft
from aenv_testing.subnets import free_subnet

from ..policies import egress
from .helpers import attach_fake_guest, in_netns, remove_everything_named

pytestmark = pytest.mark.netns

PORT = 7007
WAIT_S = 1.0


@dataclass
class World:
    """Servers in a netns of their own: `public` (two hosts, in the routed /24), `private` (the
    link's own address, a blocked range). TCP and UDP on PORT answer the peer's address."""

    netns: str
    root_link: str
    root_address: str
    private: str
    public: list[str]
    prefix: ipaddress.IPv4Network


def _forwarding(link: str) -> str:
    return Path(f"/proc/sys/net/ipv4/conf/{link}/forwarding").read_text().strip()


def _make_world(name: str, root_link: str) -> World:
    link = ipaddress.IPv4Network(free_subnet(30))
    routed = ipaddress.IPv4Network(free_subnet(24, within="198.19.0.0/16"))
    root_end, ns_end = str(link.network_address + 1), str(link.network_address + 2)
    public = [str(routed.network_address + 10), str(routed.network_address + 200)]
    with IPRoute() as root:
        create_and_enter_netns(name)
        with open("/proc/thread-self/ns/net", "rb") as here:
            root.link("add", ifname=root_link, kind="veth",
                      peer={"ifname": "eth0", "net_ns_fd": here.fileno()})
        index = root.link_lookup(ifname=root_link)[0]
        root.addr("add", index=index, address=root_end, prefixlen=30)
        root.link("set", index=index, state="up")
        root.route("add", dst=str(routed), gateway=ns_end)
    with IPRoute() as ns:
        for ifname in ("lo", "eth0"):
            ns.link("set", index=ns.link_lookup(ifname=ifname)[0], state="up")
        ns.addr("add", index=ns.link_lookup(ifname="eth0")[0], address=ns_end, prefixlen=30)
        for address in public:
            ns.addr("add", index=ns.link_lookup(ifname="lo")[0], address=address, prefixlen=32)
        ns.route("add", dst="0.0.0.0/0", gateway=root_end)
    return World(name, root_link, root_end, ns_end, public, routed)


async def _serve(world: World) -> list[asyncio.AbstractServer | asyncio.DatagramTransport]:
    """TCP and UDP echo of the peer's address on every host of the world."""
    def bind(kind: int, host: str) -> socket.socket:
        def make() -> socket.socket:
            enter_netns(world.netns)
            sock = socket.socket(socket.AF_INET, kind)
            sock.bind((host, PORT))
            if kind == socket.SOCK_STREAM:
                sock.listen()
            return sock
        return make()

    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(str(writer.get_extra_info("peername")[0]).encode())
        await writer.drain()
        writer.close()

    class Echo(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.DatagramTransport, transport)

        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            self.transport.sendto(addr[0].encode(), addr)

    loop = asyncio.get_running_loop()
    running: list[asyncio.AbstractServer | asyncio.DatagramTransport] = []
    for host in [*world.public, world.private]:
        tcp = await run_in_fresh_thread(partial(bind, socket.SOCK_STREAM, host), name="bind")
        running.append(await asyncio.start_server(greet, sock=tcp))
        udp = await run_in_fresh_thread(partial(bind, socket.SOCK_DGRAM, host), name="bind")
        transport, _ = await loop.create_datagram_endpoint(Echo, sock=udp)
        running.append(transport)
    return running


def _ask(kind: int, host: str) -> str:
    """From the guest: what the server saw as our address, or 'nothing' within WAIT_S."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.settimeout(WAIT_S)
        try:
            if kind == socket.SOCK_STREAM:
                sock.connect((host, PORT))
            else:
                sock.sendto(b"?", (host, PORT))
            return sock.recv(100).decode()
        except (TimeoutError, ConnectionError):
            return "nothing"


@dataclass
class Node:
    config: NetworkConfig
    world: World
    guest_ns: str
    slot: NetSlot
    host_nat: HostNat

    async def reach(self, host: str, kind: int = socket.SOCK_STREAM) -> str:
        return str(await in_netns(self.guest_ns, partial(_ask, kind, host)))


MakeNode = Callable[[list[str]], Awaitable[Node]]


def _unmake_world(name: str, root_link: str) -> None:
    with IPRoute() as root:
        netlink.delete_link(root, root_link)  # its route goes with it
    remove_netns(name)


@pytest.fixture
async def node_with(net_config: NetworkConfig) -> AsyncIterator[MakeNode]:
    """Builds the world and a node whose HostNat forwards to `destinations` (templates:
    `{public}` the first half of the world's /24, `{private}` its link's address), with one
    IP-only slot that allows everything: what passes or not is the node's forwarding."""
    # The root end is named outside the slots' prefix: it plays an uplink, not a slot.
    name, root_link = f"{net_config.prefix}w", f"{net_config.prefix[:7]}0w{net_config.prefix[-2:]}"
    stack = contextlib.AsyncExitStack()
    stack.push_async_callback(asyncio.to_thread, remove_everything_named, net_config.prefix)
    stack.push_async_callback(NetworkManager(net_config).destroy_orphans, set())
    stack.push_async_callback(asyncio.to_thread, _unmake_world, name, root_link)

    async def make(destinations: list[str]) -> Node:
        world = await run_in_fresh_thread(partial(_make_world, name, root_link), name="world")
        for server in await _serve(world):
            stack.callback(server.close)
        half = next(world.prefix.subnets(1))
        host_nat = HostNat.of(net_config, [
            ipaddress.IPv4Network(d.format(public=half, private=f"{world.private}/32"))
            for d in destinations])
        stack.push_async_callback(host_nat.remove)
        await host_nat.ensure()
        manager = NetworkManager(net_config, host_nat=host_nat)  # as the node wires it
        slot = await manager.create_slot(egress(allow_internet=True))
        guest_ns = f"{net_config.prefix}g{slot.index}"
        await run_in_fresh_thread(partial(attach_fake_guest, slot, guest_ns), name="guest")
        return Node(net_config, world, guest_ns, slot, host_nat)

    async with stack:
        yield make


def _uplinks(host_nat: HostNat) -> list[str]:
    with IPRoute() as root:  # pyroute2's sync API: off the running event loop
        return uplinks(root, host_nat.destinations, host_nat.config.prefix, host_nat.never)


def _tables() -> list[str]:
    return run_nft("list tables").split()


async def test_an_ip_only_guest_reaches_a_destination_through_the_node(
    node_with: MakeNode,
) -> None:
    node = await node_with(["{public}"])
    inside = node.world.public[0]
    # The world sees the node's address on its link: masqueraded twice (slot, then root).
    assert await node.reach(inside) == node.world.root_address
    assert await node.reach(inside, socket.SOCK_DGRAM) == node.world.root_address
    # Forwarding was switched on for the slot's veth and the world's link, the only uplink the
    # destination routes through (not the host's default route's).
    assert (_forwarding(node.slot.host_veth), _forwarding(node.world.root_link)) == ("1", "1")
    assert await asyncio.to_thread(_uplinks, node.host_nat) == [node.world.root_link]


async def test_a_destination_outside_the_setting_is_not_forwarded(
    node_with: MakeNode,
) -> None:
    node = await node_with(["{public}"])
    outside = node.world.public[1]  # in the routed /24, not in its first half
    assert await node.reach(outside) == "nothing"
    assert await node.reach(outside, socket.SOCK_DGRAM) == "nothing"
    assert await node.reach(node.world.public[0]) == node.world.root_address


async def test_no_destinations_forward_nothing_and_switch_no_link_on(
    node_with: MakeNode,
) -> None:
    node = await node_with([])
    for host in node.world.public:
        assert await node.reach(host) == "nothing"
        assert await node.reach(host, socket.SOCK_DGRAM) == "nothing"
    assert (_forwarding(node.slot.host_veth), _forwarding(node.world.root_link)) == ("0", "0")


async def test_a_private_range_stays_blocked_even_when_listed(
    node_with: MakeNode,
) -> None:
    node = await node_with(["{public}", "{private}"])
    assert await node.reach(node.world.private) == "nothing"
    assert await node.reach(node.world.private, socket.SOCK_DGRAM) == "nothing"
    assert await node.reach(node.world.public[0]) == node.world.root_address


async def test_a_restarted_node_keeps_one_table_and_its_guests_path(
    node_with: MakeNode,
) -> None:
    node = await node_with(["{public}"])
    again = HostNat.of(node.config, node.host_nat.destinations)
    await again.ensure()  # what the next start does
    assert _tables().count(node.host_nat.table) == 1
    assert await node.reach(node.world.public[0]) == node.world.root_address
    await again.remove()
    assert node.host_nat.table not in _tables()
    await again.remove()  # removing what is gone is no error (a cleanup after a stop)
